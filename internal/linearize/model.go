// Package linearize checks gantry's credential REST API for linearizability, the way etcd's own
// robustness tests check etcd: clients call the API concurrently over a few hot credentials (reads,
// updates with and without If-Match, reverts, racing creates of one name), a Recorder keeps every
// operation's call time, answer time and result, and Check asks porcupine
// (github.com/anishathalye/porcupine) whether some order of the operations, each taking effect at
// one instant between its call and its answer, explains every answer under Model, the sequential
// specification of a credential.
//
// An answer that does not say whether a write took effect (503, 504, another 5xx, a timeout, a
// connection cut) is indeterminate: the operation gets no answer time (its return is placed after
// every other operation's, "at infinity") and an output the model accepts with or without its
// effect. A write that took effect is linearized where it did; one that did not is linearized after
// everything, where no answer observes it. So an indeterminate write is never held against the
// system as a failure that did not happen, and never assumed either way. A read without an answer
// has no effect and is left out. Once the history has ended, Resolve reads each credential's stored
// history (every update writes its value into the revision's metadata too) and settles each
// indeterminate update there: taken effect as the revision that holds it, or not at all. That only
// takes possibilities away from the check, and keeps it small when a fault leaves many writes
// indeterminate.
//
// The model's state of a credential is its revision and the value of every revision from 1 (the
// value is the credential_pairs value {"v": ...}, unique per write, so a read names the write it
// saw): a read must answer the current revision and value; an update or a revert must answer the
// next revision, once (revisions are never lost or duplicated); If-Match, the revert target and
// "no difference" refusals are checked against the state. The state of a name is the id that owns
// it: of creates of one name, exactly one may win, and every other is refused naming the winner.
//
// internal/chaos's TestLinearizable drives it under faults (make linearize).
package linearize

import (
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/anishathalye/porcupine"
)

// InitialValue is the value every credential of a checked history starts with, at revision 1: the
// credentials are created with credential_pairs {"v": InitialValue} before the history begins.
const InitialValue = "initial"

// Kind is what an operation does.
type Kind uint8

const (
	// Read is GET /v1/credentials/{id}.
	Read Kind = iota
	// Update is PUT /v1/credentials/{id} with credential_pairs {"v": Value}, with If-Match: Expect
	// when Expect is not 0.
	Update
	// Revert is PUT /v1/credentials/{id}/{To}, with If-Match: Expect when Expect is not 0.
	Revert
	// Create is POST /v1/credentials of the name Key with credential_pairs {"v": Value}.
	Create
)

