// Package stack starts the gantry roles a process runs (secrets, chat, gateway) and wires them
// together: in one process each service still listens on its own gRPC port, and the gateway calls it
// directly (grpcserver.Server.Direct, package inprocgrpc): through the same interceptor chain as the
// service's gRPC server, with the gateway's verified identity as the peer, but with no HTTP/2, TLS or
// Protobuf encoding between them; the gateway's health checks, outlier detection, retries and stats
// treat it as any host. -grpc-in-memory=false makes the gateway dial the TCP port instead.
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
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstats "google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/gateway"
	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/grpcserver"
	"github.com/gantry-dev/gantry/pkg/inprocgrpc"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/memconn"
	"github.com/gantry-dev/gantry/pkg/netlimits"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	chatadminv1 "github.com/gantry-dev/gantry/proto/chatadmin/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	secretsadminv1 "github.com/gantry-dev/gantry/proto/secretsadmin/v1"
	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/proxyadmin"
	"github.com/gantry-dev/gantry/services/secrets"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

// Roles a process can run.
const (
	RoleSecrets = "secrets"
	RoleChat    = "chat"
	RoleGateway = "gateway"
)

var allRoles = []string{RoleSecrets, RoleChat, RoleGateway}

// Config is the whole configuration of one gantry process.
type Config struct {
	// Target is "all" or a comma list of roles.
	Target string
	// DataDir holds the database, the local keyring and the local CA.
	DataDir string
	// ShutdownTimeout bounds the graceful stop of each listener.
	ShutdownTimeout time.Duration
	Log             logging.Config
	Secrets         secrets.Config
	Chat            chat.Config
	Gateway         gateway.Config
	// Import is where `gantry import confidant` reads Confidant's data; serving ignores it.
	Import confidant.Config
	// SecretsACL replaces the default access-control rules of the secrets service (Confidant's
	// ACL_MODULE hook); nil keeps secrets.DefaultACL.
	SecretsACL secrets.ACL
	// Etcd reaches the etcd cluster of the secrets store when Secrets.Store is "etcd": the etcd
	// adapter's settings, declared beside the service's storage settings.
	Etcd etcdstore.Options

	// Limits bound the connections of every listener of the process (gRPC, REST and admin).
	Limits netlimits.Config
	// InternalTLS secures gRPC between the roles (mutual TLS with a generated CA by default).
	InternalTLS internaltls.Config
	// Audit selects the sinks of the audit trail the services write (stdout, a file).
	Audit audit.Config
	// AuditStdout is where the audit trail's standard-output sink writes; nil is logging.Stdout. Tests
	// inject a buffer, or a writer that fails.
	AuditStdout io.Writer
	// InMemoryUpstreams makes the gateway call the services of its own process directly, through
	// their gRPC servers' interceptor chains with the gateway's identity, rather than over loopback
	// TCP with mutual TLS. Turning it off is for debugging (a packet capture, a comparison).
	InMemoryUpstreams bool
	// StatsListen, when set, serves /stats and /stats/prometheus of the process on a read-only HTTP
	// listener of their own, with /ready and /live for a kubelet's probes: the scrape target of any
	// process, without reaching the gateway's admin port (which can drain and stop it).
	StatsListen string
}

// DefaultConfig runs every role on loopback with data in ./gantry-data.
func DefaultConfig() Config {
	return Config{
		Target:          "all",
		DataDir:         "gantry-data",
		ShutdownTimeout: 10 * time.Second,
		Log:             logging.DefaultConfig(),
		Limits:          netlimits.DefaultConfig(),
		Secrets:         secrets.DefaultConfig(),
		Etcd:            etcdstore.DefaultOptions(),
		Chat:            chat.DefaultConfig(),
		Gateway:         gateway.DefaultConfig(),
		InternalTLS:     internaltls.DefaultConfig(),
		Audit:           audit.DefaultConfig(),
		Import:          confidant.DefaultConfig(),

		InMemoryUpstreams: true,
	}
}

