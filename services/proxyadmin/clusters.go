package proxyadmin

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/clusterstatus"
)

// Envoy's default circuit-breaker thresholds, which /clusters prints per priority. Gantry enforces
// none of them; they are printed so tools that parse Envoy's output find the lines they expect.
const (
	defaultMaxConnections = 1024
	defaultMaxPending     = 1024
	defaultMaxRequests    = 1024
	defaultMaxRetries     = 3
)

// healthFlags renders a host's health as Envoy does: "healthy", or the concatenated failure flags.
func healthFlags(h clusterstatus.Host) string {
	var flags string
	if h.FailedActiveHC {
		flags += "/failed_active_hc"
	}
	if h.FailedOutlierCheck {
		flags += "/failed_outlier_check"
	}
	if flags == "" {
		return "healthy"
	}
	return flags
}

// Clusters serves /clusters: `cluster::host::stat::value` lines as Envoy prints them, or
// format=json for the modern JSON shape.
func (s *Service) Clusters(rawQuery string) Page {
	q, _ := url.ParseQuery(rawQuery)
	clusters := s.proxy.Clusters()
	if q.Get("format") == "json" {
		return clustersJSON(clusters)
	}
	var b strings.Builder
	for _, c := range clusters {
		if c.OutlierDetection {
			fmt.Fprintf(&b, "%s::outlier::success_rate_average::-1\n", c.Name)
			fmt.Fprintf(&b, "%s::outlier::success_rate_ejection_threshold::-1\n", c.Name)
		}
		maxRequests, maxPending, maxRetries := breakers(c)
		for _, prio := range []string{"default_priority", "high_priority"} {
			fmt.Fprintf(&b, "%s::%s::max_connections::%d\n", c.Name, prio, defaultMaxConnections)
			fmt.Fprintf(&b, "%s::%s::max_pending_requests::%d\n", c.Name, prio, maxPending)
			fmt.Fprintf(&b, "%s::%s::max_requests::%d\n", c.Name, prio, maxRequests)
			fmt.Fprintf(&b, "%s::%s::max_retries::%d\n", c.Name, prio, maxRetries)
		}
		fmt.Fprintf(&b, "%s::added_via_api::false\n", c.Name)
		for _, h := range c.Hosts {
			p := c.Name + "::" + h.Address + "::"
			for _, st := range h.Stats {
				fmt.Fprintf(&b, "%s%s::%d\n", p, st.Name, st.Value)
			}
			fmt.Fprintf(&b, "%shostname::\n", p)
			fmt.Fprintf(&b, "%shealth_flags::%s\n", p, healthFlags(h))
			fmt.Fprintf(&b, "%sweight::%d\n", p, h.Weight)
			fmt.Fprintf(&b, "%sregion::\n", p)
			fmt.Fprintf(&b, "%szone::%s\n", p, h.Zone)
			fmt.Fprintf(&b, "%ssub_zone::\n", p)
			fmt.Fprintf(&b, "%scanary::%t\n", p, h.Canary)
			fmt.Fprintf(&b, "%spriority::0\n", p)
			fmt.Fprintf(&b, "%ssuccess_rate::-1\n", p)
			fmt.Fprintf(&b, "%slocal_origin_success_rate::-1\n", p)
		}
	}
	return textPage(http.StatusOK, b.String())
}

