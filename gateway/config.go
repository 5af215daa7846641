package gateway

import (
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/netlimits"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/stats"
)

// Config configures the gateway: its listeners and edge here, its clusters in the embedded
// upstream.Config.
type Config struct {
	upstream.Config
	// Listen is the address of the REST listener.
	Listen string
	// AdminListen is the address of the admin HTTP listener. It should stay on loopback: the admin
	// interface has no authentication.
	AdminListen string
	// AdminGRPCListen is the address of the admin gRPC service the admin HTTP listener calls.
	AdminGRPCListen string
	// AdminPostOnly makes the mutating admin endpoints answer 405 to GET (the default, as modern
	// Envoy): a link or an <img> in a web page cannot stop the gateway.
	AdminPostOnly bool
	// AdminAllowedHosts lists further Host names the admin listener answers (comma-separated), beyond
	// its own IP and, on loopback, localhost: the names it is published under (docker-compose).
	AdminAllowedHosts string
	// ProfilePath is where /cpuprofiler?enable=y writes the CPU profile.
	ProfilePath string
	// LocalHealth, when set, is the health of the services running in the gateway's own process
	// (-target=all): /healthcheck and the admin /ready answer 503 while it returns an error (a
	// secrets store whose writes are stalled or that failed), as well as while draining. Not a
	// setting: the process wires it.
	LocalHealth func() error
	// TLSCertFile and TLSKeyFile, when both set, make the REST listener serve HTTPS.
	TLSCertFile string
	TLSKeyFile  string
	// HSTSMaxAge is the max-age of the Strict-Transport-Security header of every HTTPS answer: a
	// browser that saw it goes to this host over HTTPS only for that long, so a network attacker
	// cannot downgrade a later visit to HTTP and read its session cookie. 0 sends none (a proxy in
	// front terminating TLS may set its own).
	HSTSMaxAge time.Duration
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	// LargeBodyThreshold and LargeBodiesInFlight bound what large bodies may cost: a secrets call with
	// a body over LargeBodyThreshold bytes has its credentials checked by the service before the body
	// is read, then holds one of LargeBodiesInFlight slots while it runs, and gets 503 with
	// Retry-After before its body is read when none is free.
	LargeBodyThreshold  int64
	LargeBodiesInFlight int
	// RefuseBeforeBody answers, before the body is read, calls to non-public routes that the service
	// would refuse whatever their body (no credential at all, a chat route access control denies).
	// The process builds it from the services' rules (it is not a flag); nil refuses nothing early.
	RefuseBeforeBody RefuseBeforeBody
	// InternalCIDRs lists the downstream networks whose requests get x-proxy-internal: true
	// (comma-separated).
	InternalCIDRs string
	// ForwardHeaders lists extra request headers passed to the services as gRPC metadata, e.g. the
	// trusted headers of header authentication (comma-separated).
	ForwardHeaders string
	// AccessLog is where the REST listener's access log goes: stdout, off, or a file path.
	AccessLog string
	// AdminClientCredentials secure the gateway's own connection to its admin gRPC listener. The
	// process sets them from its internal TLS settings (they are not flags); nil means plaintext, for
	// tests of the gateway alone.
	AdminClientCredentials credentials.TransportCredentials
	// AdminServerOptions secure the admin gRPC listener: its TLS credentials and the interceptors that
	// let only the gateway's certificate in (internaltls.AdminServerOptions). The process sets them;
	// nil means plaintext with no peer check, for tests of the gateway alone.
	AdminServerOptions []grpc.ServerOption
	// ClientCAs, the PEM of the CAs of services' client certificates, makes an HTTPS REST listener ask
	// for a client certificate and forward the chain a caller presents (and proves it holds the key
	// of) to the services as wirekeys.ClientCert; the secrets service verifies it. The process
	// sets it (it is not a flag); nil asks for none.
	ClientCAs []byte
	// Audit is the process's audit trail, which records admin mutations; nil records none (the
	// process sets it, it is not a flag).
	Audit *audit.Sink
	// Stats is the store /stats shows; nil makes the gateway's own. The stack shares one with the
	// services of the process, so their counters (chat's inbound queue) show beside the proxy's.
	Stats *stats.Store
	// SlackMaxUnverifiedInFlight bounds the Slack request bodies being read before the chat service
	// has verified their signature; beyond it a Slack request gets 503 with Retry-After at once.
	SlackMaxUnverifiedInFlight int
	// SlackMaxSkew is the replay window the Slack receivers check X-Slack-Request-Timestamp against
	// before reading a body; the process sets it from -chat-inbound-max-skew (it is not a flag of its
	// own, so the gateway and the chat service cannot disagree). Zero is 5 minutes.
	SlackMaxSkew time.Duration
	// SlackAcceptUnsigned reads the bodies of Slack requests without signature headers (within the
	// slots and the 1 MiB cap): the legacy verification token of -chat-inbound-allow-verification-token
	// is in the body. The process sets it from that setting. Off, such requests are refused before
	// their body is read (but for Slack's ssl_check, read up to 1 KiB).
	SlackAcceptUnsigned bool
	// Limits bound the connections of the REST, admin and admin gRPC listeners. The process
	// declares their settings once for every listener (netlimits.Config.Settings), so Settings
	// here leaves them out.
	Limits netlimits.Config
}