// Settings is the settings table of the process: its own settings, then every role's. cmd/gantry
// registers its flags, loads the environment and prints -h from it; scripts/gendocs writes
// docs/configuration.md from it.
func (c *Config) Settings() *settings.Table {
	const groupProcess, groupLogging = "process", "logging"
	process := settings.Part{Settings: []settings.Setting{
		{Name: "target", Group: groupProcess, Value: settings.String(&c.Target), Usage: "roles to run: all, or a comma list of secrets, chat, gateway"},
		{Name: "data-dir", Group: groupProcess, Value: settings.String(&c.DataDir), Usage: "data folder (database, local keyring, local CA; created with mode 0700)"},
		{Name: "shutdown-timeout", Group: groupProcess, Value: settings.Duration(&c.ShutdownTimeout), Usage: "how long requests in flight, and Slack requests being dispatched to their handlers, may finish after SIGINT/SIGTERM"},
		{Name: "stats-listen", Group: groupProcess, Value: settings.String(&c.StatsListen), Usage: "HTTP listen address of a read-only listener: /stats and /stats/prometheus for Prometheus, /ready (this process's services' gRPC health) and /live for probes; empty: none (the gateway's admin port serves the stats)"},
		{Name: "grpc-in-memory", Group: groupProcess, Value: settings.Bool(&c.InMemoryUpstreams), Usage: "the gateway calls the services of its own process directly, through every interceptor of their gRPC servers with its own identity, without gRPC's transport (=false: over loopback TCP with mutual TLS, for debugging)"},
		{Name: "log-level", Group: groupLogging, Value: settings.String(&c.Log.Level), Usage: "log level: debug, info, warn, error"},
		{Name: "log-format", Group: groupLogging, Value: settings.String(&c.Log.Format), Usage: "log format: console or json"},
	}}
	return settings.New(process, c.Audit.Settings(), c.Limits.Settings(), c.InternalTLS.Settings(), c.Secrets.Settings(), c.Etcd.Settings(), c.Chat.Settings(), c.Gateway.Settings(), c.Import.Settings())
}

// Roles returns the roles the target names.
func (c Config) Roles() ([]string, error) {
	var roles []string
	for _, r := range strings.Split(c.Target, ",") {
		r = strings.TrimSpace(r)
		switch {
		case r == "all":
			return allRoles, nil
		case slices.Contains(allRoles, r):
			if !slices.Contains(roles, r) {
				roles = append(roles, r)
			}
		default:
			return nil, settings.Invalid("target", "%q is not all, secrets, chat or gateway", r)
		}
	}
	return roles, nil
}

