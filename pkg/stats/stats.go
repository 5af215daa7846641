// Package stats is a small registry of counters and gauges named the Envoy way, with dotted names
// such as cluster.chat.upstream_rq_total. Counters only ever grow; Reset moves a per-counter offset
// so the local view (an admin page) restarts at zero while exporters that want monotonic counters
// (Prometheus) keep reading the raw total.
package stats

import (
	"sort"
	"sync"
	"sync/atomic"
)

// Kind tells counters from gauges.
type Kind int

// Kinds of statistic.
const (
	KindCounter Kind = iota
	KindGauge
)

func (k Kind) String() string {
	if k == KindGauge {
		return "gauge"
	}
	return "counter"
}

// Counter is a monotonically increasing count.
type Counter struct {
	v    atomic.Uint64
	base atomic.Uint64 // value at the last Reset
	used atomic.Bool
}

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) {
	c.used.Store(true)
	c.v.Add(n)
}

// Value is the count since the last reset.
func (c *Counter) Value() uint64 { return c.v.Load() - c.base.Load() }

// Total is the count since the counter was created, ignoring resets.
func (c *Counter) Total() uint64 { return c.v.Load() }

func (c *Counter) reset() { c.base.Store(c.v.Load()) }

// Gauge is a value that goes up and down.
type Gauge struct {
	v    atomic.Int64
	used atomic.Bool
}

// Set sets the value.
func (g *Gauge) Set(v int64) {
	g.used.Store(true)
	g.v.Store(v)
}

// Add adds d (which may be negative).
func (g *Gauge) Add(d int64) {
	g.used.Store(true)
	g.v.Add(d)
}

// Value returns the current value.
func (g *Gauge) Value() int64 { return g.v.Load() }

// Store holds every statistic of a process. The zero value is not usable; call New.
type Store struct {
	mu         sync.RWMutex
	counters   map[string]*Counter
	gauges     map[string]*Gauge
	gaugeFuncs map[string]func() int64
	histograms map[string]*Histogram
}

// New returns an empty store.
func New() *Store {
	return &Store{counters: map[string]*Counter{}, gauges: map[string]*Gauge{}, gaugeFuncs: map[string]func() int64{},
		histograms: map[string]*Histogram{}}
}

// Counter returns the counter called name, creating it at zero.
func (s *Store) Counter(name string) *Counter {
	s.mu.RLock()
	c, ok := s.counters[name]
	s.mu.RUnlock()
	if ok {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok = s.counters[name]; !ok {
		c = &Counter{}
		s.counters[name] = c
	}
	return c
}

// Gauge returns the gauge called name, creating it at zero.
func (s *Store) Gauge(name string) *Gauge {
	s.mu.RLock()
	g, ok := s.gauges[name]
	s.mu.RUnlock()
	if ok {
		return g
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok = s.gauges[name]; !ok {
		g = &Gauge{}
		s.gauges[name] = g
	}
	return g
}

// GaugeFunc registers a gauge whose value is computed when read (uptime, healthy host counts).
func (s *Store) GaugeFunc(name string, f func() int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaugeFuncs[name] = f
}

// Reset zeroes what Snapshot reports for every counter. Gauges are untouched, as in Envoy.
func (s *Store) Reset() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, c := range s.counters {
		c.reset()
	}
}

// Stat is one statistic at the time of a Snapshot.
type Stat struct {
	Name string
	Kind Kind
	// Value is what the admin pages show: a counter's count since the last Reset, a gauge's value.
	Value int64
	// Total is a counter's count ignoring resets (equal to Value for gauges).
	Total int64
	// Used is false for a statistic never written (Envoy's usedonly filter).
	Used bool
}

// Snapshot returns every statistic, sorted by name.
func (s *Store) Snapshot() []Stat {
	s.mu.RLock()
	out := make([]Stat, 0, len(s.counters)+len(s.gauges)+len(s.gaugeFuncs))
	for name, c := range s.counters {
		out = append(out, Stat{Name: name, Kind: KindCounter, Value: int64(c.Value()), Total: int64(c.Total()), Used: c.used.Load()})
	}
	for name, g := range s.gauges {
		v := g.Value()
		out = append(out, Stat{Name: name, Kind: KindGauge, Value: v, Total: v, Used: g.used.Load()})
	}
	funcs := make(map[string]func() int64, len(s.gaugeFuncs))
	for name, f := range s.gaugeFuncs {
		funcs[name] = f
	}
	s.mu.RUnlock()
	// Gauge functions run outside the lock: they may take locks of their own.
	for name, f := range funcs {
		v := f()
		out = append(out, Stat{Name: name, Kind: KindGauge, Value: v, Total: v, Used: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
