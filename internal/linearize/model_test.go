package linearize

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is a hand-made operation of client c from call to ret (in milliseconds).
func op(c int, call, ret int, in Input, out Output) Op {
	return Op{Client: c, Input: in, Output: out, Call: time.Duration(call) * time.Millisecond, Return: time.Duration(ret) * time.Millisecond}
}

func read(id string) Input { return Input{Kind: Read, Key: id} }
func update(id, v string, expect int) Input {
	return Input{Kind: Update, Key: id, Value: v, Expect: expect}
}
func revert(id string, to, expect int) Input {
	return Input{Kind: Revert, Key: id, To: to, Expect: expect}
}
func create(name, v string) Input  { return Input{Kind: Create, Key: name, Value: v} }
func saw(rev int, v string) Output { return Output{Result: OK, Status: 200, Revision: rev, Value: v} }
func wrote(rev int) Output         { return Output{Result: OK, Status: 200, Revision: rev} }
func stale(current int) Output {
	return Output{Result: Refused, Reason: Stale, Status: 412, Current: current}
}
func refused(r Reason) Output  { return Output{Result: Refused, Reason: r, Status: 409} }
func created(id string) Output { return Output{Result: OK, Status: 200, ID: id} }
func taken(owner string) Output {
	return Output{Result: Refused, Reason: NameTaken, Status: 409, ID: owner}
}

var (
	unknown = Output{Result: Indeterminate, Status: 503, Note: "503 storage unavailable"}
	noRead  = Output{Result: Failed, Status: 504, Note: "504 request timed out"}
)

// TestModelAcceptsLinearizableHistories: histories a correct service can produce, sequential and
// concurrent, with every kind of answer, each linearizable.
func TestModelAcceptsLinearizableHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
	}{
		{"sequential: every operation and refusal", []Op{
			op(0, 0, 1, read("c"), saw(1, InitialValue)),
			op(0, 2, 3, update("c", "a", 0), saw(2, "a")),
			op(0, 4, 5, update("c", "b", 2), saw(3, "b")),
			op(0, 6, 7, update("c", "x", 2), stale(3)),
			op(0, 8, 9, revert("c", 2, 0), wrote(4)),
			op(0, 10, 11, read("c"), saw(4, "a")),
			op(0, 12, 13, revert("c", 2, 0), Output{Result: Refused, Reason: NoChange, Status: 400}),
			op(0, 14, 15, revert("c", 9, 0), Output{Result: Refused, Reason: NotFound, Status: 404}),
			op(0, 16, 17, revert("c", 1, 3), stale(4)),
			op(0, 18, 19, revert("c", 1, 4), wrote(5)),
			op(0, 20, 21, update("c", "y", 0), refused(Busy)),
			op(0, 22, 23, read("c"), saw(5, InitialValue)),
		}},
		{"concurrent updates answer the next revisions in either order", []Op{
			op(0, 0, 10, update("c", "a", 0), saw(3, "a")),
			op(1, 1, 9, update("c", "b", 0), saw(2, "b")),
			op(2, 2, 3, read("c"), saw(2, "b")),
			op(3, 11, 12, read("c"), saw(3, "a")),
		}},
		{"of two If-Match writers of one revision, one wins and the other is stale", []Op{
			op(0, 0, 10, update("c", "a", 1), saw(2, "a")),
			op(1, 0, 10, update("c", "b", 1), stale(2)),
			op(2, 11, 12, read("c"), saw(2, "a")),
		}},
		{"an indeterminate update that took effect, seen by a later read", []Op{
			op(0, 0, 5, update("c", "a", 0), unknown),
			op(1, 6, 7, read("c"), saw(1, InitialValue)),
			op(1, 8, 9, read("c"), saw(2, "a")),
			op(1, 10, 11, update("c", "b", 2), saw(3, "b")),
		}},
		{"an indeterminate update that never took effect", []Op{
			op(0, 0, 5, update("c", "a", 0), unknown),
			op(1, 6, 7, update("c", "b", 0), saw(2, "b")),
			op(1, 8, 9, read("c"), saw(2, "b")),
		}},
		{"a read without an answer is no part of the history", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(1, 2, 3, read("c"), noRead),
			op(1, 4, 5, read("c"), saw(2, "a")),
		}},
		{"racing creates: one winner, the others refused naming it", []Op{
			op(0, 0, 10, create("n", "a"), created("id1")),
			op(1, 0, 10, create("n", "b"), taken("id1")),
			op(2, 0, 10, create("n", "c"), unknown),
			op(3, 11, 12, create("n", "d"), taken("id1")),
		}},
		{"the winner of a race answered indeterminate; the losers name its id", []Op{
			op(0, 0, 10, create("n", "a"), unknown),
			op(1, 11, 12, create("n", "b"), taken("id7")),
			op(2, 13, 14, create("n", "c"), taken("id7")),
		}},
		{"credentials and names are independent", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(1, 0, 1, update("d", "b", 0), saw(2, "b")),
			op(2, 0, 1, create("n", "x"), created("id1")),
			op(0, 2, 3, read("d"), saw(2, "b")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := Check(tc.ops, time.Minute)
			if res != porcupine.Ok {
				t.Fatalf("check: %s, want %s", res, porcupine.Ok)
			}
		})
	}
}

