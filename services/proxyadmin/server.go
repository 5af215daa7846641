package proxyadmin

import (
	"context"

	"google.golang.org/genproto/googleapis/api/httpbody"

	proxyadminv1 "github.com/gantry-dev/gantry/proto/proxyadmin/v1"
)

// TextContentType is the content type of every text admin page, as modern Envoy sends it.
const TextContentType = "text/plain; charset=UTF-8"

// Server is the gRPC transport of the admin interface.
//
// It embeds the generated Unimplemented server while the cluster, stats and control endpoints are
// built; they answer codes.Unimplemented (HTTP 501) until then.
type Server struct {
	proxyadminv1.UnimplementedProxyAdminServiceServer
	svc *Service
}

var _ proxyadminv1.ProxyAdminServiceServer = (*Server)(nil)

// NewServer returns the gRPC server of svc.
func NewServer(svc *Service) *Server { return &Server{svc: svc} }

func text(s string) *httpbody.HttpBody {
	return &httpbody.HttpBody{ContentType: TextContentType, Data: []byte(s)}
}

// GetMenu implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetMenu(context.Context, *proxyadminv1.GetMenuRequest) (*httpbody.HttpBody, error) {
	return text(Menu()), nil
}

// GetServerInfo implements proxyadminv1.ProxyAdminServiceServer.
func (s *Server) GetServerInfo(context.Context, *proxyadminv1.GetServerInfoRequest) (*httpbody.HttpBody, error) {
	return text(s.svc.ServerInfo()), nil
}
