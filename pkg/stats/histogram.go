package stats

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// HistogramBounds are the bucket upper bounds, in milliseconds, of every histogram: Envoy's default
// buckets, so dashboards built for Envoy read gantry's latencies the same way.
var HistogramBounds = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// Quantiles are the percentiles /stats prints for a histogram, as Envoy does.
var Quantiles = []float64{0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}

// Histogram counts durations into HistogramBounds buckets. Recording is lock-free: one atomic add per
// bucket, count and sum.
type Histogram struct {
	buckets [20]atomic.Uint64 // len(HistogramBounds)+1: the last one is +Inf
	count   atomic.Uint64
	sumNs   atomic.Uint64
	minNs   atomic.Uint64 // 0 until the first sample; stored +1 so 0 means none
	maxNs   atomic.Uint64
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	ms := float64(d) / float64(time.Millisecond)
	i := sort.SearchFloat64s(HistogramBounds, ms)
	h.buckets[i].Add(1)
	h.count.Add(1)
	ns := uint64(d)
	h.sumNs.Add(ns)
	for {
		cur := h.minNs.Load()
		if cur != 0 && cur-1 <= ns || h.minNs.CompareAndSwap(cur, ns+1) {
			break
		}
	}
	for {
		cur := h.maxNs.Load()
		if cur >= ns || h.maxNs.CompareAndSwap(cur, ns) {
			break
		}
	}
}

// HistogramSnapshot is a histogram at the time of a Snapshot.
type HistogramSnapshot struct {
	Name  string
	Count uint64
	// SumMs is the sum of the samples in milliseconds.
	SumMs float64
	// Cumulative[i] counts samples at most HistogramBounds[i] ms.
	Cumulative []uint64
	minMs      float64
	maxMs      float64
}

func (h *Histogram) snapshot(name string) HistogramSnapshot {
	s := HistogramSnapshot{Name: name, Count: h.count.Load(), SumMs: float64(h.sumNs.Load()) / 1e6,
		Cumulative: make([]uint64, len(HistogramBounds))}
	var run uint64
	for i := range HistogramBounds {
		run += h.buckets[i].Load()
		s.Cumulative[i] = run
	}
	if m := h.minNs.Load(); m > 0 {
		s.minMs = float64(m-1) / 1e6
	}
	s.maxMs = float64(h.maxNs.Load()) / 1e6
	return s
}

// Quantile estimates the q-th percentile (0-100) in milliseconds by linear interpolation within its
// bucket, bounded by the smallest and largest sample; NaN without samples.
func (s HistogramSnapshot) Quantile(q float64) float64 {
	if s.Count == 0 {
		return math.NaN()
	}
	if q <= 0 {
		return s.minMs
	}
	if q >= 100 {
		return s.maxMs
	}
	rank := q / 100 * float64(s.Count)
	lower, prev := 0.0, uint64(0)
	for i, upper := range HistogramBounds {
		c := s.Cumulative[i]
		if float64(c) >= rank && c > prev {
			v := lower + (upper-lower)*(rank-float64(prev))/float64(c-prev)
			return math.Min(math.Max(v, s.minMs), s.maxMs)
		}
		lower, prev = upper, c
	}
	return s.maxMs
}

// Histogram returns the histogram called name, creating it empty.
func (s *Store) Histogram(name string) *Histogram {
	s.mu.RLock()
	h, ok := s.histograms[name]
	s.mu.RUnlock()
	if ok {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok = s.histograms[name]; !ok {
		h = &Histogram{}
		s.histograms[name] = h
	}
	return h
}

// Histograms returns every histogram, sorted by name.
func (s *Store) Histograms() []HistogramSnapshot {
	s.mu.RLock()
	out := make([]HistogramSnapshot, 0, len(s.histograms))
	for name, h := range s.histograms {
		out = append(out, h.snapshot(name))
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
