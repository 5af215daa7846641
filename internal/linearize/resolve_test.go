package linearize

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func revs(values ...string) []Revision {
	out := make([]Revision, len(values))
	for i, v := range values {
		out[i] = Revision{Rev: i + 1, Value: v}
	}
	return out
}

// TestResolveSettlesIndeterminateUpdates: an indeterminate update found in the stored history is
// settled as the revision that first holds its value (a revert's later copy aside), one not found is
// left out; the settled history checks, and a settled update placed where it cannot be fails.
func TestResolveSettlesIndeterminateUpdates(t *testing.T) {
	ops := []Op{
		op(0, 0, 5, update("c", "a", 0), unknown), // took effect, never read
		op(1, 6, 7, update("c", "b", 0), saw(3, "b")),
		op(2, 0, 5, update("c", "x", 0), unknown), // took no effect
		op(1, 8, 9, revert("c", 2, 0), wrote(4)),  // a copy of "a" at 4
		op(3, 10, 11, read("c"), saw(4, "a")),
		op(4, 0, 1, update("d", "y", 0), unknown), // no stored history given for d: left as it is
		op(5, 0, 9, revert("c", 2, 0), unknown),   // the only copy of "a" is the acknowledged revert's
		op(5, 10, 11, revert("c", 1, 0), unknown), // no copy of "initial": made none either
	}
	got, res, problems := Resolve(ops, map[string][]Revision{"c": revs(InitialValue, "a", "b", "a")})
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	if res != (Resolution{Applied: 1, NotApplied: 3}) {
		t.Errorf("resolution %+v, want 1 applied, 3 not", res)
	}
	if len(got) != len(ops)-3 {
		t.Fatalf("%d operations after resolving, want %d (the update of x and both reverts left out)", len(got), len(ops)-3)
	}
	if o := got[0].Output; o.Result != Indeterminate || o.Revision != 2 {
		t.Errorf("the update of a: %+v, want indeterminate settled as revision 2", o)
	}
	if o := got[len(got)-1].Output; o.Revision != 0 {
		t.Errorf("the update of d (no stored history): %+v, want unsettled", o)
	}
	if r, _ := Check(got, time.Minute); r != porcupine.Ok {
		t.Errorf("check of the settled history: %s, want Ok", r)
	}

	// The same updates, the stored history saying "a" came after "b": the acknowledged answers
	// contradict it.
	_, _, problems = Resolve(ops, map[string][]Revision{"c": revs(InitialValue, "b", "a", "a")})
	if len(problems) == 0 {
		t.Error("an acknowledged update stored at another revision than it answered is no problem")
	}
	// A stored history that drops "a" (settled as not applied) leaves a revision 2 nobody wrote
	// for "b" to follow: the check fails.
	dropped, _, _ := Resolve(ops[:3], map[string][]Revision{"c": revs(InitialValue, "b")})
	if r, _ := Check(dropped, time.Minute); r != porcupine.Illegal {
		t.Errorf("check with the taken-effect update left out: %s, want Illegal", r)
	}
}

func TestResolveFindsStoredHistoryProblems(t *testing.T) {
	ops := []Op{
		op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
		op(0, 2, 3, update("c", "b", 0), saw(3, "b")),
		op(0, 4, 5, revert("c", 1, 0), wrote(4)),
	}
	for _, tc := range []struct {
		name    string
		history []Revision
		want    string
	}{
		{"a lost acknowledged update", revs(InitialValue, "a", "c"), `the update of "b" was acknowledged as revision 3, and its history holds it nowhere`},
		{"a revision twice", []Revision{{1, InitialValue}, {2, "a"}, {2, "a"}, {3, "b"}, {4, InitialValue}}, "not 1..5 once each"},
		{"a gap", []Revision{{1, InitialValue}, {2, "a"}, {4, "b"}}, "not 1..3 once each"},
		{"a value no update wrote", revs(InitialValue, "a", "b", InitialValue, "z"), `revision 5 holds "z", which no update wrote`},
		{"another first revision", revs("other", "a", "b"), `revision 1 holds "other"`},
		{"an acknowledged revert's revision no copy", revs(InitialValue, "a", "b", "b"), "the revert to revision 1 was acknowledged as revision 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, problems := Resolve(ops, map[string][]Revision{"c": tc.history})
			if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
				t.Errorf("problems %q, want one with %q", problems, tc.want)
			}
		})
	}
	if _, _, problems := Resolve(ops, map[string][]Revision{"c": revs(InitialValue, "a", "b", InitialValue)}); len(problems) != 0 {
		t.Errorf("problems of a right stored history: %v", problems)
	}
}
