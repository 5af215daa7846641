package proxyadmin

import (
	"context"
	"strconv"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
	proxyadminv1 "github.com/gantry-dev/gantry/proto/proxyadmin/v1"
)

// Server is the gRPC transport of the admin interface: every RPC renders one page of the Service.
type Server struct {
	proxyadminv1.UnsafeProxyAdminServiceServer
	svc *Service
}

var _ proxyadminv1.ProxyAdminServiceServer = (*Server)(nil)

// NewServer returns the gRPC server of svc.
func NewServer(svc *Service) *Server { return &Server{svc: svc} }

// reply turns a page into the HttpBody answer, passing a non-200 status as response metadata.
func reply(ctx context.Context, p Page) (*httpbody.HttpBody, error) {
	if p.Code != 0 && p.Code != 200 {
		_ = grpc.SetHeader(ctx, metadata.Pairs(wirekeys.HTTPCode, strconv.Itoa(p.Code)))
	}
	return &httpbody.HttpBody{ContentType: p.ContentType, Data: []byte(p.Body)}, nil
}

// GetMenu implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetMenu(ctx context.Context, _ *proxyadminv1.GetMenuRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, textPage(200, Menu()))
}

// GetCerts implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetCerts(ctx context.Context, _ *proxyadminv1.GetCertsRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.Certs())
}

// GetClusters implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetClusters(ctx context.Context, req *proxyadminv1.GetClustersRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.Clusters(req.GetRawQuery()))
}

// SetCpuProfiler implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) SetCpuProfiler(ctx context.Context, req *proxyadminv1.SetCpuProfilerRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.CPUProfiler(req.GetRawQuery()))
}

// FailHealthcheck implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) FailHealthcheck(ctx context.Context, _ *proxyadminv1.FailHealthcheckRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.HealthcheckFail())
}

// PassHealthcheck implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) PassHealthcheck(ctx context.Context, _ *proxyadminv1.PassHealthcheckRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.HealthcheckOK())
}

// GetHotRestartVersion implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetHotRestartVersion(ctx context.Context, _ *proxyadminv1.GetHotRestartVersionRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.HotRestartVersion())
}

// SetLogging implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) SetLogging(ctx context.Context, req *proxyadminv1.SetLoggingRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.Logging(req.GetRawQuery()))
}

// QuitQuitQuit implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) QuitQuitQuit(ctx context.Context, _ *proxyadminv1.QuitQuitQuitRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.QuitQuitQuit())
}

// ResetCounters implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) ResetCounters(ctx context.Context, _ *proxyadminv1.ResetCountersRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.ResetCounters())
}

// GetServerInfo implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetServerInfo(ctx context.Context, req *proxyadminv1.GetServerInfoRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.ServerInfoPage(req.GetRawQuery()))
}

// GetStats implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetStats(ctx context.Context, req *proxyadminv1.GetStatsRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.Stats(req.GetRawQuery()))
}

// GetPrometheusStats implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetPrometheusStats(ctx context.Context, req *proxyadminv1.GetPrometheusStatsRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.Prometheus(req.GetRawQuery()))
}

// GetReady implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetReady(ctx context.Context, _ *proxyadminv1.GetReadyRequest) (*httpbody.HttpBody, error) {
	return reply(ctx, s.svc.Ready())
}
