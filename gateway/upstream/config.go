package upstream

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/credentials"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Config configures the upstream side of the gateway: its clusters and their defaults. The gateway's
// Config embeds it, so its settings keep their names.
type Config struct {
	// SecretsUpstream and ChatUpstream are comma lists of the gRPC addresses (host:port) of the
	// hosts of the secrets and chat clusters, each with weight 1. ClustersFile can replace them. An
	// empty list makes no cluster (unless ClustersFile names it), and the service's routes answer 404:
	// ChatUpstream is empty by default, so a gateway without chat has no chat cluster that never
	// answers (a process that runs chat itself sets it).
	SecretsUpstream string
	ChatUpstream    string
	// ClustersFile is an optional YAML or JSON file of clusters (hosts with weight, zone, canary,
	// and per-cluster health check and outlier settings).
	ClustersFile string
	// HealthCheck and Outlier apply to every cluster that does not set its own.
	HealthCheck HealthCheckConfig
	Outlier     OutlierConfig
	// HealthyPanicThreshold is Envoy's healthy panic threshold in percent, for clusters that do not
	// set their own: below that share of healthy hosts, requests go to every host (so outlier
	// detection alone can never leave a cluster without hosts); 0 disables.
	HealthyPanicThreshold int
	// Retry and Breakers apply to every cluster that does not set its own.
	Retry    RetryConfig
	Breakers BreakerConfig
	// UpstreamTimeout bounds one upstream call when the client sets no deadline (the gateway sets
	// the deadline and validates it); a cluster replaced by a reload is closed at most this long
	// (and a second) after, once its calls in flight are done.
	UpstreamTimeout time.Duration
	// UpstreamCredentials secure the gateway's connections to the services. The process sets them
	// from its internal TLS settings (they are not flags); nil means plaintext, for tests of the
	// gateway alone.
	UpstreamCredentials credentials.TransportCredentials
	// InProcessServices maps the address of a host that is a service of this same process to a
	// direct connection to that service (grpcserver.Server.Direct): its calls run the service's own
	// interceptor chain and handler in this process, with no gRPC transport. Such a host keeps its
	// address as its name in /clusters and stats, and is health-checked, outlier-detected, retried and
	// bounded by the breakers like any other. The process sets it (it is not a flag); nil calls every
	// host over the network.
	InProcessServices map[string]InProcessService
}

// DefaultConfig calls the services on their default loopback ports, with Envoy's defaults but for
// the retry budget (DefaultRetry).
func DefaultConfig() Config {
	return Config{
		SecretsUpstream:       "127.0.0.1:9090",
		ChatUpstream:          "",
		UpstreamTimeout:       30 * time.Second,
		HealthCheck:           DefaultHealthCheck(),
		Outlier:               DefaultOutlier(),
		HealthyPanicThreshold: 50,
		Retry:                 DefaultRetry(),
		Breakers:              DefaultBreakers(),
	}
}

// Validate reports the first bad setting of the clusters, naming it (the upstream timeout is the
// gateway's to check, against its write timeout).
func (c Config) Validate() error {
	for flagName, v := range map[string]string{"secrets-upstream": c.SecretsUpstream, "chat-upstream": c.ChatUpstream} {
		for _, addr := range settings.SplitList(v) {
			if err := settings.CheckHostPort(flagName, addr); err != nil {
				return err
			}
		}
	}
	if err := c.HealthCheck.validate("health-check-"); err != nil {
		return err
	}
	if err := c.Outlier.validate("outlier-"); err != nil {
		return err
	}
	if err := c.Retry.validate("retry-"); err != nil {
		return err
	}
	if err := c.Breakers.validate("circuit-breaker-"); err != nil {
		return err
	}
	if c.HealthyPanicThreshold < 0 || c.HealthyPanicThreshold > 100 {
		return settings.Invalid("healthy-panic-threshold", "must be 0 to 100, got %d", c.HealthyPanicThreshold)
	}
	if _, err := c.Clusters(); err != nil {
		return err
	}
	return nil
}

