package gateway

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// TestLatencyByRoute: the REST listener's latency by route template and method (issue 42): requests
// to one route with different values share its template's series; a path or a method no route
// serves, however many, goes to the one "other" series; the health check has its own.
func TestLatencyByRoute(t *testing.T) {
	h := startHarness(t, nil)
	for _, team := range []string{"echo", "echo", "acme"} {
		do(t, "GET", h.rest+"/api/v1/chat/get_team/"+team, nil, nil)
	}
	do(t, "GET", h.rest+"/v1/credentials/abc", nil, nil) // a secrets route: its host is down, 503
	do(t, "PUT", h.rest+"/v1/credentials/abc", strings.NewReader(`{}`), http.Header{"Content-Type": {"application/json"}})
	do(t, "DELETE", h.rest+"/v1/credentials/abc", nil, nil) // 405: no such route
	for _, path := range []string{"/no/such/path", "/v1/nothing-here/1", "/v1/nothing-here/2"} {
		do(t, "GET", h.rest+path, nil, nil)
	}
	do(t, "BREW", h.rest+"/api/v1/chat/get_team/echo", nil, nil) // 405: no route, whatever the method
	do(t, "GET", h.rest+"/healthcheck", nil, nil)

	_, _, body := do(t, "GET", h.admin+"/stats?filter=route", nil, nil)
	for _, name := range []string{
		"http.ingress.route.GET./api/v1/chat/get_team/{team_name}.downstream_rq_time: P0(",
		"http.ingress.route.GET./v1/credentials/{id}.downstream_rq_time: P0(",
		"http.ingress.route.PUT./v1/credentials/{id}.downstream_rq_time: P0(",
		"http.ingress.route.GET.other.downstream_rq_time: P0(",
		"http.ingress.route.other.other.downstream_rq_time: P0(",
		"http.ingress.route.GET./healthcheck.downstream_rq_time: P0(",
	} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/stats lacks %s...:\n%s", name, body)
		}
	}
	if strings.Contains(string(body), "acme") || strings.Contains(string(body), "nothing-here") || strings.Contains(string(body), "BREW") {
		t.Errorf("a request's own path or method became a stat:\n%s", body)
	}
	_, _, prom := do(t, "GET", h.admin+"/stats/prometheus?filter=route", nil, nil)
	for _, line := range []string{
		"# TYPE envoy_http_route_downstream_rq_time histogram\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="GET",route="/api/v1/chat/get_team/{team_name}"} 3` + "\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="GET",route="/v1/credentials/{id}"} 1` + "\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="PUT",route="/v1/credentials/{id}"} 1` + "\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="GET",route="other"} 3` + "\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="DELETE",route="other"} 1` + "\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="other",route="other"} 1` + "\n",
		`envoy_http_route_downstream_rq_time_count{envoy_http_conn_manager_prefix="ingress",method="GET",route="/healthcheck"} 1` + "\n",
	} {
		if !strings.Contains(string(prom), line) {
			t.Errorf("/stats/prometheus lacks %s:\n%s", line, prom)
		}
	}
	// The admin listener has no route series.
	if strings.Contains(string(prom), `envoy_http_conn_manager_prefix="admin"`) {
		t.Errorf("admin requests by route:\n%s", prom)
	}
}

// TestRouteTemplateIsTheProtos: the route label of every REST route of both services is the path
// template its proto declares, as routeMetadata passes it on, not grpc-gateway's {id=*} spelling.
func TestRouteTemplateIsTheProtos(t *testing.T) {
	param := regexp.MustCompile(`\{[^}]+\}`)
	n := 0
	for _, sd := range []protoreflect.ServiceDescriptor{
		secretsv1.File_secrets_v1_secrets_proto.Services().ByName("SecretsService"),
		chatv1.File_chat_v1_chat_proto.Services().ByName("ChatService"),
	} {
		table, err := rpcpolicy.For(sd)
		if err != nil {
			t.Fatal(err)
		}
		for method, policy := range table {
			for _, route := range policy.Routes {
				mux := runtime.NewServeMux(runtime.WithMiddlewares(labelRoute))
				if err := mux.HandlePath(route.Method, route.Template, func(http.ResponseWriter, *http.Request, map[string]string) {}); err != nil {
					t.Fatalf("%s %s: %v", method, route.Template, err)
				}
				rec := &statusRecorder{ResponseWriter: httptest.NewRecorder()}
				mux.ServeHTTP(rec, httptest.NewRequest(route.Method, param.ReplaceAllString(route.Template, "x"), nil))
				if rec.route != route.Template || rec.method != route.Method {
					t.Errorf("%s: %s %s labelled %s %s", method, route.Method, route.Template, rec.method, rec.route)
				}
				n++
			}
		}
	}
	if n < 40 {
		t.Fatalf("only %d routes", n)
	}
	t.Logf("%d routes", n)
}