// Validate checks the settings of the roles the target runs.
func (c Config) Validate() error {
	roles, err := c.Roles()
	if err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		return settings.Invalid("shutdown-timeout", "must be positive, got %v", c.ShutdownTimeout)
	}
	if err := c.Log.Validate(); err != nil {
		return err
	}
	if c.StatsListen != "" {
		if err := settings.CheckHostPort("stats-listen", c.StatsListen); err != nil {
			return err
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	if err := c.InternalTLS.Validate(); err != nil {
		return err
	}
	if !c.InternalTLS.Plaintext && !c.InternalTLS.Operator() && c.InternalTLS.Dir == "" && c.DataDir == "" {
		return settings.Invalid("data-dir", "must not be empty: it holds the internal CA (or set -grpc-tls-dir)")
	}
	if err := c.Audit.Validate(); err != nil {
		return err
	}
	if slices.Contains(roles, RoleSecrets) {
		if c.DataDir == "" {
			return settings.Invalid("data-dir", "must not be empty")
		}
		if err := c.validateSecrets(); err != nil {
			return err
		}
	}
	if slices.Contains(roles, RoleChat) {
		if err := c.Chat.Validate(); err != nil {
			return err
		}
	}
	if slices.Contains(roles, RoleGateway) {
		if err := c.gateway().Validate(); err != nil {
			return err
		}
	}
	return nil
}

// validateSecrets checks the settings of the secrets service and, when it runs on etcd, those of the
// etcd store, which belong to the adapter rather than the service.
func (c Config) validateSecrets() error {
	if err := c.Secrets.Validate(); err != nil {
		return err
	}
	if c.Secrets.Store == "etcd" {
		return c.Etcd.Validate()
	}
	return nil
}

// gateway is the gateway's configuration with the process-wide listener limits.
func (c Config) gateway() gateway.Config {
	g := c.Gateway
	g.Limits = c.Limits
	// The Slack receivers check the timestamp window and the signature headers before reading a body,
	// with chat's own settings: the gateway and the chat service cannot disagree about them.
	g.SlackMaxSkew = c.Chat.Inbound.MaxSkew
	g.SlackAcceptUnsigned = c.Chat.Inbound.AllowVerificationToken
	return g
}

// Stack is a running set of roles.
type Stack struct {
	// SecretsAddr, ChatAddr, GatewayAddr, AdminAddr and AdminGRPCAddr are the bound addresses of the
	// roles that run (empty otherwise).
	SecretsAddr, ChatAddr, GatewayAddr, AdminAddr, AdminGRPCAddr string
	// StatsAddr is the bound address of -stats-listen (empty when it is not set).
	StatsAddr string
	// Stats is the process's statistics store, shared by the gateway (/stats) and chat's inbound
	// queue.
	Stats *stats.Store

	grp     *errgroup.Group
	cancel  context.CancelFunc
	gateway *gateway.Gateway
	// secretsStore is the secrets role's store, for HoldWrites and HoldReads.
	secretsStore store.Store
	// secrets is the secrets role's service, for Reload (the keyring); nil without the role.
	secrets *secrets.Service
	// audit is the trail of the services of this process; nil when it runs none.
	audit *audit.Sink
}

// HoldWrites holds the write lock of the secrets role's bbolt store until release is called, as a
// commit stuck on a frozen disk does: fault injection for the stall tests (boltstore.Store.HoldWrites).
func (s *Stack) HoldWrites() (release func(), err error) {
	holder, ok := s.secretsStore.(interface{ HoldWrites() (func(), error) })
	if !ok {
		return nil, errors.New("stack: the secrets role does not run here on a bbolt store")
	}
	return holder.HoldWrites()
}

// HoldReads makes every read of the secrets role's bbolt store wait before it begins until release is
// called, as reads wait for bbolt's mmap lock while a commit stuck on a frozen disk holds it: fault
// injection for the read stall tests (boltstore.Store.HoldReads).
func (s *Stack) HoldReads() (release func(), err error) {
	holder, ok := s.secretsStore.(interface{ HoldReads() func() })
	if !ok {
		return nil, errors.New("stack: the secrets role does not run here on a bbolt store")
	}
	return holder.HoldReads(), nil
}

// adminAuthorizer decides who may administer the secrets service (secretsadmin.v1: stream the store
// off it, rewrap its data keys) on the secrets service's gRPC listener: a peer presenting the gateway's certificate of the internal CA, the identity
// the services already trust with every caller's identity (x-proxy-internal, header login) and the
// one the admin gRPC listener answers. The copy holds sealed values only (the keyring, which this call
// never sends, is what decrypts them), yet also every name, ACL and grant: never for a service's
// certificate, the direct callers' client.crt or a workload's. With -grpc-plaintext no peer is
// authenticated, so both are refused.
func adminAuthorizer(itls *internaltls.Internal) func(context.Context) error {
	return func(ctx context.Context) error {
		if itls.Plaintext() {
			return status.Error(codes.FailedPrecondition, "online backups and rewraps need internal TLS (this gantry runs with -grpc-plaintext, so no caller is authenticated): for a backup, stop gantry and run gantry backup, or back up a filesystem snapshot")
		}
		if !itls.FromGateway(ctx) {
			return status.Error(codes.PermissionDenied, "the admin interfaces of the services (online backup, rewrap) are open only with the gateway's certificate of the internal CA (gantry backup and gantry keyring rewrap find it in the data folder's tls/, or -grpc-tls-cert-file)")
		}
		return nil
	}
}

// grpcHealth reads a gRPC server's own health (as its FollowProbe keeps it), for the gateway of the
// same process: an error names the service while it is not SERVING.
func grpcHealth(name string, h *health.Server) func() error {
	return func() error {
		r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("the %s service is %s (see its log: a store that fails its probe, or whose writes are stalled)", name, r.GetStatus())
		}
		return nil
	}
}

