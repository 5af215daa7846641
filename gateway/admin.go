package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gantry-dev/gantry/gateway/webui"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/proxyadmin"
)

// rawQueryParser hands the admin services their whole query string: Envoy's admin parameters have
// free-form names (/logging?<logger>=<level>) that no request field could declare. Messages with a
// raw_query field (only admin requests have one) get the re-encoded query; every other message is
// checked (checkQuery: a value of the wrong type is a 400 naming the parameter, booleans take
// Confidant's spellings) and parsed the default way. grpc-gateway keeps the query parser in a package
// variable shared by all muxes, which is why this parser must also do the default job.
type rawQueryParser struct{}

func (rawQueryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	m := msg.ProtoReflect()
	if fd := m.Descriptor().Fields().ByName("raw_query"); fd != nil && fd.Kind() == protoreflect.StringKind {
		m.Set(fd, protoreflect.ValueOfString(values.Encode()))
		return nil
	}
	checked, err := checkQuery(msg, values, filter)
	if err != nil {
		return err
	}
	return (&runtime.DefaultQueryParser{}).Parse(msg, checked, filter)
}

var queryParserOnce sync.Once

// installQueryParser installs rawQueryParser once per process: the option writes grpc-gateway's
// package variable, so applying it for every gateway would race with requests that gateways already
// created are parsing (several gateways share a process in tests).
func installQueryParser() runtime.ServeMuxOption {
	return func(mux *runtime.ServeMux) {
		queryParserOnce.Do(func() { runtime.SetQueryParameterParser(rawQueryParser{})(mux) })
	}
}

// adminRoutingErrorHandler answers an unknown admin path with the menu and 404, as Envoy 1.x does.
func adminRoutingErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus != http.StatusNotFound {
		routingErrorHandler(r.Context(), nil, nil, w, r, httpStatus)
		return
	}
	w.Header().Set("Content-Type", proxyadmin.TextContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(proxyadmin.Menu()))
}

// adminMethods lets the admin endpoints answer POST as well as GET (the generated routes are GET):
// a POST is served as the GET of the same path, its form body standing in for an empty query
// string, as Envoy reads parameters. With AdminPostOnly (the default, as modern Envoy) the mutating
// endpoints refuse GET with 405 and Envoy's message; listing loggers with a bare GET /logging stays
// allowed.
func (g *Gateway) adminMethods(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if webui.AdminHandler(w, r) {
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if g.cfg.AdminPostOnly && proxyadmin.MutatingPaths[r.URL.Path] && !(r.URL.Path == "/logging" && r.URL.RawQuery == "") {
				w.Header().Set("Content-Type", proxyadmin.TextContentType)
				w.Header().Set("Allow", http.MethodPost)
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.WriteHeader(http.StatusMethodNotAllowed)
				_, _ = fmt.Fprintf(w, "Method %s not allowed, POST required.", r.Method)
				return
			}
		case http.MethodPost:
			r = r.Clone(r.Context())
			if r.URL.RawQuery == "" && strings.HasPrefix(r.Header.Get("Content-Type"), formContentType) {
				if err := r.ParseForm(); err == nil {
					r.URL.RawQuery = r.PostForm.Encode()
				}
			}
			r.Method = http.MethodGet
			r.Body = http.NoBody
			r.ContentLength = 0
			r.Header.Del("Content-Type")
		}
		next.ServeHTTP(w, r)
	})
}

// adminGuard refuses admin requests a browser page could have sent on an operator's behalf: the admin
// interface has no authentication, so a page must not be able to drive it (a cross-site form POST to
// /quitquitquit) or read it through DNS rebinding (a name of the attacker's resolving to 127.0.0.1).
// A request passes when its Host names this listener (the connection's local IP, localhost on a
// loopback listener, or an -admin-allowed-hosts name) and it is not cross-site (Sec-Fetch-Site, or an
// Origin other than the Host's own). curl and scripts send neither header and pass.
func (g *Gateway) adminGuard(next http.Handler) http.Handler {
	allowed := map[string]bool{}
	for _, h := range settings.SplitList(g.cfg.AdminAllowedHosts) {
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !adminHostAllowed(r, allowed) {
			writeJSONError(w, http.StatusForbidden, "the admin interface answers only requests addressed to its own address (Host "+
				strconv.Quote(r.Host)+" is not; see -admin-allowed-hosts)", nil)
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			writeJSONError(w, http.StatusForbidden, "cross-site requests to the admin interface are refused", nil)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && origin != "http://"+r.Host && origin != "https://"+r.Host {
			writeJSONError(w, http.StatusForbidden, "cross-origin requests to the admin interface are refused", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminHostAllowed checks the Host header (its port aside) against the listener's own address.
func adminHostAllowed(r *http.Request, allowed map[string]bool) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "" {
		return false
	}
	if allowed[host] {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ap, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return false
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.Unmap() == ap.Addr().Unmap()
	}
	return host == "localhost" && ap.Addr().IsLoopback()
}
