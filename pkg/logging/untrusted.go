package logging

import (
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"
)

// UntrustedLimit is the most characters of an attacker-controlled value a log line keeps. Ids,
// names and paths that matter for an investigation fit; a 500 KB field cannot flood the log.
const UntrustedLimit = 64

// untrustedMarker ends a value that was cut, so a reader knows the log does not show all of it.
const untrustedMarker = "…[cut]"

// Untrusted is a zap field for a value that came from a request (an app id, a team id, a path, a
// user agent, a name in a denial): non-printable characters, invalid UTF-8 and backslashes are
// escaped (so a value can neither forge a line nor move a terminal's cursor, and an escape in the
// log is never ambiguous), and the escaped text is cut at UntrustedLimit characters with a marker.
func Untrusted(key, value string) zap.Field {
	return zap.String(key, Truncate(value))
}

// Truncate is Untrusted's escaping and cut, for values that go into an error message or a field of
// another type.
func Truncate(value string) string {
	// Fast path: short printable values (most of them) are logged as they are.
	if len(value) <= UntrustedLimit && printable(value) {
		return value
	}
	out := make([]byte, 0, UntrustedLimit+len(untrustedMarker))
	chars := 0
	for i := 0; i < len(value); {
		r, size := utf8.DecodeRuneInString(value[i:])
		var esc string
		switch {
		case r == utf8.RuneError && size == 1:
			esc = `\x` + strconv.FormatUint(uint64(value[i])>>4, 16) + strconv.FormatUint(uint64(value[i])&0xf, 16)
		case r == '\\':
			esc = `\\`
		case !unicode.IsPrint(r):
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x00', '\u202e'
			esc = q[1 : len(q)-1]
		default:
			esc = value[i : i+size]
		}
		n := utf8.RuneCountInString(esc)
		if chars+n > UntrustedLimit {
			return string(out) + untrustedMarker
		}
		out = append(out, esc...)
		chars += n
		i += size
	}
	return string(out)
}

func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r == '\\' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Sampler logs the first few lines of each kind of repeated event (a refused request, a failed
// login) per interval and counts the rest, so that a flood of refusals costs a bounded amount of log
// whatever its rate; the count of what was left out is written as one summary line per kind when the
// interval ends. Kinds are a fixed set chosen by the caller, never a value from a request.
type Sampler struct {
	logger   *zap.Logger
	first    int
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	kinds map[string]*sampleWindow
}

type sampleWindow struct {
	start      time.Time
	logged     int
	suppressed int
	timer      bool // a summary is scheduled
}

// Sampling defaults: up to 10 lines of one kind every 10 seconds.
const (
	DefaultSampleFirst    = 10
	DefaultSampleInterval = 10 * time.Second
)

// NewSampler returns a sampler writing to logger at most first lines of one kind per interval
// (values below 1 take the defaults).
func NewSampler(logger *zap.Logger, first int, interval time.Duration) *Sampler {
	if logger == nil {
		logger = zap.NewNop()
	}
	if first < 1 {
		first = DefaultSampleFirst
	}
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	return &Sampler{logger: logger, first: first, interval: interval, now: time.Now, kinds: map[string]*sampleWindow{}}
}

// Info writes msg at info level unless first lines of kind were already written in this interval.
func (s *Sampler) Info(kind, msg string, fields ...zap.Field) {
	if s.allow(kind) {
		s.logger.Info(msg, append(fields, zap.String("refusal", kind))...)
	}
}

// Warn is Info at warn level.
func (s *Sampler) Warn(kind, msg string, fields ...zap.Field) {
	if s.allow(kind) {
		s.logger.Warn(msg, append(fields, zap.String("refusal", kind))...)
	}
}

// Allow counts one event of kind and reports whether its line should be written, for callers that
// build their own line (zap's Check).
func (s *Sampler) Allow(kind string) bool { return s.allow(kind) }

func (s *Sampler) allow(kind string) bool {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.kinds[kind]
	if w == nil {
		w = &sampleWindow{start: now}
		s.kinds[kind] = w
	}
	if now.Sub(w.start) >= s.interval {
		s.summarise(kind, w, now)
		w.start, w.logged = now, 0
	}
	if w.logged < s.first {
		w.logged++
		return true
	}
	w.suppressed++
	if !w.timer {
		// Write the count when the interval ends even if no further event comes to trigger it.
		w.timer = true
		time.AfterFunc(s.interval-now.Sub(w.start), func() { s.Flush() })
	}
	return false
}

// Flush writes the summary line of every kind whose interval has ended with lines left out.
func (s *Sampler) Flush() {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for kind, w := range s.kinds {
		if now.Sub(w.start) >= s.interval {
			s.summarise(kind, w, now)
			w.start, w.logged = now, 0
		}
	}
}

// summarise writes how many lines of kind were left out, if any. Called with s.mu held.
func (s *Sampler) summarise(kind string, w *sampleWindow, now time.Time) {
	w.timer = false
	if w.suppressed == 0 {
		return
	}
	s.logger.Info("repeated log lines left out", zap.String("refusal", kind), zap.Int("count", w.suppressed),
		zap.Duration("over", now.Sub(w.start)))
	w.suppressed = 0
}
