// Package netlimits holds the limits every gantry listener applies to what one client may hold or
// send: HTTP header, read, write and idle timeouts, the header size and the number of query
// parameters for the HTTP listeners (REST and admin), and message size, handshake time, keepalive and
// stream limits for the gRPC listeners. One Config serves every listener of a process, so no listener
// can be built without them and an operator sets them in one place.
package netlimits

import (
	"log"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Config bounds the connections of every listener.
type Config struct {
	// ReadHeaderTimeout is how long a client may take to send the request line and headers: it cuts
	// off slow-loris clients that trickle headers to hold a connection.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end of the answer. It must
	// exceed the gateway's upstream timeout, or slow answers are cut before their JSON error is sent.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections with no request for this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line plus headers; larger requests get 431.
	MaxHeaderBytes int
	// MaxQueryParams bounds the number of query parameters of one request; more get 400.
	MaxQueryParams int

	// GRPCMaxRecvMsgBytes bounds one gRPC request message.
	GRPCMaxRecvMsgBytes int
	// GRPCConnectionTimeout bounds the HTTP/2 handshake of a new gRPC connection.
	GRPCConnectionTimeout time.Duration
	// GRPCMaxConcurrentStreams bounds the calls one gRPC connection may have in flight.
	GRPCMaxConcurrentStreams uint32
	// GRPCKeepaliveTime and GRPCKeepaliveTimeout: the server pings a connection idle for
	// GRPCKeepaliveTime and closes it when no answer comes within GRPCKeepaliveTimeout, so dead peers
	// do not pin connections.
	GRPCKeepaliveTime    time.Duration
	GRPCKeepaliveTimeout time.Duration
	// GRPCMaxConnectionIdle closes gRPC connections with no call for this long (0: never).
	GRPCMaxConnectionIdle time.Duration
}

// DefaultConfig suits a gateway whose upstream timeout is 30 s and bodies are at most a few MiB.
func DefaultConfig() Config {
	return Config{
		ReadHeaderTimeout:        10 * time.Second,
		ReadTimeout:              30 * time.Second,
		WriteTimeout:             60 * time.Second,
		IdleTimeout:              120 * time.Second,
		MaxHeaderBytes:           64 << 10,
		MaxQueryParams:           100,
		GRPCMaxRecvMsgBytes:      8 << 20,
		GRPCConnectionTimeout:    10 * time.Second,
		GRPCMaxConcurrentStreams: 1000,
		GRPCKeepaliveTime:        2 * time.Minute,
		GRPCKeepaliveTimeout:     20 * time.Second,
		GRPCMaxConnectionIdle:    0,
	}
}

// Settings declares the listener limits for the settings table (group "limits"); every listener
// of the process shares them.
func (c *Config) Settings() settings.Part {
	const group = "limits"
	return settings.Part{Settings: []settings.Setting{
		{Name: "http-read-header-timeout", Group: group, Value: settings.Duration(&c.ReadHeaderTimeout), Usage: "time a client may take to send request headers (REST and admin listeners; cuts off slow-loris clients)"},
		{Name: "http-read-timeout", Group: group, Value: settings.Duration(&c.ReadTimeout), Usage: "time a client may take to send a whole request, body included"},
		{Name: "http-write-timeout", Group: group, Value: settings.Duration(&c.WriteTimeout), Usage: "time from the end of the request headers to the end of the answer (keep it above -upstream-timeout)"},
		{Name: "http-idle-timeout", Group: group, Value: settings.Duration(&c.IdleTimeout), Usage: "idle keep-alive connections are closed after this long"},
		{Name: "http-max-header-bytes", Group: group, Value: settings.Int(&c.MaxHeaderBytes), Usage: "largest request line plus headers in bytes (431 beyond)"},
		{Name: "http-max-query-params", Group: group, Value: settings.Int(&c.MaxQueryParams), Usage: "most query parameters in one request (400 beyond)"},
		{Name: "grpc-max-recv-msg-bytes", Group: group, Value: settings.Int(&c.GRPCMaxRecvMsgBytes), Usage: "largest gRPC request message in bytes (every gRPC listener)"},
		{Name: "grpc-connection-timeout", Group: group, Value: settings.Duration(&c.GRPCConnectionTimeout), Usage: "time a new gRPC connection may take to complete its handshake"},
		{Name: "grpc-max-concurrent-streams", Group: group, Value: settings.Uint32(&c.GRPCMaxConcurrentStreams), Usage: "most calls in flight on one gRPC connection"},
		{Name: "grpc-keepalive-time", Group: group, Value: settings.Duration(&c.GRPCKeepaliveTime), Usage: "the server pings a gRPC connection idle for this long"},
		{Name: "grpc-keepalive-timeout", Group: group, Value: settings.Duration(&c.GRPCKeepaliveTimeout), Usage: "a gRPC connection whose ping is not answered within this is closed"},
		{Name: "grpc-max-connection-idle", Group: group, Value: settings.Duration(&c.GRPCMaxConnectionIdle), Usage: "gRPC connections with no call for this long are closed (0: never)"},
	}}
}

// Validate reports the first bad setting, naming it.
func (c Config) Validate() error {
	for name, d := range map[string]time.Duration{
		"http-read-header-timeout": c.ReadHeaderTimeout, "http-read-timeout": c.ReadTimeout,
		"http-write-timeout": c.WriteTimeout, "http-idle-timeout": c.IdleTimeout,
		"grpc-connection-timeout": c.GRPCConnectionTimeout, "grpc-keepalive-time": c.GRPCKeepaliveTime,
		"grpc-keepalive-timeout": c.GRPCKeepaliveTimeout,
	} {
		if d <= 0 {
			return settings.Invalid(name, "must be positive, got %v", d)
		}
	}
	if c.GRPCMaxConnectionIdle < 0 {
		return settings.Invalid("grpc-max-connection-idle", "must not be negative, got %v", c.GRPCMaxConnectionIdle)
	}
	if c.ReadHeaderTimeout > c.ReadTimeout {
		return settings.Invalid("http-read-header-timeout", "%v is longer than -http-read-timeout %v", c.ReadHeaderTimeout, c.ReadTimeout)
	}
	// Below 4 KiB ordinary browsers and kmsauth headers (a token is ~1 KiB) no longer fit.
	if c.MaxHeaderBytes < 4<<10 {
		return settings.Invalid("http-max-header-bytes", "must be at least 4096, got %d", c.MaxHeaderBytes)
	}
	if c.MaxQueryParams < 1 {
		return settings.Invalid("http-max-query-params", "must be at least 1, got %d", c.MaxQueryParams)
	}
	if c.GRPCMaxRecvMsgBytes < 1<<10 {
		return settings.Invalid("grpc-max-recv-msg-bytes", "must be at least 1024, got %d", c.GRPCMaxRecvMsgBytes)
	}
	if c.GRPCMaxConcurrentStreams < 1 {
		return settings.Invalid("grpc-max-concurrent-streams", "must be at least 1, got %d", c.GRPCMaxConcurrentStreams)
	}
	return nil
}

// HTTPServer returns a server for h with every HTTP limit set; errorLog receives the server's own
// errors (TLS handshakes, malformed requests).
func (c Config) HTTPServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// GRPCOptions returns the server options that apply the gRPC limits.
func (c Config) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.GRPCMaxRecvMsgBytes),
		grpc.ConnectionTimeout(c.GRPCConnectionTimeout),
		grpc.MaxConcurrentStreams(c.GRPCMaxConcurrentStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:              c.GRPCKeepaliveTime,
			Timeout:           c.GRPCKeepaliveTimeout,
			MaxConnectionIdle: c.GRPCMaxConnectionIdle,
		}),
		// Clients may ping (keepalive) no more than every 30 s, even between calls; a client that
		// floods pings is disconnected instead of costing the server a write per ping.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}),
	}
}

// TooManyQueryParams reports whether rawQuery holds more than max parameters. It counts separators
// instead of parsing, so a hostile query costs one pass over its bytes.
func (c Config) TooManyQueryParams(rawQuery string) bool {
	if rawQuery == "" {
		return false
	}
	return strings.Count(rawQuery, "&")+1 > c.MaxQueryParams
}