// TestModelRejectsViolations: each history breaks one promise of the API, and the check finds it
// (and the visualization of the failed check is written).
func TestModelRejectsViolations(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
	}{
		{"stale read: a read after an acknowledged update answers the revision before it", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(1, 2, 3, read("c"), saw(1, InitialValue)),
		}},
		{"stale read across clients: a read sees a value, a later read the one before", []Op{
			op(0, 0, 10, update("c", "a", 0), unknown),
			op(1, 1, 2, read("c"), saw(2, "a")),
			op(2, 3, 4, read("c"), saw(1, InitialValue)),
		}},
		{"lost update: an acknowledged update replaced at its revision by a concurrent one", []Op{
			op(0, 0, 10, update("c", "a", 0), saw(2, "a")),
			op(1, 0, 10, update("c", "b", 0), unknown),
			op(2, 20, 21, read("c"), saw(2, "b")),
		}},
		{"lost update: acknowledged, then gone", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(0, 2, 3, update("c", "b", 0), saw(3, "b")),
			op(1, 4, 5, read("c"), saw(2, "a")),
		}},
		{"duplicated revision: two updates answered the same revision", []Op{
			op(0, 0, 10, update("c", "a", 0), saw(2, "a")),
			op(1, 0, 10, update("c", "b", 0), saw(2, "b")),
		}},
		{"skipped revision: an update answered two revisions past the last", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(3, "a")),
		}},
		{"If-Match ignored: an update over a stale revision went through", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(1, 2, 3, update("c", "b", 1), saw(3, "b")),
		}},
		{"412 for a revision that was current", []Op{
			op(0, 0, 1, update("c", "a", 1), stale(2)),
		}},
		{"412 naming a current revision that was not", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(0, 2, 3, update("c", "b", 1), stale(3)),
		}},
		{"a revert that went through with nothing to change", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(0, 2, 3, revert("c", 2, 0), wrote(3)),
		}},
		{"a revert that wrote something else than the target's value", []Op{
			op(0, 0, 1, update("c", "a", 0), saw(2, "a")),
			op(0, 2, 3, revert("c", 1, 0), wrote(3)),
			op(0, 4, 5, read("c"), saw(3, "a")),
		}},
		{"two creates of one name both won", []Op{
			op(0, 0, 10, create("n", "a"), created("id1")),
			op(1, 0, 10, create("n", "b"), created("id2")),
		}},
		{"a refused create names another owner than the winner", []Op{
			op(0, 0, 1, create("n", "a"), created("id1")),
			op(1, 2, 3, create("n", "b"), taken("id2")),
		}},
		{"a create refused before any create of the name", []Op{
			op(1, 0, 1, create("n", "b"), taken("id2")),
			op(0, 2, 3, create("n", "a"), created("id1")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, info := Check(tc.ops, time.Minute)
			if res != porcupine.Illegal {
				t.Fatalf("check: %s, want %s", res, porcupine.Illegal)
			}
			if lines := Explain(tc.ops, info); len(lines) == 0 {
				t.Error("Explain names no partition")
			} else {
				t.Log(strings.Join(lines, "\n"))
			}
			path := filepath.Join(t.TempDir(), "history.html")
			if err := Visualize(path, info, Span{From: 0, To: time.Millisecond, Description: "a fault"}); err != nil {
				t.Fatal(err)
			}
			if html, err := os.ReadFile(path); err != nil || !strings.Contains(string(html), "a fault") {
				t.Fatalf("visualization: %v, %d bytes without the fault's span", err, len(html))
			}
		})
	}
}

