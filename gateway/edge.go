package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// The edge policy: what a client's request may carry into the services. The gateway is the trust
// boundary, so everything is dropped unless it is on the allow-list; a header a client should not
// control (a deadline, gRPC metadata, a forwarded-for chain) never reaches a service as sent.

// maxRequestIDLen bounds a client-chosen request id.
const maxRequestIDLen = 128

// clientControlled lists request headers grpc-gateway would turn into call settings or trusted
// metadata: a client's Grpc-Timeout becomes the upstream deadline (so a client could time every call
// out and have the host ejected), and X-Forwarded-For/-Host are merged into the x-forwarded-*
// metadata the gateway derives from the connection. Every Grpc-* header is dropped besides.
var clientControlled = []string{wirekeys.ForwardedFor, wirekeys.ForwardedHost, "Forwarded"}

// edgeHeaders removes the headers a client may not control, and gives every request an id: an
// internal caller's when it is a plain token (so a service can follow its own request through), as
// Envoy keeps x-request-id only from internal downstreams; otherwise a new one.
func edgeHeaders(internal []netip.Prefix, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for name := range r.Header {
			if len(name) >= 5 && strings.EqualFold(name[:5], "grpc-") {
				r.Header.Del(name)
			}
		}
		for _, name := range clientControlled {
			r.Header.Del(name)
		}
		id := r.Header.Get(wirekeys.RequestID)
		if !validRequestID(id) || !isInternal(internal, r.RemoteAddr) {
			id = newRequestID()
			r.Header.Set(wirekeys.RequestID, id)
		}
		w.Header().Set(wirekeys.RequestID, id)
		next.ServeHTTP(w, r)
	})
}

// validRequestID accepts 1 to 128 characters of [A-Za-z0-9._-]: enough for UUIDs and Envoy's ids,
// nothing that could forge a log line or a header.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// headerAllowList returns the incoming-header matcher of the REST mux: only the named headers become
// gRPC metadata (under their lower-case names); everything else, every Grpc-Metadata-* header
// included, is dropped. grpc-gateway forwards Authorization on its own.
func headerAllowList(names []string) func(string) (string, bool) {
	// byCanonical answers the usual case, a header key in Go's canonical form, without lower-casing it
	// (an allocation per header of every request); any other spelling takes the general path.
	allowed := make(map[string]bool, len(names))
	byCanonical := make(map[string]string, len(names))
	for _, n := range names {
		lower := strings.ToLower(n)
		allowed[lower] = true
		byCanonical[textproto.CanonicalMIMEHeaderKey(n)] = lower
	}
	return func(key string) (string, bool) {
		if lower, ok := byCanonical[key]; ok {
			return lower, true
		}
		k := strings.ToLower(key)
		return k, allowed[k]
	}
}