// Names of the clusters the REST routes use.
const (
	ClusterSecrets = "secrets"
	ClusterChat    = "chat"
)

// HostConfig is one static upstream host of a cluster.
type HostConfig struct {
	// Address is host:port of the host's gRPC listener.
	Address string `yaml:"address"`
	// Weight (1-100) is the host's share of requests among the healthy hosts; 0 means 1.
	Weight int `yaml:"weight"`
	// Zone is informational (shown in /clusters).
	Zone string `yaml:"zone"`
	// Canary marks a canary host (shown in /clusters).
	Canary bool `yaml:"canary"`
}

// HealthCheckConfig configures active health checking with the gRPC health protocol.
type HealthCheckConfig struct {
	// Interval between two checks of one host.
	Interval time.Duration `yaml:"interval"`
	// Timeout of one check; a check that takes longer fails.
	Timeout time.Duration `yaml:"timeout"`
	// HealthyThreshold is the number of consecutive passes that bring a failed host back.
	HealthyThreshold int `yaml:"healthy_threshold"`
	// UnhealthyThreshold is the number of consecutive failures that mark a host /failed_active_hc.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
	// ServiceName is asked of grpc.health.v1.Health/Check; empty asks for the server as a whole.
	ServiceName string `yaml:"service_name"`
}

// OutlierConfig configures passive outlier detection from the gRPC status of real requests.
type OutlierConfig struct {
	// ConsecutiveFailures (Envoy's consecutive_5xx) ejects a host after that many failed requests
	// in a row (Unavailable, Internal, Unknown, DataLoss, DeadlineExceeded); 0 disables detection.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// Interval is how often ejections are reviewed (expired ejections end, the ejection multiplier
	// of well-behaved hosts decays).
	Interval time.Duration `yaml:"interval"`
	// BaseEjectionTime is multiplied by the number of times the host was ejected.
	BaseEjectionTime time.Duration `yaml:"base_ejection_time"`
	// MaxEjectionTime caps one ejection.
	MaxEjectionTime time.Duration `yaml:"max_ejection_time"`
	// MaxEjectionPercent caps the share of a cluster's hosts ejected at once (at least one host
	// may always be ejected when it is above zero).
	MaxEjectionPercent int `yaml:"max_ejection_percent"`
}

// RetryConfig is the retry policy of a cluster (Envoy's retry_on: connect-failure,reset plus
// per_try_timeout, num_retries and a retry budget). A call that never reached its host is retried
// whatever the method; a call that reached its host is retried only when the method is idempotent
// (marked idempotency_level = NO_SIDE_EFFECTS in the proto), after a reset, a per-try timeout or an
// Unavailable answer, always on another host.
type RetryConfig struct {
	// PerTryTimeout bounds one attempt of an idempotent call, so a frozen host costs a reader at most
	// this long before its read goes elsewhere. A write is not cut at it: once it has run this long,
	// a host that answered nothing meanwhile gets one health check, and only a host that does not
	// answer it is frozen: the write answers 504 (it may have been applied; it is not repeated) and
	// the host is ejected (frozen.go). 0 leaves only the upstream timeout.
	PerTryTimeout time.Duration `yaml:"per_try_timeout"`
	// NumRetries is the most retries of one call.
	NumRetries int `yaml:"num_retries"`
	// BudgetPercent and MinRetryConcurrency form the retry budget (Envoy's retry_budget): retries in
	// flight may not exceed BudgetPercent of the requests in flight, but MinRetryConcurrency are always
	// allowed. Beyond it a retry is not sent (upstream_rq_retry_overflow).
	BudgetPercent       int `yaml:"budget_percent"`
	MinRetryConcurrency int `yaml:"min_retry_concurrency"`
}