// TestHistoryPlacesIndeterminateOperationsAtInfinity: an indeterminate write's return comes after
// every other operation's, unless an answer shows its value (then it is that answer's return), and
// a read without an answer is left out.
func TestHistoryPlacesIndeterminateOperationsAtInfinity(t *testing.T) {
	h := History([]Op{
		op(0, 0, 5, update("c", "a", 0), unknown),
		op(1, 1, 2, read("c"), noRead),
		op(2, 3, 40, read("c"), saw(1, InitialValue)),
		op(3, 6, 7, update("c", "b", 0), unknown),
		op(4, 8, 9, read("c"), saw(2, "b")),
		op(4, 10, 11, read("c"), saw(2, "b")),
	})
	if len(h) != 5 {
		t.Fatalf("%d operations in the history, want 5 (the failed read left out)", len(h))
	}
	if h[0].Return <= h[1].Return {
		t.Errorf("the indeterminate update returns at %d, not after the read's return %d", h[0].Return, h[1].Return)
	}
	if want := int64(9 * time.Millisecond); h[2].Return != want {
		t.Errorf("the indeterminate update whose value a read showed returns at %d, want %d (that read's return)", h[2].Return, want)
	}
}

func TestClassify(t *testing.T) {
	cut := errors.New("connection reset by peer")
	for _, tc := range []struct {
		kind   Kind
		status int
		body   string
		err    error
		want   Output
	}{
		{Read, 200, `{"id":"c","revision":3,"credential_pairs":{"v":"x"}}`, nil, Output{Result: OK, Revision: 3, Value: "x"}},
		{Update, 200, `{"id":"c","revision":4,"credential_pairs":{"v":"y"}}`, nil, Output{Result: OK, Revision: 4, Value: "y"}},
		{Revert, 200, `{"id":"c","revision":5,"credential_pairs":{}}`, nil, Output{Result: OK, Revision: 5}},
		{Create, 200, `{"id":"new","revision":1,"credential_pairs":{"v":"z"}}`, nil, Output{Result: OK, ID: "new"}},
		{Update, 412, `{"error":"Precondition failed: the current revision of the credential is 5, not 3 (If-Match)."}`, nil, Output{Result: Refused, Reason: Stale, Current: 5}},
		{Create, 409, `{"error":"Name already exists. See id: abc","reference":"abc"}`, nil, Output{Result: Refused, Reason: NameTaken, ID: "abc"}},
		{Update, 409, `{"error":"the record is being updated concurrently; retry"}`, nil, Output{Result: Refused, Reason: Busy}},
		{Revert, 400, `{"error":"No difference between old and new credential."}`, nil, Output{Result: Refused, Reason: NoChange}},
		{Revert, 404, `{"error":"Revision 9 of credential c not found."}`, nil, Output{Result: Refused, Reason: NotFound}},
		{Update, 429, `{"error":"slow down"}`, nil, Output{Result: Refused, Reason: Limited}},
		{Update, 503, `{"error":"storage unavailable"}`, nil, Output{Result: Indeterminate}},
		{Revert, 504, `{"error":"request timed out"}`, nil, Output{Result: Indeterminate}},
		{Create, 0, ``, cut, Output{Result: Indeterminate}},
		{Read, 503, `{"error":"storage unavailable"}`, nil, Output{Result: Failed}},
		{Read, 0, ``, cut, Output{Result: Failed}},
		{Update, 403, `{"error":"no"}`, nil, Output{Result: Indeterminate, Unexpected: true}},
		{Read, 404, `{"error":"Credential not found."}`, nil, Output{Result: Failed, Unexpected: true}},
		{Update, 200, `{"revision":4}`, nil, Output{Result: Indeterminate, Unexpected: true}},
	} {
		got := Classify(tc.kind, tc.status, []byte(tc.body), tc.err)
		got.Status, got.Note = 0, ""
		if got != tc.want {
			t.Errorf("%s %d %s %v: %+v, want %+v", tc.kind, tc.status, tc.body, tc.err, got, tc.want)
		}
	}
}

