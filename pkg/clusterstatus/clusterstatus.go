// Package clusterstatus holds the status of the gateway's upstream clusters as the cluster manager
// reports it (gateway/upstream's Manager.Status) and the admin interface renders it (/clusters in
// services/proxyadmin). It is a leaf both import, as Envoy's cluster manager fills the admin API's
// types and knows nothing of the admin handlers, which in turn know nothing of the cluster manager.
package clusterstatus

// HostStat is one per-host statistic of /clusters.
type HostStat struct {
	Name  string
	Value int64
	Gauge bool
}

// Host is one upstream host of a cluster.
type Host struct {
	// Address is the host's ip:port.
	Address string
	// Stats are the host's counters and gauges, sorted by name.
	Stats              []HostStat
	FailedActiveHC     bool
	FailedOutlierCheck bool
	Weight             int
	Zone               string
	Canary             bool
}

// Cluster is one upstream cluster.
type Cluster struct {
	Name string
	// OutlierDetection tells whether the cluster runs outlier detection (Envoy then prints its
	// cluster-wide outlier lines).
	OutlierDetection bool
	// MaxRequests, MaxPendingRequests and MaxRetries are the cluster's enforced circuit breakers; 0
	// shows Envoy's default.
	MaxRequests, MaxPendingRequests, MaxRetries int
	Hosts                                       []Host
}
