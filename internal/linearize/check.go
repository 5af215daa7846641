package linearize

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Check checks ops for linearizability under Model, giving up after timeout (then the result is
// porcupine.Unknown, which is not a pass). The info is for Visualize.
func Check(ops []Op, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model(), History(ops), timeout)
}

// Span is a stretch of a history's time to mark in its visualization (a fault), as offsets from
// the recorder's origin.
type Span struct {
	From, To    time.Duration
	Description string
}

// Visualize writes porcupine's HTML visualization of a checked history to path: every partition,
// its operations and the longest linearizations found (for an illegal history, where each stops),
// with spans marked on a line of their own.
func Visualize(path string, info porcupine.LinearizationInfo, spans ...Span) error {
	var annotations []porcupine.Annotation
	for _, s := range spans {
		annotations = append(annotations, porcupine.Annotation{
			Tag: "fault", Start: int64(s.From), End: int64(s.To), Description: s.Description,
			BackgroundColor: "#f6c0c0",
		})
	}
	info.AddAnnotations(annotations)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(Model(), info, f); err != nil {
		f.Close()
		return fmt.Errorf("visualize %s: %w", path, err)
	}
	return f.Close()
}

// PlantStaleRead is ops with one read made stale: a read near the middle of the history that
// answered a revision an update made, changed to answer the revision before with the same value,
// which no linearization allows (the value was first written at the later revision). Checking the
// result must find it Illegal: a check of the check, on a real history, so a recorder or a model
// that accepted everything would not pass unnoticed. ok is false when ops has no such read.
func PlantStaleRead(ops []Op) (planted []Op, at int, ok bool) {
	written := map[[2]string]int{} // credential and value: the revision an OK update answered
	for _, op := range ops {
		if op.Input.Kind == Update && op.Output.Result == OK {
			written[[2]string{op.Input.Key, op.Input.Value}] = op.Output.Revision
		}
	}
	best := -1
	for i, op := range ops {
		if op.Input.Kind != Read || op.Output.Result != OK || op.Output.Revision < 2 {
			continue
		}
		if written[[2]string{op.Input.Key, op.Output.Value}] != op.Output.Revision {
			continue
		}
		if best < 0 || abs(i-len(ops)/2) < abs(best-len(ops)/2) {
			best = i
		}
	}
	if best < 0 {
		return nil, 0, false
	}
	planted = slices.Clone(ops)
	planted[best].Output.Revision--
	return planted, best, true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// Explain says, for each partition of a history that failed its check, how far the longest
// linearization found got and which operation it could not place: the first, by answer time, left
// out of it. The visualization shows the same, and everything around it.
func Explain(ops []Op, info porcupine.LinearizationInfo) []string {
	type key struct {
		client    int
		call, ret int64
	}
	model := Model()
	parts := partition(History(ops))
	var lines []string
	for p, partials := range info.PartialLinearizationsOperations() {
		if p >= len(parts) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range partials {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(parts[p]) {
			continue
		}
		placed := map[key]bool{}
		s := model.Init()
		for _, op := range longest {
			placed[key{op.ClientId, op.Call, op.Return}] = true
			_, s = model.Step(s, op.Input, op.Output)
		}
		var first *porcupine.Operation
		for i, op := range parts[p] {
			if !placed[key{op.ClientId, op.Call, op.Return}] && (first == nil || op.Return < first.Return) {
				first = &parts[p][i]
			}
		}
		in := parts[p][0].Input.(Input)
		what := "credential " + in.Key
		if in.Kind == Create {
			what = "name " + in.Key
		}
		end := describeState(s.(state))
		if in.Kind == Create {
			end = "free"
			if owner := s.(state).owner; owner != "" {
				end = "owned by " + owner
			}
		}
		line := fmt.Sprintf("%s: at most %d of its %d operations linearized, ending in state %q", what, len(longest), len(parts[p]), end)
		if first != nil {
			line += fmt.Sprintf("; the first operation left out (by answer time): client %d, %s, called at %v, answered at %v",
				first.ClientId, Describe(first.Input.(Input), first.Output.(Output)), time.Duration(first.Call), time.Duration(first.Return))
		}
		lines = append(lines, line)
	}
	return lines
}
