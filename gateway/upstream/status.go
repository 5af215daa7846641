package upstream

// The status of the running clusters, as the cluster manager reports it (Manager.Status). The admin
// interface reads these types to render /clusters; the cluster manager imports nothing of it, as
// Envoy's cluster manager knows nothing of its admin handlers.

// HostStat is one per-host statistic of /clusters.
type HostStat struct {
	Name  string
	Value int64
	Gauge bool
}

// HostStatus is one upstream host of a cluster.
type HostStatus struct {
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

// ClusterStatus is one upstream cluster.
type ClusterStatus struct {
	Name string
	// OutlierDetection tells whether the cluster runs outlier detection (Envoy then prints its
	// cluster-wide outlier lines).
	OutlierDetection bool
	// MaxRequests, MaxPendingRequests and MaxRetries are the cluster's enforced circuit breakers; 0
	// shows Envoy's default.
	MaxRequests, MaxPendingRequests, MaxRetries int
	Hosts                                       []HostStatus
}
