package proxyadmin

import (
	"net/http"
	"testing"
	"time"
)

// FuzzAdminQuery sends arbitrary query strings to every admin page that reads one: nothing panics
// and no answer is a 5xx (bad parameters are Envoy's 400 text answers).
func FuzzAdminQuery(f *testing.F) {
	for _, q := range []string{"", "format=json", "filter=cluster", "filter=(", "usedonly", "format=prometheus", "format=xml",
		"gateway=debug", "level=info", "level=nope", "paths=gateway:debug", "enable=n", "enable=", "%zz", "a=1&a=2&filter=%00",
		"filter=" + "((((((((((a))))))))))*+", "format=json&usedonly&filter=.*"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		svc := NewService(newFakeProxy(t), time.Now())
		for name, page := range map[string]Page{
			"stats": svc.Stats(q), "clusters": svc.Clusters(q), "server_info": svc.ServerInfoPage(q), "logging": svc.Logging(q),
		} {
			if page.Code >= http.StatusInternalServerError || page.Code == 0 {
				t.Fatalf("/%s?%s answered %d: %s", name, q, page.Code, page.Body)
			}
		}
	})
}
