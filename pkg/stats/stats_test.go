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

// TestSnapshotSeesWhatWasAddedSinceTheLast: the sorted index is built once and reused, so every
// way of adding a statistic must make the next Snapshot rebuild it.
func TestSnapshotSeesWhatWasAddedSinceTheLast(t *testing.T) {
	s := New()
	s.Counter("b.count").Inc()
	names := func() []string {
		var out []string
		for _, st := range s.Snapshot() {
			out = append(out, st.Name+"="+st.Kind.String())
		}
		return out
	}
	if got := names(); len(got) != 1 || got[0] != "b.count=counter" {
		t.Fatalf("first snapshot %v", got)
	}
	s.Gauge("a.level").Set(3)
	s.Counter("c.count")
	s.GaugeFunc("b.count", func() int64 { return 7 })
	want := []string{"a.level=gauge", "b.count=counter", "b.count=gauge", "c.count=counter"}
	if got := names(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("after adding: %v, want %v", got, want)
	}
	s.GaugeFunc("b.count", func() int64 { return 9 })
	for _, st := range s.Snapshot() {
		if st.Name == "b.count" && st.Kind == KindGauge && st.Value != 9 {
			t.Fatalf("a replaced gauge function reads %d, want 9", st.Value)
		}
	}
}