// Reload reopens the audit file (after a log rotation moved it), re-reads the local keyring and the
// gateway's clusters file (SIGHUP). All are attempted; the first error is returned.
func (s *Stack) Reload() error {
	var err error
	if s.audit != nil {
		err = s.audit.Reopen()
	}
	if s.secrets != nil {
		if _, keyErr := s.secrets.ReloadKeys(context.Background()); err == nil {
			err = keyErr
		}
	}
	if s.gateway != nil {
		if gwErr := s.gateway.Reload(); err == nil {
			err = gwErr
		}
	}
	return err
}

// Start binds every listener of the configured roles, then serves them in the background until ctx
// ends or one fails. Addresses in the returned Stack are the bound ones, so ":0" ports work.
func Start(ctx context.Context, cfg Config, logger *zap.Logger) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	roles, _ := cfg.Roles()
	has := func(r string) bool { return slices.Contains(roles, r) }
	// Each role's logger gets its own level, which the admin /logging endpoint can change.
	if levels := logging.LevelsOf(logger); levels != nil {
		levels.Register(roles...)
	}

	var listeners []net.Listener
	// listen names the setting of a listener that cannot open, so the operator knows what to change.
	listen := func(setting, addr string) (net.Listener, error) {
		lis, err := net.Listen("tcp", addr)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, settings.Invalid(setting, "%w (another process holds %s: stop it, or set another address)", err, addr)
		}
		if err != nil {
			return nil, settings.Invalid(setting, "%w", err)
		}
		listeners = append(listeners, lis)
		return lis, nil
	}
	st := &Stack{Stats: stats.New()}
	// localHealth are the health checks of this process's services, for its gateway's /healthcheck
	// and the stats listener's /ready.
	var localHealth []func() error
	runCtx, cancel := context.WithCancel(ctx)
	grp, gctx := errgroup.WithContext(runCtx)
	st.grp = grp
	// fail undoes a partial start: stop what already runs, free every bound port.
	fail := func(err error) (*Stack, error) {
		cancel()
		for _, l := range listeners {
			_ = l.Close()
		}
		_ = grp.Wait()
		if st.audit != nil {
			_ = st.audit.Close()
		}
		return nil, err
	}
	st.cancel = cancel

	if has(RoleSecrets) || (!cfg.InternalTLS.Plaintext && !cfg.InternalTLS.Operator() && cfg.InternalTLS.Dir == "") {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fail(settings.Invalid("data-dir", "%w", err))
		}
	}
	itls, err := internaltls.Load(cfg.InternalTLS, cfg.DataDir, logger.Named("tls"))
	if err != nil {
		return fail(err)
	}
	// inProcess lets the gateway of this process call a service directly, through the service's
	// interceptor chain with the gateway's identity (the peer its mTLS certificate would give), and no
	// gRPC transport; the gateway's host keeps the service's TCP address as its name. Other processes
	// (split targets, chat calling secrets) keep real gRPC with mutual TLS on the TCP listener.
	inProcess := map[string]upstream.InProcessService{}
	var inProcessErr error
	serveInProcess := func(srv *grpcserver.Server, name, tcpAddr string) {
		if !cfg.InMemoryUpstreams || !has(RoleGateway) {
			return
		}
		p, err := itls.InProcessPeer(memconn.Addr(name))
		if err != nil {
			inProcessErr = err
			return
		}
		inProcess[tcpAddr] = func(sh grpcstats.Handler) upstream.InProcessConn {
			return srv.Direct(inprocgrpc.ConnOptions{Peer: p, Authority: tcpAddr, StatsHandler: sh})
		}
	}
	if has(RoleSecrets) && has(RoleGateway) && cfg.Gateway.ServesTLS() {
		// Browsers reach this process's services over https only: session and login-flow cookies are
		// Secure (the gateway marks them so anyway; SAML's cross-site flow cookie also needs the
		// service to know, for its SameSite=None).
		cfg.Secrets.Auth.SecureCookies = true
	}
	// One trail for the roles of the process, whatever the log level: it is not a logger. Its stdout
	// is shared with the access log, one line at a time.
	auditStdout := cfg.AuditStdout
	if auditStdout == nil {
		auditStdout = logging.Stdout
	}
	if st.audit, err = audit.Open(cfg.Audit, auditStdout, logger.Named("audit")); err != nil {
		return fail(err)
	}
	// workloadPEM holds the CAs of services' client certificates (secrets.WorkloadCAPEM); nil: none.
	var workloadPEM []byte
	if has(RoleSecrets) {
		log := logger.Named("secrets")
		svc, closeSecrets, err := openSecrets(ctx, cfg, st.audit, st.Stats, &workloadPEM, log)
		if err != nil {
			return fail(err)
		}
		if len(workloadPEM) > 0 {
			// Services authenticate with their client certificate on direct gRPC too.
			if err := itls.TrustWorkloadCAs(workloadPEM); err != nil {
				closeSecrets()
				return fail(err)
			}
		}
		lis, err := listen("secrets-listen", cfg.Secrets.Listen)
		if err != nil {
			closeSecrets()
			return fail(err)
		}
		st.SecretsAddr = lis.Addr().String()
		impl := secrets.NewServer(svc, log)
		// The internal-TLS interceptors run before authentication: header-login headers count only
		// when the gateway sent them.
		srv := grpcserver.NewService(log.Named("grpc"), grpcserver.Service{
			Limits: cfg.Limits, Credentials: itls.ServerCredentials(internaltls.RoleService),
			Unary:  []grpc.UnaryServerInterceptor{itls.UnaryInterceptor(), secrets.RetryAfterInterceptor(), impl.AuthInterceptor()},
			Stream: []grpc.StreamServerInterceptor{itls.StreamInterceptor()},
		})
		secretsv1.RegisterSecretsServiceServer(srv, impl)
		secretsadminv1.RegisterSecretsAdminServiceServer(srv, secrets.NewAdminServer(svc, adminAuthorizer(itls), st.audit, log.Named("admin")))
		srv.FollowProbe(cfg.Secrets.StoreProbeInterval, cfg.Secrets.StoreProbeTimeout, svc.ProbeStore)
		localHealth = append(localHealth, grpcHealth("secrets", srv.Health))
		st.secretsStore = svc.Store()
		st.secrets = svc
		serveInProcess(srv, RoleSecrets, st.SecretsAddr)
		grp.Go(func() error { svc.RunKeyReload(gctx, cfg.Secrets.KeyringReloadInterval); return nil })
		grp.Go(func() error { svc.RunSealedScan(gctx, cfg.Secrets.SealedScanInterval); return nil })
		grp.Go(func() error { svc.RunReplicaPresence(gctx, replicaName(st.SecretsAddr)); return nil })
		grp.Go(func() error {
			defer closeSecrets()
			return srv.Serve(gctx, lis, cfg.ShutdownTimeout)
		})
		log.Info("secrets service listening (gRPC)", zap.String("addr", st.SecretsAddr), zap.String("data_dir", cfg.DataDir))
	}
	var chatServer *chat.Server // for the gateway's checks before the body, when chat runs here
	if has(RoleChat) {
		log := logger.Named("chat")
		chatCfg := chatConfig(cfg, st)
		chatCfg.Secrets.Credentials = itls.ClientCredentials(internaltls.RoleService)
		chatCfg.Stats = st.Stats
		if chatCfg.Inbound.QueuePath == "" {
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				return fail(settings.Invalid("data-dir", "%w", err))
			}
			chatCfg.Inbound.QueuePath = filepath.Join(cfg.DataDir, chatQueueFile)
		}
		q, err := openChatQueue(chatCfg.Inbound, log.Named("queue"))
		if err != nil {
			return fail(err)
		}
		svc, err := chat.New(ctx, chatCfg, chat.Deps{Queue: q, StartDemo: startDemoWorkspace(log), Logger: log})
		if err != nil {
			return fail(err)
		}
		lis, err := listen("chat-listen", cfg.Chat.Listen)
		if err != nil {
			_ = svc.Close()
			return fail(err)
		}
		st.ChatAddr = lis.Addr().String()
		impl := chat.NewServer(svc, log, st.audit)
		chatServer = impl
		srv := grpcserver.NewService(log.Named("grpc"), grpcserver.Service{
			Limits: cfg.Limits, Credentials: itls.ServerCredentials(internaltls.RoleService),
			Unary:  []grpc.UnaryServerInterceptor{itls.UnaryInterceptor(), impl.AccessInterceptor()},
			Stream: []grpc.StreamServerInterceptor{itls.StreamInterceptor()},
		})
		chatv1.RegisterChatServiceServer(srv, impl)
		localHealth = append(localHealth, grpcHealth("chat", srv.Health))
		// The online backup of the queue file (gantry backup of a running gantry), for the same
		// identity as the secrets admin interface.
		chatadminv1.RegisterChatAdminServiceServer(srv, chat.NewAdminServer(q, adminAuthorizer(itls), st.audit, log.Named("admin")))
		serveInProcess(srv, RoleChat, st.ChatAddr)
		grp.Go(func() error { return srv.Serve(gctx, lis, cfg.ShutdownTimeout) })
		grp.Go(func() error {
			defer svc.Close()
			return svc.Run(gctx)
		})
		log.Info("chat service listening (gRPC)", zap.String("addr", st.ChatAddr), zap.String("slack_api", svc.SlackAPIURL()))
	}
	if inProcessErr != nil {
		return fail(inProcessErr)
	}
	if has(RoleGateway) {
		gwCfg := cfg.gateway()
		// The trusted headers of header authentication must reach the secrets service.
		if extra := cfg.Secrets.ForwardHeaders(); len(extra) > 0 {
			gwCfg.ForwardHeaders = strings.Join(append([]string{gwCfg.ForwardHeaders}, extra...), ",")
		}
		// Services in this process are dialled where they really listen.
		if st.SecretsAddr != "" {
			gwCfg.SecretsUpstream = st.SecretsAddr
		}
		if st.ChatAddr != "" {
			gwCfg.ChatUpstream = st.ChatAddr
		}
		gwCfg.RefuseBeforeBody = refuseBeforeBody(cfg.Secrets.Auth, chatServer)
		if workloadPEM == nil {
			// A gateway of its own reads the workload CAs from -workload-cert-ca-file only.
			if workloadPEM, err = secrets.WorkloadCAPEM(ctx, cfg.Secrets.Auth, nil); err != nil {
				return fail(err)
			}
		}
		gwCfg.ClientCAs = workloadPEM
		gwCfg.UpstreamCredentials = itls.ClientCredentials(internaltls.RoleGateway)
		gwCfg.InProcessServices = inProcess
		gwCfg.Stats = st.Stats
		if len(localHealth) > 0 {
			gwCfg.LocalHealth = func() error {
				for _, check := range localHealth {
					if err := check(); err != nil {
						return err
					}
				}
				return nil
			}
		}
		gwCfg.AdminServerOptions = itls.AdminServerOptions()
		gwCfg.AdminClientCredentials = itls.SelfClientCredentials()
		gwCfg.Audit = st.audit
		log := logger.Named("gateway")
		gw, err := gateway.New(gwCfg, log)
		if err != nil {
			return fail(err)
		}
		var lis gateway.Listeners
		if lis.Main, err = listen("gateway-listen", gwCfg.Listen); err != nil {
			return fail(err)
		}
		if lis.Admin, err = listen("admin-listen", gwCfg.AdminListen); err != nil {
			return fail(err)
		}
		if lis.AdminGRPC, err = listen("admin-grpc-listen", gwCfg.AdminGRPCListen); err != nil {
			return fail(err)
		}
		st.GatewayAddr, st.AdminAddr, st.AdminGRPCAddr = lis.Main.Addr().String(), lis.Admin.Addr().String(), lis.AdminGRPC.Addr().String()
		st.gateway = gw
		grp.Go(func() error {
			// The gateway also stops on the admin /quitquitquit; the whole process follows it.
			defer cancel()
			return gw.Serve(gctx, lis, cfg.ShutdownTimeout)
		})
		log.Info("gateway listening", zap.String("rest", cfg.restURL(st.GatewayAddr)), zap.String("admin", "http://"+st.AdminAddr),
			zap.String("admin_grpc", st.AdminGRPCAddr), zap.String("secrets_upstream", gwCfg.SecretsUpstream), zap.String("chat_upstream", gwCfg.ChatUpstream),
			zap.Strings("in_process_hosts", slices.Sorted(maps.Keys(inProcess))))
		if a := cfg.Secrets.Auth; a.UseAuth && a.UserAuthModule == "null" && cfg.Secrets.KMS != "aws" {
			log.Info("web UI: open the one-time link that `gantry login` prints", zap.String("ui", cfg.restURL(st.GatewayAddr)+"/"),
				zap.String("login", selfCommand()+" login --user <email> --data-dir "+cfg.DataDir+" --url "+cfg.restURL(st.GatewayAddr)))
		}
	}
	if cfg.StatsListen != "" {
		lis, err := listen("stats-listen", cfg.StatsListen)
		if err != nil {
			return fail(err)
		}
		st.StatsAddr = lis.Addr().String()
		// /ready of the stats listener is the services' own health (a kubelet's readiness probe).
		ready := func() error {
			for _, check := range localHealth {
				if err := check(); err != nil {
					return err
				}
			}
			return nil
		}
		srv := cfg.Limits.HTTPServer(proxyadmin.StatsHandler(st.Stats, ready), zap.NewStdLog(logger.Named("stats")))
		grp.Go(func() error {
			go func() {
				<-gctx.Done()
				_ = srv.Close()
			}()
			if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("stats listener: %w", err)
			}
			return nil
		})
		logger.Info("stats listening (HTTP)", zap.String("stats", "http://"+st.StatsAddr+"/stats/prometheus"))
	}
	logNextSteps(logger, cfg, st)
	return st, nil
}

