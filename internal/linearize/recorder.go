package linearize

import (
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded operation: who called it, when (since the recorder's origin), and what it
// answered.
type Op struct {
	Client       int
	Input        Input
	Output       Output
	Call, Return time.Duration
}

// Recorder keeps the operations of a history; its methods are safe for concurrent use.
type Recorder struct {
	origin time.Time
	mu     sync.Mutex
	ops    []Op
}

// NewRecorder starts a history now: operation times are measured from this instant (on the
// monotonic clock).
func NewRecorder() *Recorder { return &Recorder{origin: time.Now()} }

// Origin is the instant operation times are measured from.
func (r *Recorder) Origin() time.Time { return r.origin }

// Since is t as an offset from the origin.
func (r *Recorder) Since(t time.Time) time.Duration { return t.Sub(r.origin) }

// Add records an operation called at call and answered at ret.
func (r *Recorder) Add(client int, in Input, call time.Time, out Output, ret time.Time) {
	op := Op{Client: client, Input: in, Output: out, Call: r.Since(call), Return: r.Since(ret)}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops is a copy of what was recorded, in the order it was recorded.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// History is ops as porcupine's history. Reads without an answer (Failed) are left out: they took
// no effect. An indeterminate operation's return is placed after every other operation's return,
// "at infinity", since its effect, if any, may land at any time after its call; but an
// indeterminate update whose value some answer shows (a read, or a revert's copy read later) took
// effect before that answer came, so its return is the earliest such answer's. (Values are unique
// per update, so this only narrows where the update may be placed to where it must be, and keeps
// the search small: every operation pending at infinity is tried at every step.)
func History(ops []Op) []porcupine.Operation {
	var last time.Duration
	seen := map[[2]string]time.Duration{} // credential and value: the earliest answer showing it
	for _, op := range ops {
		last = max(last, op.Return, op.Call)
		if op.Output.Result == OK && op.Output.Value != "" {
			k := [2]string{op.Input.Key, op.Output.Value}
			if at, ok := seen[k]; !ok || op.Return < at {
				seen[k] = op.Return
			}
		}
	}
	infinity := int64(last) + int64(time.Second)
	history := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		if op.Output.Result == Failed {
			continue
		}
		ret := int64(op.Return)
		if op.Output.Result == Indeterminate {
			ret = infinity
			if at, ok := seen[[2]string{op.Input.Key, op.Input.Value}]; ok && op.Input.Kind == Update && at >= op.Call {
				ret = int64(at)
			}
		}
		history = append(history, porcupine.Operation{
			ClientId: op.Client, Input: op.Input, Call: int64(op.Call), Output: op.Output, Return: ret,
		})
	}
	return history
}

// Counts are the operations of a history by result.
type Counts struct {
	Ops, OK, Refused, Indeterminate, Failed, Unexpected int
}

// Count tallies ops.
func Count(ops []Op) Counts {
	var c Counts
	for _, op := range ops {
		c.Ops++
		switch op.Output.Result {
		case OK:
			c.OK++
		case Refused:
			c.Refused++
		case Indeterminate:
			c.Indeterminate++
		case Failed:
			c.Failed++
		}
		if op.Output.Unexpected {
			c.Unexpected++
		}
	}
	return c
}

// Throughput is the number of operations with a definite answer (OK or Refused) per bucket of
// width, by answer time, from from (an offset from the origin) to to: the availability the clients
// saw, second by second around a fault.
func Throughput(ops []Op, from, to, width time.Duration) []int {
	n := int((to - from + width - 1) / width)
	if n <= 0 {
		return nil
	}
	buckets := make([]int, n)
	for _, op := range ops {
		if op.Output.Result != OK && op.Output.Result != Refused {
			continue
		}
		if op.Return < from || op.Return >= to {
			continue
		}
		buckets[(op.Return-from)/width]++
	}
	return buckets
}
