package stats

import "testing"

func TestResetKeepsTotals(t *testing.T) {
	s := New()
	c := s.Counter("cluster.chat.upstream_rq_total")
	c.Add(3)
	s.Gauge("cluster.chat.upstream_rq_active").Set(2)
	s.GaugeFunc("server.live", func() int64 { return 1 })
	s.Reset()
	c.Inc()
	got := map[string]Stat{}
	for _, st := range s.Snapshot() {
		got[st.Name] = st
	}
	if st := got["cluster.chat.upstream_rq_total"]; st.Value != 1 || st.Total != 4 || st.Kind != KindCounter {
		t.Errorf("counter after reset = %+v, want value 1 total 4", st)
	}
	if st := got["cluster.chat.upstream_rq_active"]; st.Value != 2 || st.Kind != KindGauge {
		t.Errorf("gauge after reset = %+v, want 2", st)
	}
	if st := got["server.live"]; st.Value != 1 {
		t.Errorf("gauge func = %+v", st)
	}
	snap := s.Snapshot()
	for i := 1; i < len(snap); i++ {
		if snap[i-1].Name >= snap[i].Name {
			t.Errorf("snapshot not sorted: %s before %s", snap[i-1].Name, snap[i].Name)
		}
	}
}
