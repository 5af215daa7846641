package gateway

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/audit"
	proxyadminv1 "github.com/gantry-dev/gantry/proto/proxyadmin/v1"
)

// adminMutations are the admin RPCs that change the running gateway (proxyadmin.MutatingPaths as
// methods): each one that is served leaves an audit record.
var adminMutations = map[string]string{
	proxyadminv1.ProxyAdminService_SetCpuProfiler_FullMethodName:  "cpuprofiler",
	proxyadminv1.ProxyAdminService_FailHealthcheck_FullMethodName: "healthcheck/fail",
	proxyadminv1.ProxyAdminService_PassHealthcheck_FullMethodName: "healthcheck/ok",
	proxyadminv1.ProxyAdminService_SetLogging_FullMethodName:      "logging",
	proxyadminv1.ProxyAdminService_QuitQuitQuit_FullMethodName:    "quitquitquit",
	proxyadminv1.ProxyAdminService_ResetCounters_FullMethodName:   "reset_counters",
}

// adminAudit records every admin mutation on the audit trail after it was served, with the query it
// was given (the admin listener has no authentication: the principal is empty, the client address
// says who). The record is written after the fact and never blocks the mutation: draining or stopping
// a gateway must stay possible while the trail is down (the sink's failure is on the error log).
func adminAudit(trail *audit.Sink) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resource, mutation := adminMutations[info.FullMethod]
		query := ""
		if q, ok := req.(interface{ GetRawQuery() string }); ok {
			query = q.GetRawQuery()
		}
		// GET /logging without a query lists the levels: a read.
		if !mutation || trail == nil || (info.FullMethod == proxyadminv1.ProxyAdminService_SetLogging_FullMethodName && query == "") {
			return handler(ctx, req)
		}
		resp, err := handler(ctx, req)
		r := audit.GRPCCall(ctx, "admin", info.FullMethod).Record(audit.Allowed)
		r.Action = info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		r.Resource, r.ResourceID, r.AuthType = resource, query, "admin-listener"
		if err != nil {
			r.Outcome, r.Code = audit.Failed, status.Code(err).String()
		}
		_ = trail.Write(r)
		return resp, err
	}
}
