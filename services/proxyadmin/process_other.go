//go:build !linux

package proxyadmin

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newProcessCollector is client_golang's process collector where gantry has no cheaper reading of
// its own (process_linux.go).
func newProcessCollector() prometheus.Collector {
	return collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})
}
