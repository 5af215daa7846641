package chat

import (
	"context"

	"github.com/gantry-dev/gantry/pkg/rpcpolicy"
	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// RefuseBeforeBody runs the access control of a chat route before the gateway reads the request's
// body, and returns the gRPC status AccessInterceptor would answer the call with when access control
// denies it (the same code and message); nil lets the call through to the service, which checks it
// again. Access control reads only the route the call came by (its path, with the path parameters
// filled in) and request headers, never the body, so the decision is the service's own.
//
// template is the path template of the route the gateway's router matched (what it sends as
// wirekeys.ProxyRoute), params the path parameters it extracted; header returns a header as the
// service would receive it in metadata and whether the gateway knows it (it forwards only an
// allow-list). When the decision would read a header the gateway cannot vouch for, or a path field
// that is not a path parameter, the call goes through: the service decides.
func (s *Server) RefuseBeforeBody(fullMethod, template string, params map[string]string, header func(name string) (string, bool)) error {
	policy, ok := policies.Lookup(fullMethod)
	if !ok || policy.Access != optionsv1.Access_ACCESS_CHAT_ROUTE || len(policy.Routes) == 0 {
		return nil
	}
	ar, err := accessRequest(policy, []string{template}, func(r rpcpolicy.Route) (string, bool) { return r.PathFromParams(params) })
	if err != nil || ar.Path == "" {
		return nil
	}
	unknown := false
	ar.Header = func(name string) string {
		v, known := header(name)
		if !known {
			unknown = true
		}
		return v
	}
	err = s.svc.Authorize(ar)
	if err == nil || unknown {
		return nil
	}
	return toStatus(context.Background(), s.logger, err)
}
