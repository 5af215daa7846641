package confidant

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// redrawEvery is how often the progress line of a terminal is rewritten.
const redrawEvery = 200 * time.Millisecond

// meter reports one phase of the import on Options.Progress: what is done of the total, the rate
// since the phase began and the time left at that rate. On a terminal (Options.ProgressRedraw) one
// line is rewritten in place; otherwise a plain line is written every Options.ProgressInterval, for a
// log, and each phase ends with a line of its total and time either way.
type meter struct {
	w      io.Writer
	redraw bool
	phase  string
	unit   string
	total  int64 // 0: not known (the scan, which is the count pass)
	done   atomic.Int64
	start  time.Time

	stop, finished chan struct{}
	once           sync.Once
	width          int // of the last line drawn in place, to blank what a shorter one leaves
}

// meter starts reporting a phase (nothing without Options.Progress); end it with meter.end.
func (r *run) meter(phase, unit string, total int64) *meter {
	m := &meter{w: r.opts.Progress, redraw: r.opts.ProgressRedraw, phase: phase, unit: unit, total: total, start: time.Now(),
		stop: make(chan struct{}), finished: make(chan struct{})}
	if m.w == nil {
		close(m.finished)
		return m
	}
	every := r.opts.ProgressInterval
	if m.redraw || every <= 0 {
		every = redrawEvery
	}
	go func() {
		defer close(m.finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.write(false)
			case <-m.stop:
				m.write(true)
				return
			}
		}
	}()
	return m
}

// add counts n more done.
func (m *meter) add(n int) { m.done.Add(int64(n)) }

// end writes the phase's last line (its total and time) and stops the meter.
func (m *meter) end() {
	m.once.Do(func() {
		if m.w != nil {
			close(m.stop)
		}
	})
	<-m.finished
}

func (m *meter) write(final bool) {
	line := progressLine(m.phase, m.unit, m.done.Load(), m.total, time.Since(m.start), final)
	if !m.redraw {
		fmt.Fprintln(m.w, line)
		return
	}
	pad := max(m.width-len(line), 0)
	m.width = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(m.w, "\r%s%s%s", line, strings.Repeat(" ", pad), end)
}

// progressLine is one progress report: while running, "import: importing: 1200/50000 revisions (2%),
// 410 revisions/s, ETA 2m0s"; at the end, "import: importing: 50000/50000 revisions in 2m2s, 409
// revisions/s". Without a total (the scan) only the count and rate are known.
func progressLine(phase, unit string, done, total int64, elapsed time.Duration, final bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "import: %s: %d", phase, done)
	if total > 0 {
		fmt.Fprintf(&b, "/%d", total)
	}
	b.WriteString(" " + unit)
	rate := 0.0
	if secs := elapsed.Seconds(); secs > 0 {
		rate = float64(done) / secs
	}
	if final {
		fmt.Fprintf(&b, " in %s, %.0f %s/s", elapsed.Round(100*time.Millisecond), rate, unit)
		return b.String()
	}
	if total > 0 {
		fmt.Fprintf(&b, " (%d%%)", done*100/total)
	}
	fmt.Fprintf(&b, ", %.0f %s/s", rate, unit)
	if total > 0 {
		if done > 0 && rate > 0 {
			left := time.Duration(float64(max(total-done, 0)) / rate * float64(time.Second))
			fmt.Fprintf(&b, ", ETA %s", left.Round(time.Second))
		} else {
			b.WriteString(", ETA unknown")
		}
	}
	return b.String()
}
