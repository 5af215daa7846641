package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcstats "google.golang.org/grpc/stats"

	"github.com/gantry-dev/gantry/gateway"
	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/memconn"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	chatadminv1 "github.com/gantry-dev/gantry/proto/chatadmin/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/proxyadmin"
	"github.com/gantry-dev/gantry/services/secrets"
)

// process is what the roles of one process share while Start builds them.
type process struct {
	cfg    Config
	roles  []string
	logger *zap.Logger
	// life runs what the roles serve and closes what they open.
	life  *lifecycle
	itls  *internaltls.Internal
	audit *audit.Sink
	stats *stats.Store
}

// openProcess opens what every role of the process shares: the data folder, internal TLS and one
// audit trail.
func openProcess(cfg Config, roles []string, life *lifecycle, logger *zap.Logger) (*process, error) {
	p := &process{cfg: cfg, roles: roles, logger: logger, life: life, stats: stats.New()}
	if p.has(RoleSecrets) || (!cfg.InternalTLS.Plaintext && !cfg.InternalTLS.Operator() && cfg.InternalTLS.Dir == "") {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, settings.Invalid("data-dir", "%w", err)
		}
	}
	var err error
	if p.itls, err = internaltls.Load(cfg.InternalTLS, cfg.DataDir, logger.Named("tls")); err != nil {
		return nil, err
	}
	// One trail for the roles of the process, whatever the log level: it is not a logger. Its stdout
	// is shared with the access log, one line at a time.
	var auditStdout io.Writer = logging.Stdout
	if cfg.AuditStdout != nil {
		auditStdout = cfg.AuditStdout
	}
	if p.audit, err = audit.Open(cfg.Audit, auditStdout, logger.Named("audit")); err != nil {
		return nil, err
	}
	life.onStop(func() { _ = p.audit.Close() })
	return p, nil
}

func (p *process) has(role string) bool { return slices.Contains(p.roles, role) }

// listen opens the TCP listener of a setting; it is closed when the stack stops, if its server has
// not closed it. An error names the setting, so the operator knows what to change.
func (p *process) listen(setting, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, settings.Invalid(setting, "%w (another process holds %s: stop it, or set another address)", err, addr)
	}
	if err != nil {
		return nil, settings.Invalid(setting, "%w", err)
	}
	p.life.onStop(func() { _ = lis.Close() })
	return lis, nil
}

// service is a gRPC service role as the rest of its process sees it.
type service struct {
	// name is its role.
	name string
	// addr is the bound address of its gRPC listener.
	addr string
	// server is its gRPC server, which also serves its methods in process (Direct).
	server *grpcserver.Server
}

// allHealthy is the health of this process's services, for its gateway's /healthcheck and the stats
// listener's /ready: the first service that is not SERVING fails it.
func allHealthy(services []service) func() error {
	checks := make([]func() error, len(services))
	for i, s := range services {
		checks[i] = grpcHealth(s.name, s.server.Health)
	}
	return func() error {
		for _, check := range checks {
			if err := check(); err != nil {
				return err
			}
		}
		return nil
	}
}

// secretsRole is the secrets service as the rest of its process uses it.
type secretsRole struct {
	service
	svc *secrets.Service
	// workloadPEM holds the CAs of services' client certificates (secrets.WorkloadCAPEM); nil: none.
	workloadPEM []byte
}

// startSecrets opens the secrets service on its store and KMS, serves it on -secrets-listen, and runs
// its background loops (keyring reload, sealed-value scan, replica presence) until the stack stops.
func startSecrets(ctx context.Context, p *process) (*secretsRole, error) {
	cfg, log := p.cfg, p.logger.Named("secrets")
	svc, workloadPEM, err := openSecrets(ctx, p, log)
	if err != nil {
		return nil, err
	}
	if len(workloadPEM) > 0 {
		// Services authenticate with their client certificate on direct gRPC too.
		if err := p.itls.TrustWorkloadCAs(workloadPEM); err != nil {
			return nil, err
		}
	}
	lis, err := p.listen("secrets-listen", cfg.Secrets.Listen)
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	impl := secrets.NewServer(svc, log)
	// The internal-TLS interceptors run before authentication: header-login headers count only
	// when the gateway sent them.
	srv := grpcserver.NewService(log.Named("grpc"), grpcserver.Service{
		Limits: cfg.Limits, Credentials: p.itls.ServerCredentials(internaltls.RoleService),
		Unary:  []grpc.UnaryServerInterceptor{p.itls.UnaryInterceptor(), secrets.RetryAfterInterceptor(), impl.AuthInterceptor()},
		Stream: []grpc.StreamServerInterceptor{p.itls.StreamInterceptor()},
		Polls:  secrets.PollMethods,
	})
	secretsv1.RegisterSecretsServiceServer(srv, impl)
	secretsadminv1.RegisterSecretsAdminServiceServer(srv, secrets.NewAdminServer(svc, adminAuthorizer(p.itls), p.audit, log.Named("admin")))
	srv.FollowProbe(cfg.Secrets.StoreProbeInterval, cfg.Secrets.StoreProbeTimeout, svc.ProbeStore)
	p.life.run(func(ctx context.Context) error { svc.RunKeyReload(ctx, cfg.Secrets.KeyringReloadInterval); return nil })
	p.life.run(func(ctx context.Context) error { svc.RunSealedScan(ctx, cfg.Secrets.SealedScanInterval); return nil })
	p.life.run(func(ctx context.Context) error { svc.RunReplicaPresence(ctx, replicaName(addr)); return nil })
	p.life.run(func(ctx context.Context) error { return srv.Serve(ctx, lis, cfg.ShutdownTimeout) })
	log.Info("secrets service listening (gRPC)", zap.String("addr", addr), zap.String("data_dir", cfg.DataDir))
	return &secretsRole{service: service{name: RoleSecrets, addr: addr, server: srv}, svc: svc, workloadPEM: workloadPEM}, nil
}