// DefaultRetry: 1 s per try, 2 retries, a budget of 20% of active requests with at least 10 (Envoy
// allows 3: a host dying under a handful of clients then fails reads whose retries overflow it).
// One second, not two: a frozen host holds every client that calls it for a per-try timeout before
// it is found frozen and ejected, and the service's calls take milliseconds.
func DefaultRetry() RetryConfig {
	return RetryConfig{PerTryTimeout: time.Second, NumRetries: 2, BudgetPercent: 20, MinRetryConcurrency: 10}
}

func (r RetryConfig) validate(setting string) error {
	switch {
	case r.PerTryTimeout < 0:
		return settings.Invalid(setting+"per-try-timeout", "must not be negative, got %v", r.PerTryTimeout)
	case r.NumRetries < 0 || r.NumRetries > 10:
		return settings.Invalid(setting+"num-retries", "must be 0 to 10, got %d", r.NumRetries)
	case r.BudgetPercent < 0 || r.BudgetPercent > 100:
		return settings.Invalid(setting+"budget-percent", "must be 0 to 100, got %d", r.BudgetPercent)
	case r.MinRetryConcurrency < 0:
		return settings.Invalid(setting+"min-concurrency", "must not be negative, got %d", r.MinRetryConcurrency)
	}
	return nil
}

// BreakerConfig are a cluster's circuit breakers (Envoy's thresholds): beyond them a request is
// refused at once with 503 and x-envoy-overloaded: true instead of piling onto the hosts.
type BreakerConfig struct {
	// MaxRequests bounds the requests in flight to the cluster.
	MaxRequests int `yaml:"max_requests"`
	// MaxPendingRequests bounds the requests waiting for a host's connection to become ready (a host
	// being dialled, or redialled after it went away).
	MaxPendingRequests int `yaml:"max_pending_requests"`
	// MaxRetries bounds the retries in flight to the cluster.
	MaxRetries int `yaml:"max_retries"`
}

// DefaultBreakers are Envoy's defaults.
func DefaultBreakers() BreakerConfig {
	return BreakerConfig{MaxRequests: 1024, MaxPendingRequests: 1024, MaxRetries: 3}
}

func (b BreakerConfig) validate(setting string) error {
	switch {
	case b.MaxRequests < 1:
		return settings.Invalid(setting+"max-requests", "must be at least 1, got %d", b.MaxRequests)
	case b.MaxPendingRequests < 1:
		return settings.Invalid(setting+"max-pending-requests", "must be at least 1, got %d", b.MaxPendingRequests)
	case b.MaxRetries < 0:
		return settings.Invalid(setting+"max-retries", "must not be negative, got %d", b.MaxRetries)
	}
	return nil
}

// ClusterConfig is one named group of upstream hosts.
type ClusterConfig struct {
	Name        string             `yaml:"name"`
	Hosts       []HostConfig       `yaml:"hosts"`
	HealthCheck *HealthCheckConfig `yaml:"health_check"`
	Outlier     *OutlierConfig     `yaml:"outlier_detection"`
	// HealthyPanicThreshold (percent, Envoy's healthy_panic_threshold): when fewer hosts than this
	// share are healthy, requests go to every host, healthy or not; 0 disables. nil takes
	// -healthy-panic-threshold.
	HealthyPanicThreshold *int `yaml:"healthy_panic_threshold"`
	// Retry and Breakers default to the -retry-* and -circuit-breaker-* flags.
	Retry    *RetryConfig   `yaml:"retry_policy"`
	Breakers *BreakerConfig `yaml:"circuit_breakers"`
}

// routedClusters are the clusters the REST routes use; any other name in the clusters file is a typo
// that would leave its hosts unused.
var routedClusters = map[string]bool{ClusterSecrets: true, ClusterChat: true}

