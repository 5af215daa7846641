package proxyadmin

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

func gatherOne(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func familyValue(f *dto.MetricFamily) float64 {
	m := f.GetMetric()[0]
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestProcessCollectorMatchesClientGolang: gantry's process collector exposes client_golang's process
// series (but the network namespace's byte counters) by the same names, help and types, with the
// same values as far as two readings moments apart can agree.
func TestProcessCollectorMatchesClientGolang(t *testing.T) {
	ours := gatherOne(t, newProcessCollector())
	theirs := gatherOne(t, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for name, want := range theirs {
		if strings.HasPrefix(name, "process_network_") {
			if ours[name] != nil {
				t.Errorf("%s is exposed: it is the network namespace's, not the process's", name)
			}
			continue
		}
		got := ours[name]
		if got == nil {
			t.Errorf("%s is missing", name)
			continue
		}
		if got.GetHelp() != want.GetHelp() || got.GetType() != want.GetType() {
			t.Errorf("%s: help %q type %v, client_golang's %q %v", name, got.GetHelp(), got.GetType(), want.GetHelp(), want.GetType())
		}
		g, w := familyValue(got), familyValue(want)
		var ok bool
		switch name {
		case "process_open_fds":
			ok = math.Abs(g-w) <= 2 // the collectors' own descriptors come and go
		case "process_cpu_seconds_total":
			ok = math.Abs(g-w) <= 0.5 // client_golang counts in clock ticks (10 ms)
		case "process_start_time_seconds":
			ok = math.Abs(g-w) <= 1
		case "process_resident_memory_bytes", "process_virtual_memory_bytes":
			ok = g > 0 && math.Abs(g-w) <= 0.2*w
		default: // the limits
			ok = g == w
		}
		if !ok {
			t.Errorf("%s = %v, client_golang reads %v", name, g, w)
		}
	}
	for name := range ours {
		if theirs[name] == nil {
			t.Errorf("%s is not one of client_golang's process series", name)
		}
	}
}
