package linearize

import (
	"fmt"
	"slices"
	"strings"
)

// Revision is one revision of a credential's stored history: its number and the value it holds.
type Revision struct {
	Rev   int
	Value string
}

// Resolution is what Resolve made of a history's indeterminate updates.
type Resolution struct {
	// Applied: found in the credential's history, so settled as the revision found.
	// NotApplied: not in it, so left out of the history.
	Applied, NotApplied int
}

// Resolve checks the stored histories of the credentials of ops, read once every call of ops has
// ended, and settles with them the indeterminate updates of ops. Each credential's history must hold
// revisions 1..N once each, revision 1 InitialValue, every acknowledged update's value at the
// revision it answered, every acknowledged revert's copy at the revision it answered, and no value
// first at a revision that no call of ops wrote; each way it does not is a problem, in words.
//
// An indeterminate update is then settled: found in the history (where its value first appears: a
// revert may copy it later) it took effect as that revision (Output.Revision; it stays
// indeterminate in when: its return stays "at infinity"); not found, it took no effect, and is left
// out. Either way this only takes possibilities away from the check,
// never adds one: a history that hid a write that took effect, or showed one that did not, would
// fail the check (or Resolve) rather than make a violation pass. What it buys is a check that stays
// small however many writes a fault leaves indeterminate: an update pending "at infinity" is tried
// at every step of the search, and a few dozen of them on one credential make it exponential.
// An indeterminate revert is left out when every copy of its target's value in the history is an
// acknowledged revert's (it made none); otherwise it stays as it is (which copy it made cannot be
// told), and so do indeterminate creates. A revert whose target the history does not hold (To past
// its end) stays too: the model refuses it there.
func Resolve(ops []Op, histories map[string][]Revision) (resolved []Op, res Resolution, problems []string) {
	acked := map[[2]string]int{}    // credential, value: the revision an acknowledged update answered
	written := map[[2]string]bool{} // credential, value: some update of ops wrote it
	for _, op := range ops {
		if op.Input.Kind != Update {
			continue
		}
		k := [2]string{op.Input.Key, op.Input.Value}
		written[k] = true
		if op.Output.Result == OK {
			acked[k] = op.Output.Revision
		}
	}
	first := map[[2]string]int{} // credential, value: the first revision holding it
	for id, revs := range histories {
		for i, r := range revs {
			if r.Rev != i+1 {
				problems = append(problems, fmt.Sprintf("credential %s: its history holds revisions %s, not 1..%d once each", id, revNumbers(revs), len(revs)))
				break
			}
			k := [2]string{id, r.Value}
			if _, ok := first[k]; ok {
				continue // a revert's copy
			}
			first[k] = r.Rev
			switch {
			case r.Rev == 1 && r.Value != InitialValue:
				problems = append(problems, fmt.Sprintf("credential %s: revision 1 holds %q, not %q", id, r.Value, InitialValue))
			case r.Rev > 1 && !written[k]:
				problems = append(problems, fmt.Sprintf("credential %s: revision %d holds %q, which no update wrote", id, r.Rev, r.Value))
			}
		}
	}
	for k, rev := range acked {
		if _, ok := histories[k[0]]; !ok {
			continue
		}
		if got, ok := first[k]; !ok || got != rev {
			where := "nowhere"
			if ok {
				where = fmt.Sprintf("first at revision %d", got)
			}
			problems = append(problems, fmt.Sprintf("credential %s: the update of %q was acknowledged as revision %d, and its history holds it %s", k[0], k[1], rev, where))
		}
	}
	// Copies: per credential and value, the revisions that hold it after its first, less those an
	// acknowledged revert answered.
	unclaimed := map[[2]string]int{}
	for id, revs := range histories {
		for _, r := range revs {
			if first[[2]string{id, r.Value}] != r.Rev {
				unclaimed[[2]string{id, r.Value}]++
			}
		}
	}
	for _, op := range ops {
		revs, ok := histories[op.Input.Key]
		if op.Input.Kind != Revert || op.Output.Result != OK || !ok {
			continue
		}
		r := op.Output.Revision
		if r < 1 || r > len(revs) || op.Input.To < 1 || op.Input.To > len(revs) || revs[r-1].Value != revs[op.Input.To-1].Value {
			problems = append(problems, fmt.Sprintf("credential %s: the revert to revision %d was acknowledged as revision %d, which its history does not hold as a copy of it", op.Input.Key, op.Input.To, r))
			continue
		}
		unclaimed[[2]string{op.Input.Key, revs[r-1].Value}]--
	}
	slices.Sort(problems)

	resolved = make([]Op, 0, len(ops))
	for _, op := range ops {
		if op.Input.Kind == Update && op.Output.Result == Indeterminate {
			if _, ok := histories[op.Input.Key]; ok {
				rev, found := first[[2]string{op.Input.Key, op.Input.Value}]
				if !found {
					res.NotApplied++
					continue
				}
				res.Applied++
				// Still indeterminate in when it took effect: it may have been after its answer
				// (a 503 of a proposal that was applied later), so its return stays "at infinity".
				op.Output.Revision = rev
				op.Output.Note += fmt.Sprintf("; settled: revision %d of the credential's history", rev)
			}
		}
		if revs, ok := histories[op.Input.Key]; ok && op.Input.Kind == Revert && op.Output.Result == Indeterminate &&
			op.Input.To >= 1 && op.Input.To <= len(revs) && unclaimed[[2]string{op.Input.Key, revs[op.Input.To-1].Value}] <= 0 {
			// Every copy of the target's value is an acknowledged revert's: this one made none.
			res.NotApplied++
			continue
		}
		resolved = append(resolved, op)
	}
	return resolved, res, problems
}

func revNumbers(revs []Revision) string {
	var b strings.Builder
	for i, r := range revs {
		if i == 8 {
			b.WriteString(",...")
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%d", r.Rev)
	}
	return b.String()
}