// refuseBeforeBody is the gateway's check of a call before its body is read, from the services' own
// rules: the secrets service's refusal of a call without any credential (from the same settings as
// the service's, which a gateway in a process of its own reads too), and chat's access control when
// chat runs in this process (its rules come from the chat configuration file, which a gateway alone
// does not load; its calls then reach the service, their large bodies bounded in flight).
func refuseBeforeBody(auth secrets.AuthConfig, chatServer *chat.Server) gateway.RefuseBeforeBody {
	secretsCheck := secrets.MissingCredentialCheck(auth)
	secretsPrefix := "/" + secretsv1.SecretsService_ServiceDesc.ServiceName + "/"
	chatPrefix := "/" + chatv1.ChatService_ServiceDesc.ServiceName + "/"
	return func(call gateway.PreBodyCall) error {
		switch {
		case strings.HasPrefix(call.FullMethod, secretsPrefix):
			return secretsCheck(call.FullMethod, func(name string) []string {
				v, _ := call.Header(name)
				return v
			})
		case strings.HasPrefix(call.FullMethod, chatPrefix) && chatServer != nil:
			return chatServer.RefuseBeforeBody(call.FullMethod, call.Template, call.Params, func(name string) (string, bool) {
				v, known := call.Header(name)
				if len(v) == 0 {
					return "", known
				}
				return v[0], known
			})
		}
		return nil
	}
}

