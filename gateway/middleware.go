package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/pkg/netlimits"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	"github.com/gantry-dev/gantry/pkg/workload"
)

// markInternal strips any client-sent x-proxy-internal and sets it to "true" when the downstream
// address is in one of the internal networks. The caller-identity header is only trusted from
// internal downstreams.
func markInternal(internal []netip.Prefix, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(wirekeys.ProxyInternal)
		if isInternal(internal, r.RemoteAddr) {
			r.Header.Set(wirekeys.ProxyInternal, "true")
		} else {
			r.Header.Del(wirekeys.DownstreamServiceCluster)
		}
		next.ServeHTTP(w, r)
	})
}

// forwardClientCert strips any client-sent wirekeys.ClientCert and, when the caller presented a
// client certificate on the TLS handshake (which proves it holds the key), sets it to the presented
// chain for the secrets service to verify.
func forwardClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(wirekeys.ClientCert)
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			r.Header.Set(wirekeys.ClientCert, workload.EncodeChain(r.TLS.PeerCertificates))
		}
		next.ServeHTTP(w, r)
	})
}

func isInternal(internal []netip.Prefix, remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range internal {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// limitBody rejects bodies larger than limit with 413 before any upstream sees them. The body is read
// here (at most limit+1 bytes), so a lying or absent Content-Length cannot get past the limit.
func limitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tooLarge := fmt.Sprintf("request body exceeds the limit of %d bytes", limit)
		if r.ContentLength > limit {
			writeJSONError(w, http.StatusRequestEntityTooLarge, tooLarge, nil)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
			if err != nil {
				writeBadRequest(w, r, "could not read the request body")
				return
			}
			if int64(len(data)) > limit {
				writeJSONError(w, http.StatusRequestEntityTooLarge, tooLarge, nil)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(data))
		}
		next.ServeHTTP(w, r)
	})
}

// limitQuery answers 400 to a request with more query parameters than the limits allow, before any
// parser builds a map of them: no route takes more than a handful.
func limitQuery(limits netlimits.Config, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if limits.TooManyQueryParams(r.URL.RawQuery) {
			writeBadRequest(w, r, fmt.Sprintf("too many query parameters (the limit is %d)", limits.MaxQueryParams))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireUTF8 answers 400 to a request whose decoded path or query is not valid UTF-8. Path and query
// parameters become proto string fields, which gRPC refuses to marshal when they are not UTF-8: left
// to the upstream call, such a request would end as a 500.
func requireUTF8(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) || !validQuery(r.URL.RawQuery) {
			writeBadRequest(w, r, "the request path and query must be valid UTF-8")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// validQuery reports whether every decoded key and value of a query is UTF-8; undecodable escapes are
// left to the query parser, which answers 400 for them.
func validQuery(raw string) bool {
	if raw == "" {
		return true
	}
	values, _ := url.ParseQuery(raw)
	for k, vs := range values {
		if !utf8.ValidString(k) {
			return false
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}

// securityHeaders go with every REST answer: browsers use this listener (the web UI), so no answer may
// be framed or content-sniffed, leak its URL as a referrer, or be cached when it may carry secret
// values (every secrets route, /v1/...).
//
// The values are shared slices, assigned under their canonical names: Header.Set would allocate a
// slice per header per request on the hot path, and net/http only reads them.
//
// An answer over HTTPS carries Strict-Transport-Security when hstsMaxAge is positive (HSTS is only
// honoured over HTTPS, and sent over HTTP it could pin a host that does not serve HTTPS).
func securityHeaders(hstsMaxAge time.Duration, next http.Handler) http.Handler {
	var (
		nosniff    = []string{"nosniff"}
		deny       = []string{"DENY"}
		noReferrer = []string{"no-referrer"}
		noStore    = []string{"no-store"}
		hsts       []string
	)
	if seconds := int64(hstsMaxAge / time.Second); seconds > 0 {
		hsts = []string{"max-age=" + strconv.FormatInt(seconds, 10)}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if r.TLS != nil && hsts != nil {
			h["Strict-Transport-Security"] = hsts
		}
		h["X-Content-Type-Options"] = nosniff
		h["X-Frame-Options"] = deny
		h["Referrer-Policy"] = noReferrer
		if strings.HasPrefix(r.URL.Path, routePrefixes[upstream.ClusterSecrets]) {
			h["Cache-Control"] = noStore
		}
		next.ServeHTTP(w, r)
	})
}
