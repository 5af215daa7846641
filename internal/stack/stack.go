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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/gateway"
	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/internaltls"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/netlimits"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat"
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

	// life runs every role's long-running pieces and closes what they opened.
	life    *lifecycle
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
// ends or one fails. Addresses in the returned Stack are the bound ones, so ":0" ports work. A start
// that fails half way stops what already runs and closes what was opened before it returns.
func Start(ctx context.Context, cfg Config, logger *zap.Logger) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	roles, _ := cfg.Roles()
	// Each role's logger gets its own level, which the admin /logging endpoint can change.
	if levels := logging.LevelsOf(logger); levels != nil {
		levels.Register(roles...)
	}
	if slices.Contains(roles, RoleSecrets) && slices.Contains(roles, RoleGateway) && cfg.Gateway.ServesTLS() {
		// Browsers reach this process's services over https only: session and login-flow cookies are
		// Secure (the gateway marks them so anyway; SAML's cross-site flow cookie also needs the
		// service to know, for its SameSite=None).
		cfg.Secrets.Auth.SecureCookies = true
	}
	life := newLifecycle(ctx)
	st, err := startRoles(ctx, cfg, roles, life, logger)
	if err != nil {
		life.abort()
		return nil, err
	}
	logNextSteps(logger, cfg, st)
	return st, nil
}

// startRoles starts each role in turn (secrets first: chat may read its bot tokens from it, and the
// gateway fronts both), every one registering what it runs and what it opened with life.
func startRoles(ctx context.Context, cfg Config, roles []string, life *lifecycle, logger *zap.Logger) (*Stack, error) {
	p, err := openProcess(cfg, roles, life, logger)
	if err != nil {
		return nil, err
	}
	st := &Stack{Stats: p.stats, life: life, audit: p.audit}
	var services []service
	var workloadPEM []byte
	if p.has(RoleSecrets) {
		r, err := startSecrets(ctx, p)
		if err != nil {
			return nil, err
		}
		st.SecretsAddr, st.secrets, st.secretsStore = r.addr, r.svc, r.svc.Store()
		services, workloadPEM = append(services, r.service), r.workloadPEM
	}
	var chatServer *chat.Server // for the gateway's checks before the body, when chat runs here
	if p.has(RoleChat) {
		r, err := startChat(ctx, p, st.SecretsAddr)
		if err != nil {
			return nil, err
		}
		st.ChatAddr, chatServer = r.addr, r.impl
		services = append(services, r.service)
	}
	if p.has(RoleGateway) {
		r, err := startGateway(ctx, p, services, chatServer, workloadPEM)
		if err != nil {
			return nil, err
		}
		st.GatewayAddr, st.AdminAddr, st.AdminGRPCAddr, st.gateway = r.addr, r.adminAddr, r.adminGRPCAddr, r.gw
	}
	if cfg.StatsListen != "" {
		if st.StatsAddr, err = startStatsListener(p, allHealthy(services)); err != nil {
			return nil, err
		}
	}
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
		logger.Info(fmt.Sprintf("try it: %s creds list -addr %s -data-dir %s%s", self, cfg.restURL(st.GatewayAddr), dataDir, cfg.caHint(" -ca-file ")))
		logger.Info(fmt.Sprintf("or with curl: curl%s -u \"$(%s token -data-dir %s -from alice -user-type user -basic)\" %s/v1/value_generator",
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
func chatConfig(cfg Config, secretsAddr string) chat.Config {
	c := cfg.Chat
	c.Inbound.ShutdownGrace = cfg.ShutdownTimeout
	if c.Secrets.Service == "" {
		return c
	}
	if c.Secrets.Addr == "" {
		c.Secrets.Addr = secretsAddr
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

// Wait blocks until every long-running piece of every role has returned and what the roles opened
// (stores, the chat queue, listeners, the audit trail) is closed, and returns the first error.
func (s *Stack) Wait() error {
	err := s.life.wait()
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