func (k Kind) String() string {
	switch k {
	case Read:
		return "read"
	case Update:
		return "update"
	case Revert:
		return "revert"
	case Create:
		return "create"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Input is an operation as it was called.
type Input struct {
	Kind Kind
	// Key is the credential id (Read, Update, Revert) or the name (Create).
	Key string
	// Value is the value written (Update, Create).
	Value string
	// Expect is the If-Match revision of an Update or a Revert; 0: none.
	Expect int
	// To is the target revision of a Revert.
	To int
}

// Result is what an answer says about an operation's effect.
type Result uint8

const (
	// OK: a 200; the operation took effect (a read: saw) with the answered revision and value.
	OK Result = iota
	// Refused: a definite refusal (412, 409, 404 of a revision, 400 "no difference", 429); the
	// operation took no effect, for the Reason given.
	Refused
	// Indeterminate: a write without a definite answer (5xx, timeout, connection cut); it may or may
	// not have taken effect.
	Indeterminate
	// Failed: a read without an answer. It is counted, but it is no part of the history.
	Failed
)

func (r Result) String() string {
	switch r {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	case Indeterminate:
		return "indeterminate"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// Reason is why an operation was refused.
type Reason uint8

const (
	NoReason Reason = iota
	// Stale: 412, the If-Match revision was not the current one.
	Stale
	// NoChange: 400 "No difference between old and new credential." (a revert to the same content).
	NoChange
	// NotFound: 404, the revert's target revision does not exist.
	NotFound
	// NameTaken: 409 of a create, the name exists (Output.ID is the owner the answer names).
	NameTaken
	// Busy: 409 "the record is being updated concurrently", a write that kept losing compare-and-set
	// races until its deadline; nothing was written.
	Busy
	// Limited: 429, the write rate limit; nothing was written.
	Limited
)

func (r Reason) String() string {
	return [...]string{"", "stale", "no change", "not found", "name taken", "busy", "limited"}[r]
}

// Output is an operation's answer as the model reads it.
type Output struct {
	Result Result
	Reason Reason
	// Status is the HTTP status (0: no answer).
	Status int
	// Revision and Value are those an OK Read, Update or Revert answered (Value: Read and Update).
	// An Indeterminate update with a Revision was settled by Resolve: it took effect as that
	// revision, at some time after its call.
	Revision int
	Value    string
	// Current is the current revision a Stale refusal named (0: it named none).
	Current int
	// ID is the id an OK Create answered, or the owner a NameTaken refusal named.
	ID string
	// Note is what the answer said when it was not OK (an error, a status and body), for reports.
	Note string
	// Unexpected marks an answer of a kind the API should not give here (a 403, a 404 of a
	// credential that exists, ...): the recorder models it as indeterminate, and the caller fails.
	Unexpected bool
}

// ownerUnknown is the owner of a name claimed by an indeterminate create: some id, not known which.
const ownerUnknown = "?"

// revision is one revision of a credential in the model's state: an immutable list, newest first,
// shared between states (a step adds a revision on top of the one it was given).
type revision struct {
	rev   int
	value string
	prev  *revision
}

// state is the state of one partition: a credential (head) or a name (owner).
type state struct {
	head  *revision
	owner string
}

func (s state) valueAt(rev int) (string, bool) {
	for r := s.head; r != nil; r = r.prev {
		if r.rev == rev {
			return r.value, true
		}
		if r.rev < rev {
			break
		}
	}
	return "", false
}

func (s state) push(value string) state {
	return state{head: &revision{rev: s.head.rev + 1, value: value, prev: s.head}, owner: s.owner}
}

var hashSeed = maphash.MakeSeed()

// Model is the sequential specification of the credential API, partitioned by credential and by
// name (each partition is checked on its own). Every partition starts at revision 1 with
// InitialValue (a credential) and without an owner (a name).
func Model() porcupine.Model {
	return porcupine.Model{
		Partition: partition,
		Init: func() any {
			return state{head: &revision{rev: 1, value: InitialValue}}
		},
		Step: func(s, in, out any) (bool, any) {
			return step(s.(state), in.(Input), out.(Output))
		},
		Equal: func(a, b any) bool { return equal(a.(state), b.(state)) },
		Hash: func(s any) uint64 {
			st := s.(state)
			var h maphash.Hash
			h.SetSeed(hashSeed)
			fmt.Fprintf(&h, "%d\x00%s\x00%s", st.head.rev, st.head.value, st.owner)
			return h.Sum64()
		},
		DescribeOperation: func(in, out any) string { return Describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return describeState(s.(state)) },
	}
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		in := op.Input.(Input)
		key := "credential " + in.Key
		if in.Kind == Create {
			key = "name " + in.Key
		}
		i, ok := index[key]
		if !ok {
			i = len(parts)
			index[key] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// step is the specification: whether out can be the answer to in in state s, and the state after.
func step(s state, in Input, out Output) (bool, state) {
	switch in.Kind {
	case Read:
		switch out.Result {
		case OK:
			return out.Revision == s.head.rev && out.Value == s.head.value, s
		default: // a read without an answer has no effect
			return out.Result != Refused, s
		}
	case Update, Revert:
		// What the service does, in its order (credentials.go): the If-Match check, then (a revert)
		// the target's lookup and the "no difference" check.
		if in.Expect != 0 && in.Expect != s.head.rev {
			switch out.Result {
			case Indeterminate:
				return out.Revision == 0, s // a settled one took effect, so not here
			case Refused:
				switch out.Reason {
				case Stale:
					return out.Current == 0 || out.Current == s.head.rev, s
				case Busy, Limited:
					return true, s
				}
			}
			return false, s
		}
		value := in.Value
		var reason Reason
		if in.Kind == Revert {
			v, ok := s.valueAt(in.To)
			switch {
			case !ok:
				reason = NotFound
			case v == s.head.value:
				reason = NoChange
			}
			value = v
		}
		switch out.Result {
		case OK:
			if reason != NoReason || out.Revision != s.head.rev+1 || (in.Kind == Update && out.Value != value) {
				return false, s
			}
			return true, s.push(value)
		case Indeterminate:
			if out.Revision != 0 {
				// Settled (Resolve): it took effect, as this revision.
				if reason != NoReason || out.Revision != s.head.rev+1 {
					return false, s
				}
				return true, s.push(value)
			}
			if reason != NoReason {
				return true, s
			}
			return true, s.push(value)
		case Refused:
			switch out.Reason {
			case Busy, Limited:
				return true, s
			case NotFound, NoChange:
				return out.Reason == reason, s
			}
		}
		return false, s
	case Create:
		switch out.Result {
		case OK:
			if s.owner != "" {
				return false, s
			}
			return true, state{head: s.head, owner: out.ID}
		case Indeterminate:
			if s.owner == "" {
				return true, state{head: s.head, owner: ownerUnknown}
			}
			return true, s
		case Refused:
			switch out.Reason {
			case NameTaken:
				switch {
				case s.owner == "":
					return false, s
				case out.ID == "" || out.ID == s.owner:
					return true, s
				case s.owner == ownerUnknown:
					// The indeterminate create that took the name made this id.
					return true, state{head: s.head, owner: out.ID}
				}
				return false, s
			case Busy, Limited:
				return true, s
			}
		}
		return false, s
	}
	return false, s
}

func equal(a, b state) bool {
	if a.owner != b.owner {
		return false
	}
	x, y := a.head, b.head
	for x != y {
		if x == nil || y == nil || x.rev != y.rev || x.value != y.value {
			return false
		}
		x, y = x.prev, y.prev
	}
	return true
}

// Describe is an operation in a line: "update v7 if r4 -> r5 v7", "read -> 412 ...".
func Describe(in Input, out Output) string {
	var b strings.Builder
	b.WriteString(in.Kind.String())
	switch in.Kind {
	case Update:
		fmt.Fprintf(&b, " %s", in.Value)
	case Revert:
		fmt.Fprintf(&b, " to r%d", in.To)
	case Create:
		fmt.Fprintf(&b, " %s", in.Key)
	}
	if in.Expect != 0 {
		fmt.Fprintf(&b, " if r%d", in.Expect)
	}
	b.WriteString(" -> ")
	switch out.Result {
	case OK:
		if in.Kind == Create {
			fmt.Fprintf(&b, "id %s", out.ID)
		} else {
			fmt.Fprintf(&b, "r%d", out.Revision)
			if out.Value != "" {
				fmt.Fprintf(&b, " %s", out.Value)
			}
		}
	case Refused:
		fmt.Fprintf(&b, "%d %s", out.Status, out.Reason)
		if out.Current != 0 {
			fmt.Fprintf(&b, " (current r%d)", out.Current)
		}
		if out.ID != "" {
			fmt.Fprintf(&b, " (owner %s)", out.ID)
		}
	default:
		fmt.Fprintf(&b, "%s (%s)", out.Result, out.Note)
	}
	return b.String()
}

func describeState(s state) string {
	if s.owner != "" {
		return "owned by " + s.owner
	}
	if s.head.prev == nil {
		return fmt.Sprintf("r1 %s (a credential), free (a name)", s.head.value)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "r%d %s", s.head.rev, s.head.value)
	n := 0
	for r := s.head.prev; r != nil; r = r.prev {
		if n == 4 {
			b.WriteString(", ...")
			break
		}
		fmt.Fprintf(&b, ", r%d %s", r.rev, r.value)
		n++
	}
	return b.String()
}
