package gateway

import (
	"flag"
	"net/netip"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/envflag"
)

// Config configures the gateway.
type Config struct {
	// Listen is the address of the REST listener.
	Listen string
	// AdminListen is the address of the admin HTTP listener. It should stay on loopback: the admin
	// interface has no authentication.
	AdminListen string
	// AdminGRPCListen is the address of the admin gRPC service the admin HTTP listener calls.
	AdminGRPCListen string
	// SecretsUpstream and ChatUpstream are the gRPC addresses of the services.
	SecretsUpstream string
	ChatUpstream    string
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	// InternalCIDRs lists the downstream networks whose requests get x-proxy-internal: true
	// (comma-separated).
	InternalCIDRs string
	// ForwardHeaders lists extra request headers passed to the services as gRPC metadata, e.g. the
	// trusted headers of header authentication (comma-separated).
	ForwardHeaders string
	// UpstreamTimeout bounds one upstream call when the client sets no deadline.
	UpstreamTimeout time.Duration
}

// DefaultConfig serves REST on 127.0.0.1:8080 and admin on 127.0.0.1:9901, calling the services on
// their default loopback ports.
func DefaultConfig() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		AdminListen:     "127.0.0.1:9901",
		AdminGRPCListen: "127.0.0.1:9902",
		SecretsUpstream: "127.0.0.1:9090",
		ChatUpstream:    "127.0.0.1:9091",
		MaxBodyBytes:    1 << 20,
		InternalCIDRs:   "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7",
		UpstreamTimeout: 30 * time.Second,
	}
}

// AddFlags registers the settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "gateway-listen", c.Listen, "REST listen address of the gateway")
	fs.StringVar(&c.AdminListen, "admin-listen", c.AdminListen, "admin HTTP listen address (keep it on loopback)")
	fs.StringVar(&c.AdminGRPCListen, "admin-grpc-listen", c.AdminGRPCListen, "admin gRPC listen address")
	fs.StringVar(&c.SecretsUpstream, "secrets-upstream", c.SecretsUpstream, "gRPC address of the secrets service (when not run in this process)")
	fs.StringVar(&c.ChatUpstream, "chat-upstream", c.ChatUpstream, "gRPC address of the chat service (when not run in this process)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body in bytes")
	fs.StringVar(&c.InternalCIDRs, "internal-cidrs", c.InternalCIDRs, "comma-separated downstream networks marked x-proxy-internal: true")
	fs.StringVar(&c.ForwardHeaders, "forward-headers", c.ForwardHeaders, "comma-separated extra request headers forwarded to the services")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", c.UpstreamTimeout, "deadline of one upstream call")
}

// Validate reports the first bad setting, naming it.
func (c Config) Validate() error {
	for flagName, v := range map[string]string{
		"gateway-listen": c.Listen, "admin-listen": c.AdminListen, "admin-grpc-listen": c.AdminGRPCListen,
		"secrets-upstream": c.SecretsUpstream, "chat-upstream": c.ChatUpstream,
	} {
		if err := envflag.CheckHostPort(flagName, v); err != nil {
			return err
		}
	}
	if c.MaxBodyBytes < 1 {
		return envflag.Invalid("max-body-bytes", "must be at least 1, got %d", c.MaxBodyBytes)
	}
	if c.UpstreamTimeout <= 0 {
		return envflag.Invalid("upstream-timeout", "must be positive, got %v", c.UpstreamTimeout)
	}
	if _, err := c.internalPrefixes(); err != nil {
		return err
	}
	return nil
}

func (c Config) internalPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range splitList(c.InternalCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, envflag.Invalid("internal-cidrs", "%q is not a CIDR", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