// parseClustersFile reads the clusters file strictly: an unknown key (a typo such as wieght or
// helth_check), a cluster no route uses, or a cluster listed twice stops startup with the file and
// line, rather than being silently ignored.
func parseClustersFile(path string, data []byte) (clustersFile, error) {
	var f clustersFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return f, settings.Invalid("clusters-file", "%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var doc yaml.Node
	_ = yaml.Unmarshal(data, &doc)
	lines := clusterItemLines(&doc)
	seen := map[string]int{}
	for i, cl := range f.Clusters {
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		if !routedClusters[cl.Name] && clusterName.MatchString(cl.Name) {
			return f, settings.Invalid("clusters-file", "%s:%d: cluster %q: no route uses it (the clusters are %s, %s)", path, line, cl.Name, ClusterChat, ClusterSecrets)
		}
		if first, dup := seen[cl.Name]; dup {
			return f, settings.Invalid("clusters-file", "%s:%d: cluster %q is listed twice (first at line %d)", path, line, cl.Name, first)
		}
		seen[cl.Name] = line
	}
	return f, nil
}

// clusterItemLines returns the line of each item of the document's clusters list.
func clusterItemLines(doc *yaml.Node) []int {
	if doc == nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "clusters" && m.Content[i+1].Kind == yaml.SequenceNode {
			var out []int
			for _, item := range m.Content[i+1].Content {
				out = append(out, item.Line)
			}
			return out
		}
	}
	return nil
}

// clusterName keeps names free of dots, which would break the dotted stat names.
var clusterName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// clustersFile is the shape of the -clusters-file document (YAML, or JSON which is YAML too).
type clustersFile struct {
	Clusters []ClusterConfig `yaml:"clusters"`
}

// DefaultHealthCheck checks every 5s with a 1s timeout; two failures eject, one pass restores.
func DefaultHealthCheck() HealthCheckConfig {
	return HealthCheckConfig{Interval: 5 * time.Second, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 2}
}

// DefaultOutlier uses Envoy's defaults: 5 consecutive failures, 10s interval, 30s base ejection,
// 300s cap, at most 10% of hosts (but one host) ejected.
func DefaultOutlier() OutlierConfig {
	return OutlierConfig{ConsecutiveFailures: 5, Interval: 10 * time.Second, BaseEjectionTime: 30 * time.Second,
		MaxEjectionTime: 300 * time.Second, MaxEjectionPercent: 10}
}

func (h HealthCheckConfig) validate(setting string) error {
	switch {
	case h.Interval <= 0:
		return settings.Invalid(setting+"interval", "must be positive, got %v", h.Interval)
	case h.Timeout <= 0:
		return settings.Invalid(setting+"timeout", "must be positive, got %v", h.Timeout)
	case h.HealthyThreshold < 1:
		return settings.Invalid(setting+"healthy-threshold", "must be at least 1, got %d", h.HealthyThreshold)
	case h.UnhealthyThreshold < 1:
		return settings.Invalid(setting+"unhealthy-threshold", "must be at least 1, got %d", h.UnhealthyThreshold)
	}
	return nil
}

func (o OutlierConfig) validate(setting string) error {
	switch {
	case o.ConsecutiveFailures < 0:
		return settings.Invalid(setting+"consecutive-failures", "must not be negative, got %d", o.ConsecutiveFailures)
	case o.Interval <= 0:
		return settings.Invalid(setting+"interval", "must be positive, got %v", o.Interval)
	case o.BaseEjectionTime <= 0:
		return settings.Invalid(setting+"base-ejection-time", "must be positive, got %v", o.BaseEjectionTime)
	case o.MaxEjectionTime < o.BaseEjectionTime:
		return settings.Invalid(setting+"max-ejection-time", "must be at least the base ejection time, got %v", o.MaxEjectionTime)
	case o.MaxEjectionPercent < 0 || o.MaxEjectionPercent > 100:
		return settings.Invalid(setting+"max-ejection-percent", "must be 0 to 100, got %d", o.MaxEjectionPercent)
	}
	return nil
}