// DefaultConfig serves REST on 127.0.0.1:8080 and admin on 127.0.0.1:9901, calling the services on
// their default loopback ports.
func DefaultConfig() Config {
	return Config{
		Config:              upstream.DefaultConfig(),
		Listen:              "127.0.0.1:8080",
		AdminListen:         "127.0.0.1:9901",
		AdminGRPCListen:     "127.0.0.1:9902",
		MaxBodyBytes:        1 << 20,
		LargeBodyThreshold:  64 << 10,
		LargeBodiesInFlight: 8,
		HSTSMaxAge:          365 * 24 * time.Hour,
		AdminPostOnly:       true,
		AccessLog:           "stdout",
		InternalCIDRs:       "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7",
		ProfilePath:         filepath.Join(os.TempDir(), "gantry.prof"),
		Limits:              netlimits.DefaultConfig(),

		SlackMaxUnverifiedInFlight: 32,
	}
}

// Settings declares the gateway's settings for the settings table: the REST edge and clusters
// (group "gateway") and the admin interface (group "proxyadmin"). The listener limits are the
// process's (netlimits), declared once for every listener.
func (c *Config) Settings() settings.Part {
	const groupGateway, groupAdmin = "gateway", "proxyadmin"
	return settings.Part{Settings: []settings.Setting{
		{Name: "gateway-listen", Group: groupGateway, Value: settings.String(&c.Listen), Usage: "REST listen address of the gateway"},
		{Name: "admin-listen", Group: groupAdmin, Value: settings.String(&c.AdminListen), Usage: "admin HTTP listen address (keep it on loopback)"},
		{Name: "admin-grpc-listen", Group: groupAdmin, Value: settings.String(&c.AdminGRPCListen), Usage: "admin gRPC listen address"},
		{Name: "secrets-upstream", Group: groupGateway, Value: settings.String(&c.SecretsUpstream), Usage: "comma list of gRPC addresses of the secrets hosts (when not run in this process)"},
		{Name: "chat-upstream", Group: groupGateway, Value: settings.String(&c.ChatUpstream), Usage: "comma list of gRPC addresses of the chat hosts (when not run in this process); empty: no chat cluster, and chat routes answer 404"},
		{Name: "clusters-file", Group: groupGateway, Value: settings.String(&c.ClustersFile), Usage: "YAML or JSON file of upstream clusters (replaces -secrets-upstream/-chat-upstream for the clusters it names)"},
		{Name: "health-check-interval", Group: groupGateway, Value: settings.Duration(&c.HealthCheck.Interval), Usage: "interval of active gRPC health checks"},
		{Name: "health-check-timeout", Group: groupGateway, Value: settings.Duration(&c.HealthCheck.Timeout), Usage: "timeout of one active health check"},
		{Name: "health-check-healthy-threshold", Group: groupGateway, Value: settings.Int(&c.HealthCheck.HealthyThreshold), Usage: "consecutive passed health checks that bring a host back"},
		{Name: "health-check-unhealthy-threshold", Group: groupGateway, Value: settings.Int(&c.HealthCheck.UnhealthyThreshold), Usage: "consecutive failed health checks that mark a host /failed_active_hc"},
		{Name: "health-check-service", Group: groupGateway, Value: settings.String(&c.HealthCheck.ServiceName), Usage: "service name asked of grpc.health.v1.Health (empty: the whole server)"},
		{Name: "outlier-consecutive-failures", Group: groupGateway, Value: settings.Int(&c.Outlier.ConsecutiveFailures), Usage: "consecutive failed requests (Unavailable, Internal, Unknown, DataLoss, DeadlineExceeded) that eject a host; 0 disables"},
		{Name: "outlier-interval", Group: groupGateway, Value: settings.Duration(&c.Outlier.Interval), Usage: "how often ejections are reviewed"},
		{Name: "outlier-base-ejection-time", Group: groupGateway, Value: settings.Duration(&c.Outlier.BaseEjectionTime), Usage: "ejection time, multiplied by the number of ejections of the host"},
		{Name: "outlier-max-ejection-time", Group: groupGateway, Value: settings.Duration(&c.Outlier.MaxEjectionTime), Usage: "longest ejection"},
		{Name: "outlier-max-ejection-percent", Group: groupGateway, Value: settings.Int(&c.Outlier.MaxEjectionPercent), Usage: "largest share of a cluster's hosts ejected at once"},
		{Name: "healthy-panic-threshold", Group: groupGateway, Value: settings.Int(&c.HealthyPanicThreshold), Usage: "percent of healthy hosts below which a cluster routes to all its hosts, healthy or not (Envoy's panic threshold); 0 disables"},
		{Name: "retry-per-try-timeout", Group: groupGateway, Value: settings.Duration(&c.Retry.PerTryTimeout), Usage: "timeout of one attempt of a call (Envoy's per_try_timeout): a timed-out read is retried on another host; a write that ran this long on a host that answers nothing meanwhile, not even a health check then (frozen), answers 504, is not retried, and the host is ejected; 0: none"},
		{Name: "retry-num-retries", Group: groupGateway, Value: settings.Int(&c.Retry.NumRetries), Usage: "most retries of one call (Envoy's num_retries)"},
		{Name: "retry-budget-percent", Group: groupGateway, Value: settings.Int(&c.Retry.BudgetPercent), Usage: "retries in flight allowed as a percent of requests in flight (Envoy's retry_budget)"},
		{Name: "retry-min-concurrency", Group: groupGateway, Value: settings.Int(&c.Retry.MinRetryConcurrency), Usage: "retries in flight always allowed by the retry budget"},
		{Name: "circuit-breaker-max-requests", Group: groupGateway, Value: settings.Int(&c.Breakers.MaxRequests), Usage: "requests in flight per cluster; more get 503 with x-envoy-overloaded (Envoy's max_requests)"},
		{Name: "circuit-breaker-max-pending-requests", Group: groupGateway, Value: settings.Int(&c.Breakers.MaxPendingRequests), Usage: "requests per cluster waiting for a host connection to become ready; more get 503 with x-envoy-overloaded (Envoy's max_pending_requests)"},
		{Name: "circuit-breaker-max-retries", Group: groupGateway, Value: settings.Int(&c.Breakers.MaxRetries), Usage: "retries in flight per cluster (Envoy's max_retries)"},
		{Name: "admin-mutations-post-only", Group: groupAdmin, Value: settings.Bool(&c.AdminPostOnly), Usage: "mutating admin endpoints answer 405 to GET (=false allows GET, as old Envoy)"},
		{Name: "admin-allowed-hosts", Group: groupAdmin, Value: settings.String(&c.AdminAllowedHosts), Usage: "comma-separated extra Host names the admin listener answers, beyond its own IP and (on loopback) localhost"},
		{Name: "admin-profile-path", Group: groupAdmin, Value: settings.String(&c.ProfilePath), Default: "$TMPDIR/gantry.prof", Usage: "file /cpuprofiler?enable=y writes the CPU profile to"},
		{Name: "tls-cert-file", Group: groupGateway, Value: settings.String(&c.TLSCertFile), Usage: "PEM certificate chain of the REST listener (with -tls-key-file: serve HTTPS)"},
		{Name: "tls-key-file", Group: groupGateway, Value: settings.String(&c.TLSKeyFile), Usage: "PEM private key of the REST listener"},
		{Name: "hsts-max-age", Group: groupGateway, Value: settings.Duration(&c.HSTSMaxAge), Usage: "max-age of the Strict-Transport-Security header on HTTPS answers (browsers then refuse plain HTTP to this host for that long); 0: none"},
		{Name: "max-body-bytes", Group: groupGateway, Value: settings.Int64(&c.MaxBodyBytes), Usage: "largest accepted request body in bytes"},
		{Name: "large-body-threshold", Group: groupGateway, Value: settings.Int64(&c.LargeBodyThreshold), Usage: "request bodies over this many bytes are read only after the secrets service accepted the call's credentials, and hold one of -large-bodies-in-flight slots (docs/gateway.md)"},
		{Name: "large-bodies-in-flight", Group: groupGateway, Value: settings.Int(&c.LargeBodiesInFlight), Usage: "requests with a body over -large-body-threshold processed at once; more get 503 with Retry-After before their body is read"},
		{Name: "internal-cidrs", Group: groupGateway, Value: settings.String(&c.InternalCIDRs), Usage: "comma-separated downstream networks marked x-proxy-internal: true"},
		{Name: "forward-headers", Group: groupGateway, Value: settings.String(&c.ForwardHeaders), Usage: "comma-separated extra request headers forwarded to the services"},
		{Name: "access-log", Group: groupGateway, Value: settings.String(&c.AccessLog), Usage: "access log of the REST listener, one Envoy-format line per request: stdout, off, or a file path"},
		{Name: "slack-max-unverified-in-flight", Group: groupGateway, Value: settings.Int(&c.SlackMaxUnverifiedInFlight), Usage: "Slack request bodies read at once before their signature is verified; more get 503 with Retry-After"},
		{Name: "upstream-timeout", Group: groupGateway, Value: settings.Duration(&c.UpstreamTimeout), Usage: "deadline of one upstream call"},
	}}
}

