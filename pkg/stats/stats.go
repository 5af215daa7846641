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
	// index is every counter, gauge and gauge function in Snapshot's order, built on the first
	// Snapshot after a statistic was added (nil until then) and never changed once built, so a
	// scrape sorts only when the set of names changed, not on every read.
	index []indexEntry
}

// indexEntry is one statistic of the index: its name, kind and where its value is read.
type indexEntry struct {
	name    string
	kind    Kind
	counter *Counter
	gauge   *Gauge
	fn      func() int64
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
		s.index = nil
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
		s.index = nil
	}
	return g
}

// GaugeFunc registers a gauge whose value is computed when read (uptime, healthy host counts).
func (s *Store) GaugeFunc(name string, f func() int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gaugeFuncs[name] = f
	s.index = nil
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

// Snapshot returns every statistic, sorted by name (a counter before a gauge of the same name).
func (s *Store) Snapshot() []Stat {
	idx := s.sortedIndex()
	out := make([]Stat, len(idx))
	// Gauge functions run outside the lock: they may take locks of their own.
	for i, e := range idx {
		switch {
		case e.counter != nil:
			out[i] = Stat{Name: e.name, Kind: KindCounter, Value: int64(e.counter.Value()), Total: int64(e.counter.Total()), Used: e.counter.used.Load()}
		case e.gauge != nil:
			v := e.gauge.Value()
			out[i] = Stat{Name: e.name, Kind: KindGauge, Value: v, Total: v, Used: e.gauge.used.Load()}
		default:
			v := e.fn()
			out[i] = Stat{Name: e.name, Kind: KindGauge, Value: v, Total: v, Used: true}
		}
	}
	return out
}

// sortedIndex returns the index, building it when a statistic was added since the last call.
func (s *Store) sortedIndex() []indexEntry {
	s.mu.RLock()
	idx := s.index
	s.mu.RUnlock()
	if idx != nil {
		return idx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index != nil {
		return s.index
	}
	idx = make([]indexEntry, 0, len(s.counters)+len(s.gauges)+len(s.gaugeFuncs))
	for name, c := range s.counters {
		idx = append(idx, indexEntry{name: name, kind: KindCounter, counter: c})
	}
	for name, g := range s.gauges {
		idx = append(idx, indexEntry{name: name, kind: KindGauge, gauge: g})
	}
	for name, f := range s.gaugeFuncs {
		idx = append(idx, indexEntry{name: name, kind: KindGauge, fn: f})
	}
	sort.Slice(idx, func(i, j int) bool {
		if idx[i].name != idx[j].name {
			return idx[i].name < idx[j].name
		}
		return idx[i].kind < idx[j].kind
	})
	s.index = idx
	return idx
}
