package chat

import (
	"context"

	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// RefuseBeforeBody runs the access control of a chat route before the gateway reads the request's
// body, and returns the gRPC status AccessInterceptor would answer the call with when access control
// denies it (the same code and message); nil lets the call through to the service, which checks it
// again. Access control reads only the route (the method's REST paths with the path parameters
// filled in) and request headers, never the body, so the decision is the service's own.
//
// params are the path parameters the gateway's router extracted; header returns a header as the
// service would receive it in metadata and whether the gateway knows it (it forwards only an
// allow-list). When the decision would read a header the gateway cannot vouch for, or a path field
// that is not a path parameter, the call goes through: the service decides.
func (s *Server) RefuseBeforeBody(fullMethod string, params map[string]string, header func(name string) (string, bool)) error {
	policy, ok := policies.Lookup(fullMethod)
	if !ok || policy.Access != optionsv1.Access_ACCESS_CHAT_ROUTE || len(policy.Routes) == 0 {
		return nil
	}
	paths := make([]string, 0, len(policy.Routes))
	for _, r := range policy.Routes {
		p, ok := r.PathFromParams(params)
		if !ok {
			return nil
		}
		paths = append(paths, p)
	}
	unknown := false
	err := s.svc.Authorize(AccessRequest{Method: policy.Routes[0].Method, Paths: paths, Header: func(name string) string {
		v, known := header(name)
		if !known {
			unknown = true
		}
		return v
	}})
	if err == nil || unknown {
		return nil
	}
	return toStatus(context.Background(), s.logger, err)
}