// chatRole is the chat service as the rest of its process uses it.
type chatRole struct {
	service
	// impl makes the gateway's checks before a call's body (chat.Server.RefuseBeforeBody).
	impl *chat.Server
}

// startChat opens the chat service over its inbound queue, serves it on -chat-listen, and runs its
// dispatchers and cache refresh until the stack stops: chat.Service.Run returns only once the
// dispatches in flight have finished or were abandoned after -shutdown-timeout.
func startChat(ctx context.Context, p *process, secretsAddr string) (*chatRole, error) {
	cfg, log := p.cfg, p.logger.Named("chat")
	svc, q, err := openChat(ctx, p, secretsAddr, log)
	if err != nil {
		return nil, err
	}
	lis, err := p.listen("chat-listen", cfg.Chat.Listen)
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	impl := chat.NewServer(svc, log, p.audit)
	srv := grpcserver.NewService(log.Named("grpc"), grpcserver.Service{
		Limits: cfg.Limits, Credentials: p.itls.ServerCredentials(internaltls.RoleService),
		Unary:  []grpc.UnaryServerInterceptor{p.itls.UnaryInterceptor(), impl.AccessInterceptor()},
		Stream: []grpc.StreamServerInterceptor{p.itls.StreamInterceptor()},
	})
	chatv1.RegisterChatServiceServer(srv, impl)
	// The online backup of the queue file (gantry backup of a running gantry), for the same
	// identity as the secrets admin interface.
	chatadminv1.RegisterChatAdminServiceServer(srv, chat.NewAdminServer(q, adminAuthorizer(p.itls), p.audit, log.Named("admin")))
	p.life.run(func(ctx context.Context) error { return srv.Serve(ctx, lis, cfg.ShutdownTimeout) })
	p.life.run(svc.Run)
	log.Info("chat service listening (gRPC)", zap.String("addr", addr), zap.String("slack_api", svc.SlackAPIURL()))
	return &chatRole{service: service{name: RoleChat, addr: addr, server: srv}, impl: impl}, nil
}

// gatewayRole is the gateway as the Stack reports it.
type gatewayRole struct {
	gw *gateway.Gateway
	// addr, adminAddr and adminGRPCAddr are the bound addresses of its listeners.
	addr, adminAddr, adminGRPCAddr string
}

// startGateway serves the gateway (REST, the admin listener with proxyadmin, admin gRPC) in front of
// the services of this process, or of other processes. It stops the whole stack when it stops by
// itself (the admin /quitquitquit).
func startGateway(ctx context.Context, p *process, services []service, chatServer *chat.Server, workloadPEM []byte) (*gatewayRole, error) {
	gwCfg, err := gatewayConfig(ctx, p, services, chatServer, workloadPEM)
	if err != nil {
		return nil, err
	}
	log := p.logger.Named("gateway")
	gw, err := gateway.New(gwCfg, log)
	if err != nil {
		return nil, err
	}
	var lis gateway.Listeners
	if lis.Main, err = p.listen("gateway-listen", gwCfg.Listen); err != nil {
		return nil, err
	}
	if lis.Admin, err = p.listen("admin-listen", gwCfg.AdminListen); err != nil {
		return nil, err
	}
	if lis.AdminGRPC, err = p.listen("admin-grpc-listen", gwCfg.AdminGRPCListen); err != nil {
		return nil, err
	}
	r := &gatewayRole{gw: gw, addr: lis.Main.Addr().String(), adminAddr: lis.Admin.Addr().String(), adminGRPCAddr: lis.AdminGRPC.Addr().String()}
	p.life.run(func(ctx context.Context) error {
		// The gateway also stops on the admin /quitquitquit; the whole process follows it.
		defer p.life.stop()
		return gw.Serve(ctx, lis, p.cfg.ShutdownTimeout)
	})
	cfg := p.cfg
	log.Info("gateway listening", zap.String("rest", cfg.restURL(r.addr)), zap.String("admin", "http://"+r.adminAddr),
		zap.String("admin_grpc", r.adminGRPCAddr), zap.String("secrets_upstream", gwCfg.SecretsUpstream), zap.String("chat_upstream", gwCfg.ChatUpstream),
		zap.Strings("in_process_hosts", slices.Sorted(maps.Keys(gwCfg.InProcessServices))))
	if a := cfg.Secrets.Auth; a.UseAuth && a.UserAuthModule == "null" && cfg.Secrets.KMS != "aws" {
		log.Info("web UI: open the one-time link that `gantry login` prints", zap.String("ui", cfg.restURL(r.addr)+"/"),
			zap.String("login", selfCommand()+" login -user <email> -data-dir "+cfg.DataDir+" -url "+cfg.restURL(r.addr)))
	}
	return r, nil
}

