package kubecheck

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tokensNS holds the service accounts of TestServiceAccountTokens.
const tokensNS = "kubecheck-tokens"

// mintToken asks the API server's TokenRequest API for a token of the service account sa, as the
// kubelet does for a projected volume.
func mintToken(t *testing.T, sa, audience string) string {
	t.Helper()
	// 10 minutes: the shortest lifetime the API server grants.
	seconds := int64(600)
	tr, err := cluster.Client.CoreV1().ServiceAccounts(tokensNS).CreateToken(ctx(t), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s, audience %s: %v", tokensNS, sa, audience, err)
	}
	return tr.Status.Token
}

// TestServiceAccountTokens mints service-account tokens through the real TokenRequest API and
// authenticates with them to a real gantry process that trusts the API server as a kubernetes
// issuer: first with the keys of a jwks_file written from the server's /openid/v1/jwks (offline, as
// docs/authenticating-services.md tells), then by OIDC discovery of the server's
// /.well-known/openid-configuration. gantry is run as its binary rather than imported: this module
// is not gantry's, and gantry's dependencies must stay at the versions of its own go.mod.
func TestServiceAccountTokens(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tokensNS}}
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx(t), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, sa := range []string{"orders", "billing"} {
		if _, err := cluster.Client.CoreV1().ServiceAccounts(tokensNS).Create(ctx(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// OIDC discovery is for clients without credentials: the binding Kubernetes' documentation gives
	// for that, of its default role system:service-account-issuer-discovery.
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubecheck-oidc-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}},
	}
	if _, err := cluster.Client.RbacV1().ClusterRoleBindings().Create(ctx(t), crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	jwks, err := cluster.Client.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx(t))
	if err != nil {
		t.Fatalf("GET /openid/v1/jwks: %v", err)
	}
	var keys struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &keys); err != nil || len(keys.Keys) == 0 {
		t.Fatalf("/openid/v1/jwks: %v, %s", err, jwks)
	}

	dir := t.TempDir()
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	orders := mintToken(t, "orders", "gantry")
	// The token is what a pod's projected volume holds: the API server's issuer and the namespace and
	// service account in the kubernetes.io claim, which gantry maps to a service.
	for _, tc := range []struct{ name, jwksLine string }{
		{"jwks_file", "jwks_file: " + jwksFile},
		{"oidc_discovery", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGantry(t, tc.jwksLine)
			// Until an issuer's keys are fetched once, its tokens answer 503: wait for the first answer
			// that is not.
			waitFor(t, "gantry's first verdict on a token", func() (bool, string) {
				code, body := g.whoami(orders)
				return code != 503 && code != 0, fmt.Sprintf("%d %s", code, body)
			})
			code, body := g.whoami(orders)
			var caller map[string]any
			json.Unmarshal([]byte(body), &caller)
			if code != 200 || caller["principal"] != "orders" || caller["auth_type"] != "kubernetes" {
				t.Fatalf("GET /v1/whoami with orders' token: %d %s, want 200 as the service orders by kubernetes\n%s", code, body, g.logs())
			}
			for _, c := range []struct{ name, token, want string }{
				{"another audience", mintToken(t, "orders", "vault"), "audience"},
				{"the API server's own audience", mintToken(t, "orders", cluster.URL), "audience"},
				{"an unmapped service account", mintToken(t, "billing", "gantry"), "no mapping"},
				{"a token altered after signing", tamper(t, orders), ""},
			} {
				code, body := g.whoami(c.token)
				if code != 403 || !strings.Contains(body, c.want) {
					t.Errorf("%s: %d %s, want 403 saying %q", c.name, code, body, c.want)
				}
			}

			// The gap docs/authenticating-services.md documents: gantry verifies the signature offline
			// and makes no TokenReview call, so the token of a deleted service account opens gantry
			// until it expires (the API server itself refuses it at once). Pinned here so a change of
			// either side is noticed and the documentation updated.
			if _, err := cluster.Client.CoreV1().ServiceAccounts(tokensNS).Create(ctx(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			doomed := mintToken(t, "doomed", "gantry")
			if code, body := g.whoami(doomed); code != 200 {
				t.Fatalf("doomed's token before its service account is deleted: %d %s", code, body)
			}
			if err := cluster.Client.CoreV1().ServiceAccounts(tokensNS).Delete(ctx(t), "doomed", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// The API server looks the service account up in its informer's cache, which learns of the
			// deletion a moment later: wait until its TokenReview refuses the token.
			waitFor(t, "the API server's TokenReview refusing the deleted service account's token", func() (bool, string) {
				review, err := cluster.Client.AuthenticationV1().TokenReviews().Create(ctx(t), &authenticationv1.TokenReview{
					Spec: authenticationv1.TokenReviewSpec{Token: doomed, Audiences: []string{"gantry"}}}, metav1.CreateOptions{})
				if err != nil {
					return false, err.Error()
				}
				return !review.Status.Authenticated, fmt.Sprintf("%+v", review.Status)
			})
			if code, body := g.whoami(doomed); code != 200 {
				t.Logf("gantry now refuses a deleted service account's token (%d %s): update docs/authenticating-services.md", code, body)
				t.Fail()
			}
		})
	}
}

// tamper changes the payload of a signed token, keeping its signature.
func tamper(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token of %d parts", len(parts))
	}
	p := []byte(parts[1])
	if p[5] == 'A' {
		p[5] = 'B'
	} else {
		p[5] = 'A'
	}
	return parts[0] + "." + string(p) + "." + parts[2]
}

