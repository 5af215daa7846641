package stats

import (
	"math"
	"sync"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	s := New()
	h := s.Histogram("x.rq_time")
	if s.Histogram("x.rq_time") != h {
		t.Fatal("a second Histogram call made a new histogram")
	}
	if q := s.Histograms()[0].Quantile(50); !math.IsNaN(q) {
		t.Errorf("empty histogram P50 = %v, want NaN", q)
	}
	// 100 samples of 2 ms and 100 of 200 ms.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				h.Record(2 * time.Millisecond)
				h.Record(200 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	snap := s.Histograms()[0]
	if snap.Count != 200 || math.Abs(snap.SumMs-20200) > 0.001 {
		t.Fatalf("count %d sum %v", snap.Count, snap.SumMs)
	}
	if snap.Cumulative[1] != 0 || snap.Cumulative[2] != 100 || snap.Cumulative[7] != 200 {
		t.Errorf("cumulative buckets %v", snap.Cumulative)
	}
	for _, tc := range []struct{ q, lo, hi float64 }{{0, 2, 2}, {25, 1, 5}, {50, 1, 5}, {75, 100, 250}, {100, 200, 200}} {
		if v := snap.Quantile(tc.q); v < tc.lo || v > tc.hi {
			t.Errorf("P%v = %v, want within [%v, %v]", tc.q, v, tc.lo, tc.hi)
		}
	}
}