// gatewayConfig is the gateway's configuration in this process: its upstreams are the services of
// the process where they really listen, called in process unless -grpc-in-memory=false, and its
// checks and health are theirs.
func gatewayConfig(ctx context.Context, p *process, services []service, chatServer *chat.Server, workloadPEM []byte) (gateway.Config, error) {
	cfg := p.cfg
	gwCfg := cfg.gateway()
	// The trusted headers of header authentication must reach the secrets service.
	if extra := cfg.Secrets.ForwardHeaders(); len(extra) > 0 {
		gwCfg.ForwardHeaders = strings.Join(append([]string{gwCfg.ForwardHeaders}, extra...), ",")
	}
	for _, s := range services {
		switch s.name {
		case RoleSecrets:
			gwCfg.SecretsUpstream = s.addr
		case RoleChat:
			gwCfg.ChatUpstream = s.addr
		}
	}
	gwCfg.RefuseBeforeBody = refuseBeforeBody(cfg.Secrets.Auth, chatServer)
	if workloadPEM == nil {
		// A gateway of its own reads the workload CAs from -workload-cert-ca-file only.
		var err error
		if workloadPEM, err = secrets.WorkloadCAPEM(ctx, cfg.Secrets.Auth, nil); err != nil {
			return gateway.Config{}, err
		}
	}
	gwCfg.ClientCAs = workloadPEM
	gwCfg.UpstreamCredentials = p.itls.ClientCredentials(internaltls.RoleGateway)
	inProcess, err := inProcessServices(cfg, p.itls, services)
	if err != nil {
		return gateway.Config{}, err
	}
	gwCfg.InProcessServices = inProcess
	gwCfg.Stats = p.stats
	if len(services) > 0 {
		gwCfg.LocalHealth = allHealthy(services)
	}
	gwCfg.AdminServerOptions = p.itls.AdminServerOptions()
	gwCfg.AdminClientCredentials = p.itls.SelfClientCredentials()
	gwCfg.Audit = p.audit
	return gwCfg, nil
}

// inProcessServices lets the gateway of this process call each of its services directly, through the
// service's interceptor chain with the gateway's identity (the peer its mTLS certificate would give),
// and no gRPC transport; the gateway's host keeps the service's TCP address as its name. Other
// processes (split targets, chat calling secrets) keep real gRPC with mutual TLS on the TCP listener.
// Empty with -grpc-in-memory=false.
func inProcessServices(cfg Config, itls *internaltls.Internal, services []service) (map[string]upstream.InProcessService, error) {
	inProcess := map[string]upstream.InProcessService{}
	if !cfg.InMemoryUpstreams {
		return inProcess, nil
	}
	for _, s := range services {
		peer, err := itls.InProcessPeer(memconn.Addr(s.name))
		if err != nil {
			return nil, err
		}
		inProcess[s.addr] = func(sh grpcstats.Handler) upstream.InProcessConn {
			return s.server.Direct(inprocgrpc.ConnOptions{Peer: peer, Authority: s.addr, StatsHandler: sh})
		}
	}
	return inProcess, nil
}

// startStatsListener serves /stats, /stats/prometheus, /ready (ready: this process's services'
// health, a kubelet's readiness probe) and /live on -stats-listen until the stack stops, and returns
// its bound address.
func startStatsListener(p *process, ready func() error) (string, error) {
	lis, err := p.listen("stats-listen", p.cfg.StatsListen)
	if err != nil {
		return "", err
	}
	addr := lis.Addr().String()
	srv := p.cfg.Limits.HTTPServer(proxyadmin.StatsHandler(p.stats, ready), zap.NewStdLog(p.logger.Named("stats")))
	p.life.runUntil(func() error {
		if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("stats listener: %w", err)
		}
		return nil
	}, func() { _ = srv.Close() })
	p.logger.Info("stats listening (HTTP)", zap.String("stats", "http://"+addr+"/stats/prometheus"))
	return addr, nil
}