// The JSON shape of Envoy's admin.v3.Clusters, printed as proto3 JSON does: default values (zero,
// false, empty, the first enum value COUNTER) are left out, and 64-bit values are strings.
type (
	jsonClusters struct {
		ClusterStatuses []jsonCluster `json:"cluster_statuses"`
	}
	jsonCluster struct {
		Name            string       `json:"name"`
		CircuitBreakers jsonBreakers `json:"circuit_breakers"`
		HostStatuses    []jsonHost   `json:"host_statuses,omitempty"`
	}
	jsonBreakers struct {
		Thresholds []jsonThreshold `json:"thresholds"`
	}
	jsonThreshold struct {
		Priority           string `json:"priority,omitempty"`
		MaxConnections     int    `json:"max_connections"`
		MaxPendingRequests int    `json:"max_pending_requests"`
		MaxRequests        int    `json:"max_requests"`
		MaxRetries         int    `json:"max_retries"`
	}
	jsonHost struct {
		Address      jsonAddress      `json:"address"`
		Stats        []jsonStat       `json:"stats"`
		HealthStatus jsonHealthStatus `json:"health_status"`
		Weight       int              `json:"weight,omitempty"`
		Locality     *jsonLocality    `json:"locality,omitempty"`
		Canary       bool             `json:"canary,omitempty"`
	}
	jsonAddress struct {
		SocketAddress jsonSocketAddress `json:"socket_address"`
	}
	jsonSocketAddress struct {
		Address   string `json:"address"`
		PortValue int    `json:"port_value,omitempty"`
	}
	jsonStat struct {
		Name  string `json:"name"`
		Value string `json:"value,omitempty"`
		Type  string `json:"type,omitempty"`
	}
	jsonHealthStatus struct {
		FailedActiveHealthCheck bool   `json:"failed_active_health_check,omitempty"`
		FailedOutlierCheck      bool   `json:"failed_outlier_check,omitempty"`
		EDSHealthStatus         string `json:"eds_health_status"`
	}
	jsonLocality struct {
		Zone string `json:"zone,omitempty"`
	}
)

func clustersJSON(clusters []clusterstatus.Cluster) Page {
	out := jsonClusters{ClusterStatuses: []jsonCluster{}}
	for _, c := range clusters {
		maxRequests, maxPending, maxRetries := breakers(c)
		jc := jsonCluster{Name: c.Name, CircuitBreakers: jsonBreakers{Thresholds: []jsonThreshold{
			{MaxConnections: defaultMaxConnections, MaxPendingRequests: maxPending, MaxRequests: maxRequests, MaxRetries: maxRetries},
			{Priority: "HIGH", MaxConnections: defaultMaxConnections, MaxPendingRequests: maxPending, MaxRequests: maxRequests, MaxRetries: maxRetries},
		}}}
		for _, h := range c.Hosts {
			ip, portStr, _ := net.SplitHostPort(h.Address)
			port, _ := strconv.Atoi(portStr)
			jh := jsonHost{
				Address:      jsonAddress{SocketAddress: jsonSocketAddress{Address: ip, PortValue: port}},
				Stats:        []jsonStat{},
				HealthStatus: jsonHealthStatus{FailedActiveHealthCheck: h.FailedActiveHC, FailedOutlierCheck: h.FailedOutlierCheck, EDSHealthStatus: "HEALTHY"},
				Weight:       h.Weight,
				Canary:       h.Canary,
			}
			if h.Zone != "" {
				jh.Locality = &jsonLocality{Zone: h.Zone}
			}
			for _, st := range h.Stats {
				js := jsonStat{Name: st.Name}
				if st.Value != 0 {
					js.Value = strconv.FormatInt(st.Value, 10)
				}
				if st.Gauge {
					js.Type = "GAUGE"
				}
				jh.Stats = append(jh.Stats, js)
			}
			jc.HostStatuses = append(jc.HostStatuses, jh)
		}
		out.ClusterStatuses = append(out.ClusterStatuses, jc)
	}
	return jsonPage(out)
}

// breakers are the circuit-breaker thresholds /clusters shows: the enforced ones, or Envoy's defaults
// where the proxy reports none.
func breakers(c clusterstatus.Cluster) (maxRequests, maxPending, maxRetries int) {
	maxRequests, maxPending, maxRetries = c.MaxRequests, c.MaxPendingRequests, c.MaxRetries
	if maxRequests == 0 {
		maxRequests = defaultMaxRequests
	}
	if maxPending == 0 {
		maxPending = defaultMaxPending
	}
	if maxRetries == 0 {
		maxRetries = defaultMaxRetries
	}
	return maxRequests, maxPending, maxRetries
}
