package e2e

import (
	"fmt"
	"net"
	"net/http"
	"testing"
)

// BenchmarkLimit measures the ceiling of this machine for the read workloads: a bare net/http server
// on loopback returning, from memory, the exact body the gateway returns for each read of
// BenchmarkReads, driven by the same 16 clients. The workloads' req/s divided by these is comparable
// across machines (and across runs on a shared machine), where raw req/s is not.
func BenchmarkLimit(b *testing.B) {
	s := startStack(b, unlimitedWrites)
	bodies := map[string][]byte{}
	for name, path := range readPaths(b, s) {
		r := s.get(path)
		if r.code != http.StatusOK {
			b.Fatalf("%s: %d %s", path, r.code, r.body)
		}
		bodies[name] = r.body
	}
	for _, name := range readWorkloads {
		b.Run(name, func(b *testing.B) {
			body := bodies[name]
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(body)
			})}
			go func() { _ = srv.Serve(lis) }()
			defer srv.Close()
			url := "http://" + lis.Addr().String() + "/"
			runClients(b, func(int) error {
				r := s.do(http.MethodGet, url, "", nil)
				if r.code != http.StatusOK || len(r.body) != len(body) {
					return fmt.Errorf("bare server: %d, %d bytes", r.code, len(r.body))
				}
				return nil
			})
		})
	}
}
