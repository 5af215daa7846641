package proxyadmin

import (
	"fmt"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
)

// ProcessName is the first field of /server_info.
const ProcessName = "gantry"

// Proxy is what the admin interface needs from the running gateway.
type Proxy interface {
	// Draining reports whether inbound health checks are being failed (after /healthcheck/fail).
	Draining() bool
}

// Service renders the admin endpoints of a proxy.
type Service struct {
	proxy   Proxy
	started time.Time
	now     func() time.Time
}

// NewService returns the admin service of proxy, whose process started at started.
func NewService(proxy Proxy, started time.Time) *Service {
	return &Service{proxy: proxy, started: started, now: time.Now}
}

// ServerInfo renders Envoy 1.x's one-line server information: process name, compiled SHA and build
// type, live|draining, uptime of the current hot-restart epoch, total uptime, and the epoch. Gantry has
// no hot restart, so the epoch is always 0 and both uptimes are equal.
func (s *Service) ServerInfo() string {
	state := "live"
	if s.proxy.Draining() {
		state = "draining"
	}
	uptime := int64(s.now().Sub(s.started) / time.Second)
	return fmt.Sprintf("%s %s/%s %s %d %d %d\n", ProcessName, buildinfo.ShortCommit(), buildinfo.BuildType, state, uptime, uptime, 0)
}

// endpoints is the admin menu, in Envoy's alphabetical order.
var endpoints = []struct{ path, help string }{
	{"/certs", "print certs on machine"},
	{"/clusters", "upstream cluster status"},
	{"/cpuprofiler", "enable/disable the CPU profiler"},
	{"/healthcheck/fail", "cause the server to fail health checks"},
	{"/healthcheck/ok", "cause the server to pass health checks"},
	{"/help", "print this menu"},
	{"/hot_restart_version", "print the hot restart compatibility version"},
	{"/logging", "query/change logging levels"},
	{"/quitquitquit", "exit the server"},
	{"/ready", "print server state, return 200 if LIVE, otherwise return 503"},
	{"/reset_counters", "reset all counters to zero"},
	{"/server_info", "print server version/status information"},
	{"/stats", "print server stats"},
	{"/stats/prometheus", "print server stats in prometheus format"},
}

// Menu renders the list of admin endpoints, as Envoy 1.x prints it.
func Menu() string {
	var b strings.Builder
	b.WriteString("gantry admin commands:\n")
	for _, e := range endpoints {
		fmt.Fprintf(&b, "  %s: %s\n", e.path, e.help)
	}
	return b.String()
}