// logNextSteps tells a new user, once everything listens, where gantry is and what to type next:
// the addresses, the data folder, and a CLI command and a curl that work with the local keyring.
func logNextSteps(logger *zap.Logger, cfg Config, st *Stack) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		dataDir = cfg.DataDir
	}
	fields := []zap.Field{zap.String("data_dir", dataDir)}
	if st.GatewayAddr != "" {
		fields = append(fields, zap.String("rest", cfg.restURL(st.GatewayAddr)), zap.String("admin", "http://"+st.AdminAddr))
	}
	if st.SecretsAddr != "" {
		fields = append(fields, zap.String("secrets_grpc", st.SecretsAddr))
	}
	if st.ChatAddr != "" {
		fields = append(fields, zap.String("chat_grpc", st.ChatAddr))
	}
	logger.Info("gantry is ready", fields...)
	self := selfCommand()
	if st.GatewayAddr != "" && st.SecretsAddr != "" && cfg.Secrets.KMS == "local" && cfg.Secrets.Auth.UseAuth {
		logger.Info(fmt.Sprintf("try it: %s creds list --addr %s --data-dir %s%s", self, cfg.restURL(st.GatewayAddr), dataDir, cfg.caHint(" --ca-file ")))
		logger.Info(fmt.Sprintf("or with curl: curl%s -u \"$(%s token --data-dir %s --from alice --user-type user --basic)\" %s/v1/value_generator",
			cfg.caHint(" --cacert "), self, dataDir, cfg.restURL(st.GatewayAddr)))
	}
	if st.SecretsAddr != "" && cfg.Secrets.KMS == "local" && cfg.Secrets.Auth.UseAuth && cfg.DataDir != DefaultConfig().DataDir {
		logger.Warn(keyringForDevelopment, zap.String("keyring", filepath.Join(dataDir, "keyring.json")),
			zap.String("docs", "docs/authenticating-services.md"))
	}
	logger.Info(fmt.Sprintf("every command: %s help; every setting: %s serve -h (docs/configuration.md)", self, self))
}