func TestThroughputCountsDefiniteAnswersPerBucket(t *testing.T) {
	ops := []Op{
		op(0, 0, 100, read("c"), saw(1, InitialValue)),
		op(0, 0, 900, update("c", "a", 0), saw(2, "a")),
		op(0, 0, 1500, update("c", "b", 0), unknown), // no definite answer: not counted
		op(0, 0, 1600, update("c", "b", 1), stale(2)),
		op(0, 0, 2500, read("c"), noRead),
		op(0, 0, 2600, read("c"), saw(2, "a")),
	}
	got := Throughput(ops, 0, 3*time.Second, time.Second)
	if want := []int{2, 1, 1}; !equalInts(got, want) {
		t.Errorf("throughput %v, want %v", got, want)
	}
	c := Count(ops)
	if c != (Counts{Ops: 6, OK: 3, Refused: 1, Indeterminate: 1, Failed: 1}) {
		t.Errorf("counts %+v", c)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestModelChecksALongConcurrentHistory: a history like a chaos round's (6 clients, 3 credentials,
// every kind of operation, a burst of indeterminate writes as under a fault, half of them applied),
// made by a correct service simulated here, is linearizable and checked quickly; the same history
// with one read made stale (PlantStaleRead) is not.
func TestModelChecksALongConcurrentHistory(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ops, _ := simulate(rng, 3000, 100)
	start := time.Now()
	if res, _ := Check(ops, time.Minute); res != porcupine.Ok {
		t.Fatalf("check of the simulated history: %s, want %s", res, porcupine.Ok)
	}
	t.Logf("%d operations checked in %v", len(ops), time.Since(start))

	planted, at, ok := PlantStaleRead(ops)
	if !ok {
		t.Fatal("no read to make stale")
	}
	if res, _ := Check(planted, time.Minute); res != porcupine.Illegal {
		t.Fatalf("check with the read %s made stale: %s, want %s", Describe(planted[at].Input, planted[at].Output), res, porcupine.Illegal)
	}
}

// TestResolvedChecksStaySmall: a history with a long fault (a quarter of the writes of 2,000
// operations indeterminate, some 300 of them, half taken effect) checks fast once Resolve has
// settled them with the stored histories, and a stale read planted in it is found.
func TestResolvedChecksStaySmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ops, histories := simulate(rng, 3000, 2000)
	resolved, res, problems := Resolve(ops, histories)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	start := time.Now()
	if r, _ := Check(resolved, time.Minute); r != porcupine.Ok {
		t.Fatalf("check of the resolved history: %s, want Ok", r)
	}
	t.Logf("%d operations, %d indeterminate updates settled as applied and %d as not, checked in %v", len(ops), res.Applied, res.NotApplied, time.Since(start))
	planted, _, _ := PlantStaleRead(resolved)
	if r, _ := Check(planted, time.Minute); r != porcupine.Illegal {
		t.Fatalf("check with a stale read planted: %s, want Illegal", r)
	}
}

// simulate is n operations of 6 clients on a correct service: each takes effect at its own instant
// (10 ms apart), called up to 30 ms before and answered up to 30 ms after it, a client's operations
// one after the other; a quarter of the writes among faulty operations a third of the way in have
// no definite answer (a fault), and half of those took effect. It returns the credentials' stored
// histories too.
func simulate(rng *rand.Rand, n, faulty int) ([]Op, map[string][]Revision) {
	const clients = 6
	creds := []string{"c0", "c1", "c2"}
	values := map[string][]string{} // per credential, the value of each revision (index 0: revision 1)
	for _, id := range creds {
		values[id] = []string{InitialValue}
	}
	owners := map[string]string{}
	free := make([]int, clients) // when each client's last operation returned
	var ops []Op
	for k := range n {
		at := 100 + 10*k
		c := rng.IntN(clients)
		for free[c] >= at {
			c = (c + 1) % clients
		}
		call := max(free[c]+1, at-rng.IntN(30))
		ret := at + rng.IntN(30)
		free[c] = ret
		id := creds[rng.IntN(len(creds))]
		vals := values[id]
		cur := len(vals)
		var in Input
		var out Output
		switch p := rng.IntN(10); {
		case p < 4:
			in, out = read(id), saw(cur, vals[cur-1])
		case p < 8:
			expect := 0
			if p >= 6 {
				expect = max(1, cur-rng.IntN(2))
			}
			in = update(id, fmt.Sprintf("v%d", k), expect)
			if expect != 0 && expect != cur {
				out = stale(cur)
			} else {
				values[id] = append(vals, in.Value)
				out = saw(cur+1, in.Value)
			}
		case p < 9:
			in = revert(id, 1+rng.IntN(cur), 0)
			if vals[in.To-1] == vals[cur-1] {
				out = Output{Result: Refused, Reason: NoChange, Status: 400}
			} else {
				values[id] = append(vals, vals[in.To-1])
				out = wrote(cur + 1)
			}
		default:
			name := fmt.Sprintf("n%d", k/50)
			in = create(name, "x")
			if owners[name] == "" {
				owners[name] = fmt.Sprintf("id%d", k)
				out = created(owners[name])
			} else {
				out = taken(owners[name])
			}
		}
		if in.Kind != Read && k >= n/3 && k < n/3+faulty && rng.IntN(4) == 0 {
			// Indeterminate: half of these took effect (as computed above), half did not.
			if rng.IntN(2) == 0 {
				values[id] = vals
				if in.Kind == Create && out.Result == OK {
					delete(owners, in.Key)
				}
			}
			out = unknown
		}
		ops = append(ops, op(c, call, ret, in, out))
	}
	histories := map[string][]Revision{}
	for id, vals := range values {
		for i, v := range vals {
			histories[id] = append(histories[id], Revision{Rev: i + 1, Value: v})
		}
	}
	return ops, histories
}