// gantryProcess is one gantry (every role, on loopback ports) trusting the API server's tokens.
type gantryProcess struct {
	rest string
	out  *lockedBuffer
}

func (g *gantryProcess) logs() string { return tail(g.out.String(), 4000) }

// whoami calls GET /v1/whoami through the gateway with the token; 0 when gantry did not answer.
func (g *gantryProcess) whoami(token string) (int, string) {
	req, _ := http.NewRequest("GET", g.rest+"/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startGantry starts the gantry binary with an identities file trusting the API server as the
// kubernetes issuer prod-cluster, its keys from jwksLine (empty: OIDC discovery), and the service
// accounts orders and doomed of tokensNS mapped to the services of their names. It is stopped when
// the test ends.
func startGantry(t *testing.T, jwksLine string) *gantryProcess {
	t.Helper()
	dir := t.TempDir()
	identities := "identities:\n  issuers:\n" +
		"    - name: prod-cluster\n      kind: kubernetes\n      issuer: " + cluster.URL + "\n      audiences: [gantry]\n"
	if jwksLine != "" {
		identities += "      " + jwksLine + "\n"
	}
	identities += "  services:\n" +
		"    - {issuer: prod-cluster, namespace: " + tokensNS + ", service_account: orders, service: orders}\n" +
		"    - {issuer: prod-cluster, namespace: " + tokensNS + ", service_account: doomed, service: doomed}\n"
	file := filepath.Join(dir, "identities.yaml")
	if err := os.WriteFile(file, []byte(identities), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	cmd := exec.Command(filepath.Join(bins, "gantry"),
		"-gateway-listen="+addr(0), "-admin-listen="+addr(1), "-admin-grpc-listen="+addr(2),
		"-secrets-listen="+addr(3), "-chat-listen="+addr(4),
		"-data-dir="+filepath.Join(dir, "data"), "-shutdown-timeout=2s",
		"-workload-identity-file="+file, "-workload-jwks-timeout=5s")
	cmd.Dir = dir
	// gantry fetches the discovery document and the keys with Go's default TLS roots: the API
	// server's CA is made one with SSL_CERT_FILE, as an operator would add it to the system's.
	cmd.Env = append(withGantryEnvRemoved(os.Environ()), "SSL_CERT_FILE="+cluster.CAFile)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("gantry's output:\n%s", tail(out.String(), 6000))
		}
	})
	g := &gantryProcess{rest: "http://" + addr(0), out: out}
	waitFor(t, "gantry's gateway", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("gantry exited: %v\n%s", cmd.ProcessState, out.String())
		default:
		}
		resp, err := http.Get(g.rest + "/healthcheck")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return g
}

// withGantryEnvRemoved drops GANTRY_* settings of the environment the test runs in.
func withGantryEnvRemoved(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GANTRY_") {
			out = append(out, kv)
		}
	}
	return out
}