// keyringForDevelopment is said at start when services can authenticate with kmsauth tokens of a
// local keyring outside the default development data folder: minting such a token needs the keyring,
// which also holds the master keys, and lets its holder act as any service.
const keyringForDevelopment = "services authenticating with `gantry token` need this keyring, which holds the master keys " +
	"and mints tokens as ANY service: that is for development only. Give each service its own identity instead: " +
	"a client certificate (gantry certs issue, -workload-cert-ca), a Kubernetes service-account token or an OIDC token (-workload-identity-file)"

// restURL is the base URL of the REST listener at addr: https:// when it serves TLS itself.
func (c Config) restURL(addr string) string {
	if c.Gateway.ServesTLS() {
		return "https://" + addr
	}
	return "http://" + addr
}

// caHint is flag followed by the REST listener's certificate file when it serves TLS, for the
// commands the startup lines suggest to work as copied with a self-signed certificate (the usual one
// for a local gantry); a publicly trusted one needs no flag and is not hurt by it. A certificate of a
// private CA needs that CA's file instead (docs/cli.md says so). Empty without TLS.
func (c Config) caHint(flag string) string {
	if !c.Gateway.ServesTLS() {
		return ""
	}
	return flag + c.Gateway.TLSCertFile
}

// selfCommand is how to run this binary again from the current folder, for the commands the
// startup lines suggest: "bin/gantry" after make run, the name it was found under on PATH, and
// "gantry" for go run's temporary build or a path outside the folder.
func selfCommand() string {
	exe := os.Args[0]
	if !strings.ContainsRune(exe, filepath.Separator) {
		return exe
	}
	if abs, err := filepath.Abs(exe); err == nil && !strings.Contains(abs, "go-build") {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
				if !strings.ContainsRune(rel, filepath.Separator) {
					rel = "." + string(filepath.Separator) + rel // a bare name would be looked up on PATH
				}
				return rel
			}
		}
	}
	return "gantry"
}

