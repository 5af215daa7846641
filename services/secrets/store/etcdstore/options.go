package etcdstore

import (
	"os"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Options configures the etcd store (GANTRY_STORE=etcd). They are settings of the process
// (Settings), in the storage group of the secrets service's own.
type Options struct {
	// Endpoints are the client URLs of the etcd members (http://host:port or https://host:port).
	Endpoints []string
	// Prefix is prepended to every key ("/gantry/"); several gantry installations can share a cluster
	// under distinct prefixes.
	Prefix string
	// CAFile verifies the members' certificates; CertFile and KeyFile are this client's certificate
	// (both or neither). Any of them switches the connection to TLS.
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds connecting at startup; RequestTimeout bounds each etcd request (a request
	// that times out answers 503, the service being unavailable rather than the request wrong).
	DialTimeout, RequestTimeout time.Duration
	// MaxRequestBytes is the largest write transaction sent; it must not exceed the members'
	// --max-request-bytes (etcd's default: 1.5 MiB). Larger writes fail with ErrTooLarge.
	MaxRequestBytes int
	// KeepAliveTime and KeepAliveTimeout are the gRPC keepalive of the client's member connections:
	// a member silent for KeepAliveTime is pinged and dropped when no answer comes within
	// KeepAliveTimeout (gRPC refuses pings more often than every 10 s).
	KeepAliveTime, KeepAliveTimeout time.Duration
	// ProbeInterval is how often every member is asked for its status on a connection of its own;
	// a member that does not answer within ProbeTimeout, or answers without a leader in the newest
	// term (cut off from its peers), is taken out of service (its requests in flight end: reads go
	// to another member, a write that may have been applied fails) until it serves again. This is
	// what routes around a frozen or cut-off member within seconds, long before keepalive or the
	// request timeout notices. 0 disables it.
	ProbeInterval, ProbeTimeout time.Duration
}

// DefaultOptions is a local single member with etcd's default request limit.
func DefaultOptions() Options {
	return Options{
		Endpoints:        []string{"http://127.0.0.1:2379"},
		Prefix:           "/gantry/",
		DialTimeout:      5 * time.Second,
		RequestTimeout:   5 * time.Second,
		MaxRequestBytes:  1536 * 1024,
		KeepAliveTime:    10 * time.Second,
		KeepAliveTimeout: 3 * time.Second,
		ProbeInterval:    time.Second,
		ProbeTimeout:     time.Second,
	}
}

// Validate reports the first bad etcd setting, by name; the process checks it when it runs the secrets
// service with -store=etcd.
func (o Options) Validate() error {
	if len(o.Endpoints) == 0 {
		return settings.Invalid("etcd-endpoints", "must list at least one etcd client URL")
	}
	for _, e := range o.Endpoints {
		hostPort := e
		if scheme, rest, ok := strings.Cut(e, "://"); ok {
			if scheme != "http" && scheme != "https" {
				return settings.Invalid("etcd-endpoints", "%q: scheme must be http or https", e)
			}
			hostPort = rest
		}
		if err := settings.CheckHostPort("etcd-endpoints", strings.TrimSuffix(hostPort, "/")); err != nil {
			return err
		}
	}
	if o.Prefix == "" {
		return settings.Invalid("etcd-prefix", "must not be empty")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return settings.Invalid("etcd-cert-file", "-etcd-cert-file and -etcd-key-file go together")
	}
	for flagName, file := range map[string]string{"etcd-ca-file": o.CAFile, "etcd-cert-file": o.CertFile, "etcd-key-file": o.KeyFile} {
		if file == "" {
			continue
		}
		if _, err := os.Stat(file); err != nil {
			return settings.Invalid(flagName, "%w", err)
		}
	}
	if o.DialTimeout <= 0 {
		return settings.Invalid("etcd-dial-timeout", "must be positive, got %v", o.DialTimeout)
	}
	if o.RequestTimeout <= 0 {
		return settings.Invalid("etcd-request-timeout", "must be positive, got %v", o.RequestTimeout)
	}
	if o.KeepAliveTime < 10*time.Second {
		return settings.Invalid("etcd-keepalive-time", "must be at least 10s (gRPC raises anything shorter), got %v", o.KeepAliveTime)
	}
	if o.KeepAliveTimeout <= 0 {
		return settings.Invalid("etcd-keepalive-timeout", "must be positive, got %v", o.KeepAliveTimeout)
	}
	if o.ProbeInterval < 0 {
		return settings.Invalid("etcd-probe-interval", "must not be negative, got %v", o.ProbeInterval)
	}
	if o.ProbeInterval > 0 && (o.ProbeTimeout <= 0 || o.ProbeTimeout > o.RequestTimeout) {
		return settings.Invalid("etcd-probe-timeout", "must be positive and at most -etcd-request-timeout (%v), got %v", o.RequestTimeout, o.ProbeTimeout)
	}
	if o.MaxRequestBytes < 64<<10 {
		return settings.Invalid("etcd-max-request-bytes", "must be at least 65536, got %d", o.MaxRequestBytes)
	}
	return nil
}

// groupStorage is the group of the secrets service's storage settings (-store, -bolt-check...) in -h
// and docs/configuration.md: the etcd settings are listed with them.
const groupStorage = "storage"

// Settings declares the etcd settings for the settings table.
func (o *Options) Settings() settings.Part {
	return settings.Part{Settings: []settings.Setting{
		{Name: "etcd-prefix", Group: groupStorage, Value: settings.String(&o.Prefix), Usage: "prefix of every etcd key gantry writes"},
		{Name: "etcd-ca-file", Group: groupStorage, Value: settings.String(&o.CAFile), Usage: "PEM file of the CA that signed the etcd members' certificates (enables TLS)"},
		{Name: "etcd-cert-file", Group: groupStorage, Value: settings.String(&o.CertFile), Usage: "PEM client certificate for etcd (with -etcd-key-file)"},
		{Name: "etcd-key-file", Group: groupStorage, Value: settings.String(&o.KeyFile), Usage: "PEM private key of -etcd-cert-file"},
		{Name: "etcd-dial-timeout", Group: groupStorage, Value: settings.Duration(&o.DialTimeout), Usage: "how long startup waits for etcd"},
		{Name: "etcd-request-timeout", Group: groupStorage, Value: settings.Duration(&o.RequestTimeout), Usage: "bound of each etcd request (503 when exceeded)"},
		{Name: "etcd-keepalive-time", Group: groupStorage, Value: settings.Duration(&o.KeepAliveTime), Usage: "ping an etcd member connection silent this long (at least 10s: gRPC's floor)"},
		{Name: "etcd-keepalive-timeout", Group: groupStorage, Value: settings.Duration(&o.KeepAliveTimeout), Usage: "drop an etcd member connection whose ping is not answered within this"},
		{Name: "etcd-probe-interval", Group: groupStorage, Value: settings.Duration(&o.ProbeInterval), Usage: "how often each etcd member's status is probed; members that do not answer, have no leader or lead an older term (cut off from their peers) get no requests until they serve again, the member that leads gets them first, and while the cluster has no leader (quorum lost) requests answer 503 at once (0 disables)"},
		{Name: "etcd-probe-timeout", Group: groupStorage, Value: settings.Duration(&o.ProbeTimeout), Usage: "how long a member may take to answer the status probe"},
		{Name: "etcd-max-request-bytes", Group: groupStorage, Value: settings.Int(&o.MaxRequestBytes), Usage: "largest etcd write transaction; at most the members' --max-request-bytes"},
		{Name: "etcd-endpoints", Group: groupStorage, Value: settings.List(&o.Endpoints), Usage: "comma list of etcd client URLs (-store=etcd)"},
	}}
}