// Clusters returns the effective cluster list: secrets and chat from -secrets-upstream and
// -chat-upstream (each only when its list is not empty), replaced or extended by the clusters of
// -clusters-file. Clusters without their own
// health_check or outlier_detection block take the flag settings. The list is sorted by name.
func (c Config) Clusters() ([]ClusterConfig, error) {
	byName := map[string]ClusterConfig{}
	for name, list := range map[string]string{ClusterSecrets: c.SecretsUpstream, ClusterChat: c.ChatUpstream} {
		cl := ClusterConfig{Name: name}
		for _, addr := range settings.SplitList(list) {
			cl.Hosts = append(cl.Hosts, HostConfig{Address: addr, Weight: 1})
		}
		if len(cl.Hosts) == 0 {
			continue // not routed to: no cluster, whose empty membership would alert forever
		}
		byName[name] = cl
	}
	if c.ClustersFile != "" {
		data, err := os.ReadFile(c.ClustersFile)
		if err != nil {
			return nil, settings.Invalid("clusters-file", "%v", err)
		}
		f, err := parseClustersFile(c.ClustersFile, data)
		if err != nil {
			return nil, err
		}
		for _, cl := range f.Clusters {
			byName[cl.Name] = cl
		}
	}
	out := make([]ClusterConfig, 0, len(byName))
	for _, cl := range byName {
		if cl.HealthCheck == nil {
			hc := c.HealthCheck
			cl.HealthCheck = &hc
		}
		if cl.Outlier == nil {
			od := c.Outlier
			cl.Outlier = &od
		}
		if cl.HealthyPanicThreshold == nil {
			p := c.HealthyPanicThreshold
			cl.HealthyPanicThreshold = &p
		}
		if cl.Retry == nil {
			r := c.Retry
			cl.Retry = &r
		}
		if cl.Breakers == nil {
			b := c.Breakers
			cl.Breakers = &b
		}
		for i := range cl.Hosts {
			if cl.Hosts[i].Weight == 0 {
				cl.Hosts[i].Weight = 1
			}
		}
		out = append(out, cl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, cl := range out {
		if err := cl.validate(c.ClustersFile != ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (cl ClusterConfig) validate(fromFile bool) error {
	setting := "clusters-file"
	if !fromFile {
		setting = cl.Name + "-upstream"
	}
	where := func(format string, args ...any) error {
		return settings.Invalid(setting, "cluster %q: %s", cl.Name, fmt.Sprintf(format, args...))
	}
	if !clusterName.MatchString(cl.Name) {
		return settings.Invalid(setting, "cluster name %q must be letters, digits, _ or -", cl.Name)
	}
	if len(cl.Hosts) == 0 {
		return where("has no hosts")
	}
	seen := map[string]bool{}
	for _, h := range cl.Hosts {
		host, port, err := net.SplitHostPort(h.Address)
		if err != nil || host == "" {
			return where("host %q is not host:port", h.Address)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return where("host %q has a bad port", h.Address)
		}
		if seen[h.Address] {
			return where("host %q is listed twice", h.Address)
		}
		seen[h.Address] = true
		if h.Weight < 1 || h.Weight > 100 {
			return where("host %q: weight must be 1 to 100, got %d", h.Address, h.Weight)
		}
	}
	if err := cl.HealthCheck.validate("health-check-"); err != nil {
		return where("%v", err)
	}
	if err := cl.Outlier.validate("outlier-"); err != nil {
		return where("%v", err)
	}
	if p := *cl.HealthyPanicThreshold; p < 0 || p > 100 {
		return where("healthy_panic_threshold must be 0 to 100, got %d", p)
	}
	if err := cl.Retry.validate("retry-"); err != nil {
		return where("%v", err)
	}
	if err := cl.Breakers.validate("circuit-breaker-"); err != nil {
		return where("%v", err)
	}
	return nil
}