// chatConfig fills the defaults of the chat service's secrets-service token source from the secrets
// settings of this process: its address when it runs here, the data folder's keyring, AUTH_KEY and
// AUTH_CONTEXT. Slack's requests in flight have the process's -shutdown-timeout to finish.
func chatConfig(cfg Config, st *Stack) chat.Config {
	c := cfg.Chat
	c.Inbound.ShutdownGrace = cfg.ShutdownTimeout
	if c.Secrets.Service == "" {
		return c
	}
	if c.Secrets.Addr == "" {
		c.Secrets.Addr = st.SecretsAddr
		if c.Secrets.Addr == "" {
			c.Secrets.Addr = cfg.Secrets.Listen
		}
	}
	if c.Secrets.Keyring == "" {
		c.Secrets.Keyring = filepath.Join(cfg.DataDir, keyringFile)
	}
	if c.Secrets.AuthKey == "" {
		c.Secrets.AuthKey = cfg.Secrets.Auth.AuthKey
	}
	if c.Secrets.To == "" {
		c.Secrets.To = cfg.Secrets.Auth.AuthContext
	}
	return c
}

// Wait blocks until every role has stopped and returns the first error.
func (s *Stack) Wait() error {
	err := s.grp.Wait()
	s.cancel()
	if s.audit != nil {
		_ = s.audit.Close()
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Run starts the configured roles and blocks until ctx ends (SIGINT/SIGTERM in main) or one fails.
// Every value received on reload (SIGHUP in main) reloads the gateway's clusters file; a failed reload
// is logged and the process goes on.
func Run(ctx context.Context, cfg Config, logger *zap.Logger, reload <-chan os.Signal) error {
	st, err := Start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-reload:
				_ = st.Reload() // the gateway logs and counts the outcome
			}
		}
	}()
	return st.Wait()
}