// Validate reports the first bad setting, naming it.
func (c Config) Validate() error {
	for flagName, v := range map[string]string{
		"gateway-listen": c.Listen, "admin-listen": c.AdminListen, "admin-grpc-listen": c.AdminGRPCListen,
	} {
		if err := settings.CheckHostPort(flagName, v); err != nil {
			return err
		}
	}
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return settings.Invalid("tls-cert-file", "-tls-cert-file and -tls-key-file must be set together")
	}
	if c.ProfilePath == "" {
		return settings.Invalid("admin-profile-path", "must not be empty")
	}
	if c.MaxBodyBytes < 1 {
		return settings.Invalid("max-body-bytes", "must be at least 1, got %d", c.MaxBodyBytes)
	}
	if c.LargeBodyThreshold < 0 {
		return settings.Invalid("large-body-threshold", "must not be negative, got %d", c.LargeBodyThreshold)
	}
	if c.LargeBodiesInFlight < 1 {
		return settings.Invalid("large-bodies-in-flight", "must be at least 1, got %d", c.LargeBodiesInFlight)
	}
	if c.SlackMaxUnverifiedInFlight < 1 || c.SlackMaxUnverifiedInFlight > 100000 {
		return settings.Invalid("slack-max-unverified-in-flight", "must be between 1 and 100000, got %d", c.SlackMaxUnverifiedInFlight)
	}
	if c.AccessLog == "" {
		return settings.Invalid("access-log", "must be stdout, off or a file path")
	}
	if c.UpstreamTimeout <= 0 {
		return settings.Invalid("upstream-timeout", "must be positive, got %v", c.UpstreamTimeout)
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	// A write deadline shorter than the upstream one would cut slow answers before their JSON error.
	if c.Limits.WriteTimeout <= c.UpstreamTimeout {
		return settings.Invalid("http-write-timeout", "%v must be longer than -upstream-timeout %v", c.Limits.WriteTimeout, c.UpstreamTimeout)
	}
	if _, err := c.internalPrefixes(); err != nil {
		return err
	}
	return nil
}

func (c Config) internalPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range settings.SplitList(c.InternalCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, settings.Invalid("internal-cidrs", "%q is not a CIDR", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
