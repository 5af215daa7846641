package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/linearize"
	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/internal/stacktest"
	"github.com/gantry-dev/gantry/pkg/testwait"
)

// Settings of TestLinearizable (make linearize sets them; without them it runs the short form).
const (
	// envLinRounds is the number of rounds, round i injecting linFaults[i % len(linFaults)], or
	// "all": each fault once.
	envLinRounds = "GANTRY_LINEARIZE_ROUNDS"
	// envLinDuration is the load time of one round: the fault starts after a quarter of it and is
	// healed after three quarters.
	envLinDuration = "GANTRY_LINEARIZE_DURATION"
	// envLinOut is the folder the visualization of a history that fails its check is written to
	// (default: a new temporary folder that is kept, its path printed).
	envLinOut = "LINEARIZE_OUT"
)

const (
	// linClients call the mixed operations through the gateway that balances both replicas; one
	// more client makes the cross-replica pairs.
	linClients = 6
	// linCredentials is the number of hot credentials of a round (made fresh for each round).
	linCredentials = 3
	// linCheckTimeout bounds porcupine's check of one round; a check that does not finish in it is
	// Unknown, reported as not passed.
	linCheckTimeout = 3 * time.Minute
	// linCallTimeout bounds one call of a client: past the gateway's upstream timeout (30 s), so an
	// answer normally comes from the gateway.
	linCallTimeout = 35 * time.Second
)

// linCluster is what TestLinearizable runs and injects faults into: a 3-member etcd cluster of
// child processes, two secrets replicas on it (child processes, A and B), a gateway balancing both
// (base) and one gateway per replica (direct[0] only A, direct[1] only B) for the cross-replica
// read-your-writes pairs.
//
// Each member's peer URL goes through a pkg/faultnet proxy (startMembers), so a fault can cut one
// member off from its peers (partitionPeers).
type linCluster struct {
	members   []*member
	statusCli *clientv3.Client
	replicas  []*replicaProc
	base      string
	direct    [2]string
	auth      string
}

// linFault is one fault of a round: start injects it into c (under load) and returns the function
// that heals it. Both may block (a restart waits until the process serves).
type linFault struct {
	name  string
	start func(t *testing.T, c *linCluster) (heal func())
}

// linFaults are the faults of the rounds, in order; the short form runs the first. A new fault is
// one more entry (make linearize's default, ROUNDS=all, runs each once).
var linFaults = []linFault{
	{"etcd leader cut off from its peers", func(t *testing.T, c *linCluster) func() {
		return partitionPeers(t, c.statusCli, c.members, c.leader(t, true))
	}},
	{"SIGSTOP of the etcd leader", func(t *testing.T, c *linCluster) func() {
		return freeze(t, c.leader(t, true).cmd.Process)
	}},
	{"SIGSTOP of an etcd follower", func(t *testing.T, c *linCluster) func() {
		return freeze(t, c.leader(t, false).cmd.Process)
	}},
	{"SIGKILL of the etcd leader, restarted at the heal", func(t *testing.T, c *linCluster) func() {
		m := c.leader(t, true)
		m.kill(t)
		return func() { m.start(t); m.waitReady(t) }
	}},
	{"etcd follower cut off from its peers", func(t *testing.T, c *linCluster) func() {
		return partitionPeers(t, c.statusCli, c.members, c.leader(t, false))
	}},
	{"SIGSTOP of secrets replica A", func(t *testing.T, c *linCluster) func() {
		return freeze(t, c.replicas[0].cmd.Process)
	}},
	{"SIGKILL + restart of secrets replica A", func(t *testing.T, c *linCluster) func() {
		c.replicas[0].kill(t)
		c.replicas[0].start(t)
		return func() {}
	}},
}

// freeze SIGSTOPs p and returns the SIGCONT.
func freeze(t *testing.T, p *os.Process) func() {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := p.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
}

// leader is the member that leads (lead) or one that follows (!lead), waiting for an elected leader.
func (c *linCluster) leader(t *testing.T, lead bool) *member {
	t.Helper()
	var found *member
	testwait.Until(t, "an etcd leader", func() bool {
		for _, m := range c.members {
			if isLeader(t, c.statusCli, m.endpoint) {
				found = m
				return true
			}
		}
		return false
	})
	if lead {
		return found
	}
	for _, m := range c.members {
		if m != found {
			return m
		}
	}
	panic("unreachable")
}

// replicaProc is a secrets replica child that can be killed and started again on its data folder.
type replicaProc struct {
	dir, addr, tlsDir string
	endpoints         []string
	cmd               *exec.Cmd
	exited            chan struct{}
}

func (r *replicaProc) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecretsReplicaChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envReplicaDir+"="+r.dir, envReplicaListen+"="+r.addr,
		envReplicaTLS+"="+r.tlsDir, envReplicaEtcd+"="+strings.Join(r.endpoints, ","))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
}

func (r *replicaProc) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	<-r.exited
}

// TestLinearizable checks the credential REST API for linearizability under faults, as etcd's
// robustness tests check etcd (internal/linearize: the model and the recorder). Each round makes 3
// fresh hot credentials; 6 clients call reads, updates with and without If-Match, reverts and racing
// creates of one name through the gateway that balances both replicas, and a seventh writes through
// one replica and reads through the other (the cross-replica read-your-writes pairs); a quarter into
// the round a fault starts (linFaults, one per round, in turn), three quarters in it is healed. Each
// round's history must be linearizable (porcupine; Unknown, a check that did not finish in
// linCheckTimeout, is no pass), with its indeterminate writes settled by the credentials' stored
// histories, read at the end (linearize.Resolve, which also checks those: revisions 1..N, every
// acknowledged write where it was answered); no pair may read less than its write, and every answer
// must be one the API gives. Per round it prints the operations by result, the answered operations per second
// around the fault (the availability it cost), the pairs and the check's result; a history that
// fails is written as porcupine's HTML visualization (LINEARIZE_OUT, or a kept temporary folder).
//
// The short form (no GANTRY_LINEARIZE_* settings) is one 30 s round of the first fault; make
// linearize runs ROUNDS rounds of DURATION (CONTRIBUTING.md).
func TestLinearizable(t *testing.T) {
	if os.Getenv(envReplicaDir) != "" || os.Getenv(envChildDataDir) != "" || os.Getenv(envMemberConfig) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("starts an etcd cluster, two secrets replicas and three gateways")
	}
	rounds, duration := 1, 30*time.Second
	switch v := os.Getenv(envLinRounds); v {
	case "":
	case "all":
		rounds = len(linFaults)
	default:
		if _, err := fmt.Sscan(v, &rounds); err != nil || rounds < 1 {
			t.Fatalf("%s=%q: want a positive number, or all (each fault once)", envLinRounds, v)
		}
	}
	if v := os.Getenv(envLinDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 4*time.Second {
			t.Fatalf("%s=%q: want a duration of at least 4s", envLinDuration, v)
		}
		duration = d
	}
	c := startLinCluster(t)
	var summary []string
	for round := range rounds {
		f := linFaults[round%len(linFaults)]
		line := linRound(t, c, round, f, duration)
		summary = append(summary, line)
		if t.Failed() {
			break
		}
		c.waitServing(t, hotName(round, 0))
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}

func startLinCluster(t *testing.T) *linCluster {
	t.Helper()
	members := startMembers(t, t.TempDir())
	endpoints := make([]string, len(members))
	for i, m := range members {
		endpoints[i] = m.endpoint
	}
	statusCli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: etcdWait, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = statusCli.Close() })
	c := &linCluster{members: members, statusCli: statusCli}

	// The first replica creates the keyring; the second gets a copy (replicas share their keys).
	tlsDir := filepath.Join(t.TempDir(), "tls")
	for i := range 2 {
		r := &replicaProc{dir: filepath.Join(t.TempDir(), fmt.Sprintf("r%d", i)), addr: freeAddr(t), tlsDir: tlsDir, endpoints: endpoints}
		if i == 1 {
			if err := os.MkdirAll(r.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"keyring.json", "session.key"} {
				data, err := os.ReadFile(filepath.Join(c.replicas[0].dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(r.dir, f), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.start(t)
		if i == 0 {
			waitFile(t, filepath.Join(r.dir, "keyring.json"))
			waitFile(t, filepath.Join(r.dir, "session.key"))
		}
		c.replicas = append(c.replicas, r)
	}
	gateway := func(upstreams ...string) string {
		cfg := loopbackConfig(t, t.TempDir())
		cfg.Target = stack.RoleGateway
		cfg.InternalTLS.Dir = tlsDir
		cfg.Gateway.SecretsUpstream = strings.Join(upstreams, ",")
		cfg.Gateway.ChatUpstream = freeAddr(t)
		cfg.Gateway.HealthCheck.Interval = 500 * time.Millisecond
		cfg.Gateway.HealthCheck.Timeout = time.Second
		return "http://" + stacktest.Start(t, cfg, stacktest.Logger(zap.NewNop()), stacktest.UncheckedStop()).GatewayAddr
	}
	c.base = gateway(c.replicas[0].addr, c.replicas[1].addr)
	c.direct = [2]string{gateway(c.replicas[0].addr), gateway(c.replicas[1].addr)}
	c.auth = userAuth(t, c.replicas[0].dir)
	return c
}

// waitServing waits until every member answers with a leader and both replicas serve a listing of
// the credentials named name through their own gateway: the cluster has recovered from the last
// round's fault.
func (c *linCluster) waitServing(t *testing.T, name string) {
	t.Helper()
	testwait.Until(t, "every etcd member with a leader", func() bool {
		for _, m := range c.members {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := c.statusCli.Status(ctx, m.endpoint)
			cancel()
			if err != nil || st.Leader == 0 {
				return false
			}
		}
		return true
	})
	for _, base := range c.direct {
		testwait.Until(t, "a replica serving through "+base, func() bool {
			r, err := tryRequest(base, c.auth, "GET", "/v1/credentials?limit=1&name_prefix="+name, nil)
			return err == nil && r.code == 200
		})
	}
}

// linHTTP is the clients' HTTP client: its timeout ends a call the gateway never answers.
var linHTTP = &http.Client{Timeout: linCallTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// linRound runs one round with fault f and returns its summary line.
func linRound(t *testing.T, c *linCluster, round int, f linFault, d time.Duration) string {
	t.Helper()
	ids := c.createHot(t, round)
	rec := linearize.NewRecorder()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The load ends before the round's checks, or with the round when a fault fails it.
	end := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer end()
	for i := range linClients {
		cl := &linearize.Client{ID: i, Base: c.base, Auth: c.auth, HTTP: linHTTP, Rec: rec}
		wg.Go(func() { runLinClient(cl, ids, round, stop) })
	}
	pairs := &pairStats{}
	wg.Go(func() {
		var cls [2]*linearize.Client
		for i := range cls {
			cls[i] = &linearize.Client{ID: linClients, Base: c.direct[i], Auth: c.auth, HTTP: linHTTP, Rec: rec}
		}
		runPairs(cls, ids, round, stop, pairs)
	})

	// The load runs a quarter of the round before the fault, half of it under the fault, and a
	// quarter after the heal (these are the round's phases, not waits for an event).
	time.Sleep(d / 4)
	faultAt := rec.Since(time.Now())
	heal := f.start(t, c)
	faultStarted := rec.Since(time.Now())
	time.Sleep(d / 2)
	healAt := rec.Since(time.Now())
	heal()
	healed := rec.Since(time.Now())
	time.Sleep(d / 4)
	stopped := rec.Since(time.Now())
	end()

	// A last read of every credential, once the cluster serves again: every acknowledged write
	// must be in it.
	final := &linearize.Client{ID: linClients + 1, Base: c.base, Auth: c.auth, HTTP: linHTTP, Rec: rec}
	for _, id := range ids {
		testwait.Until(t, "a final read of "+id, func() bool {
			return final.Read(context.Background(), id).Result == linearize.OK
		})
	}

	ops := rec.Ops()
	counts := linearize.Count(ops)

	// The credentials' stored histories, read now that every call has ended, settle the
	// indeterminate updates (linearize.Resolve: that only takes possibilities away from the check).
	histories := map[string][]linearize.Revision{}
	for _, id := range ids {
		testwait.Until(t, "the stored history of "+id, func() bool {
			revs, err := final.Revisions(context.Background(), id)
			histories[id] = revs
			return err == nil
		})
	}
	checked, settled, problems := linearize.Resolve(ops, histories)
	for _, p := range problems {
		t.Errorf("round %d: %s", round, p)
	}
	start := time.Now()
	res, info := linearize.Check(checked, linCheckTimeout)
	took := time.Since(start)

	// Answered operations per second, each second of the load (the seconds of the fault in
	// brackets).
	buckets := linearize.Throughput(ops, 0, stopped.Truncate(time.Second), time.Second)
	var b strings.Builder
	for i, n := range buckets {
		sec := time.Duration(i) * time.Second
		if sec <= faultAt && faultAt < sec+time.Second {
			b.WriteString("[")
		}
		fmt.Fprintf(&b, "%d", n)
		if sec <= healed && healed < sec+time.Second {
			b.WriteString("]")
		}
		b.WriteString(" ")
	}
	before := slices.Clone(buckets[:min(len(buckets), int(faultAt/time.Second))])
	slices.Sort(before)
	var baseline, slow int
	if len(before) > 0 {
		baseline = before[len(before)/2]
	}
	for i := int(faultAt / time.Second); i < len(buckets); i++ {
		if buckets[i] < baseline/2 {
			slow++
		}
	}
	indeterminate, refused := map[string]int{}, map[string]int{}
	for _, op := range ops {
		switch op.Output.Result {
		case linearize.Indeterminate:
			indeterminate[op.Input.Kind.String()]++
		case linearize.Refused:
			refused[op.Output.Reason.String()]++
		}
	}
	t.Logf("round %d: %s (from %.1f s, %.1f s to inject; healed at %.1f s, %.1f s to heal)", round, f.name,
		faultAt.Seconds(), (faultStarted - faultAt).Seconds(), healAt.Seconds(), (healed - healAt).Seconds())
	t.Logf("  operations: %d: %d ok, %d refused %v, %d indeterminate %v, %d reads failed; %d unexpected answers",
		counts.Ops, counts.OK, counts.Refused, refused, counts.Indeterminate, indeterminate, counts.Failed, counts.Unexpected)
	t.Logf("  answered/s: %s", b.String())
	t.Logf("  baseline %d/s before the fault; %d s below half of it from the fault on", baseline, slow)
	t.Logf("  cross-replica pairs (write through one replica, read through the other): %d, %d stale, %d reads unanswered", pairs.pairs, pairs.stale, pairs.unanswered)
	t.Logf("  indeterminate writes settled by the stored histories: %d took effect, %d did not, %d left open", settled.Applied, settled.NotApplied, counts.Indeterminate-settled.Applied-settled.NotApplied)
	t.Logf("  linearizability check: %s in %v", res, took.Round(time.Millisecond))
	if res == porcupine.Ok {
		// A check of the check: the same history with one read made stale must fail it.
		planted, at, ok := linearize.PlantStaleRead(checked)
		if !ok {
			t.Errorf("round %d: no read of a revision an update answered, to plant a stale read in", round)
		} else {
			start := time.Now()
			res := porcupine.CheckOperationsTimeout(linearize.Model(), linearize.History(planted), linCheckTimeout)
			t.Logf("  check of the check, the same history with a stale read planted (%s): %s in %v",
				linearize.Describe(planted[at].Input, planted[at].Output), res, time.Since(start).Round(time.Millisecond))
			if res != porcupine.Illegal {
				t.Errorf("round %d: the history with a stale read planted checks %s, want %s", round, res, porcupine.Illegal)
			}
		}
	}

	shown := 0
	for _, op := range ops {
		if op.Output.Unexpected && shown < 5 {
			t.Errorf("round %d: unexpected answer: %s", round, linearize.Describe(op.Input, op.Output))
			shown++
		}
	}
	for _, s := range pairs.staleReads {
		t.Errorf("round %d: stale cross-replica read: %s", round, s)
	}
	if res != porcupine.Ok {
		path := visualizationPath(t, round)
		if err := linearize.Visualize(path, info, linearize.Span{From: faultAt, To: healed, Description: f.name}); err != nil {
			t.Errorf("round %d: writing the visualization: %v", round, err)
		}
		for _, line := range linearize.Explain(checked, info) {
			t.Logf("  %s", line)
		}
		if res == porcupine.Unknown {
			t.Errorf("round %d (%s): the linearizability check did not finish in %v (Unknown: no pass); history: %s", round, f.name, linCheckTimeout, path)
		} else {
			t.Errorf("round %d (%s): the history is NOT linearizable; porcupine's visualization: %s", round, f.name, path)
		}
	}
	return fmt.Sprintf("round %d, %s: %d ops (%d ok, %d refused, %d indeterminate, %d reads failed), %d s below half the %d/s baseline, %d pairs %d stale, check %s",
		round, f.name, counts.Ops, counts.OK, counts.Refused, counts.Indeterminate, counts.Failed, slow, baseline, pairs.pairs, pairs.stale, res)
}

// visualizationPath is where the visualization of round's history goes: LINEARIZE_OUT, or a new
// temporary folder that outlives the test.
func visualizationPath(t *testing.T, round int) string {
	dir := os.Getenv(envLinOut)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gantry-linearize-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, fmt.Sprintf("%s-round%d.html", time.Now().UTC().Format("20060102T150405"), round))
}

// hotName is the name of hot credential i of round.
func hotName(round, i int) string { return fmt.Sprintf("lin-r%d-hot%d", round, i) }

// createHot creates the round's hot credentials (their history starts at revision 1 with
// linearize.InitialValue) and returns their ids. A create without a definite answer is sent again;
// a 409 then names the credential it made.
func (c *linCluster) createHot(t *testing.T, round int) []string {
	t.Helper()
	setup := &linearize.Client{Base: c.base, Auth: c.auth, HTTP: linHTTP, Rec: linearize.NewRecorder()}
	ids := make([]string, linCredentials)
	for i := range ids {
		name := hotName(round, i)
		testwait.Until(t, "the creation of "+name, func() bool {
			out := setup.Create(context.Background(), name, linearize.InitialValue)
			if out.Result == linearize.OK || out.Reason == linearize.NameTaken {
				ids[i] = out.ID
				return true
			}
			return false
		})
	}
	return ids
}

// runLinClient calls random operations on the hot credentials until stop closes. It remembers the
// last revision it saw of each credential (its If-Match) and the revisions it saw with a value (its
// revert targets). After a write without a definite answer it reads that credential until a read
// is answered before it writes again, as a careful client does (docs/reliability.md): so a fault that
// fails writes at once does not pile up indeterminate writes, each of which the check has to place.
func runLinClient(cl *linearize.Client, ids []string, round int, stop <-chan struct{}) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(round), uint64(cl.ID)))
	last := map[string]int{}
	seen := map[string][]int{}
	saw := func(id string, rev int, withValue bool) {
		last[id] = max(last[id], rev)
		if withValue && !slices.Contains(seen[id], rev) {
			seen[id] = append(seen[id], rev)
		}
	}
	lost := "" // a credential whose last write has no definite answer
	start := time.Now()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		id := ids[rng.IntN(len(ids))]
		if lost != "" {
			id = lost
		}
		var out linearize.Output
		switch p := rng.IntN(100); {
		case lost != "" || p < 40:
			out = cl.Read(ctx, id)
			if out.Result == linearize.OK {
				saw(id, out.Revision, true)
				lost = ""
			}
		case p < 60:
			out = cl.Update(ctx, id, fmt.Sprintf("r%d-c%d-%d", round, cl.ID, seq), 0)
		case p < 80:
			out = cl.Update(ctx, id, fmt.Sprintf("r%d-c%d-%d", round, cl.ID, seq), max(1, last[id]))
		case p < 90:
			to := 1
			if s := seen[id]; len(s) > 0 {
				to = s[rng.IntN(len(s))]
			}
			expect := 0
			if rng.IntN(2) == 0 {
				expect = max(1, last[id])
			}
			out = cl.Revert(ctx, id, to, expect)
		default:
			// The clients that create within the same half second race for one name.
			name := fmt.Sprintf("lin-r%d-race%d", round, time.Since(start)/(500*time.Millisecond))
			if cl.Create(ctx, name, fmt.Sprintf("r%d-c%d-%d", round, cl.ID, seq)).Result == linearize.Indeterminate {
				time.Sleep(20 * time.Millisecond) // as below
			}
			continue
		}
		switch out.Result {
		case linearize.OK:
			saw(id, out.Revision, out.Value != "")
		case linearize.Refused:
			if out.Current != 0 {
				saw(id, out.Current, false)
			}
		case linearize.Indeterminate:
			lost = id
		}
		if out.Result == linearize.Indeterminate || out.Result == linearize.Failed {
			// Not a wait for anything: a client that was not answered does not call again at once.
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// pairStats are the cross-replica read-your-writes pairs of a round.
type pairStats struct {
	pairs, stale, unanswered int
	staleReads               []string
}

// runPairs writes through one replica's gateway and, once the write is answered, reads the
// credential through the other's: the read must see the write's revision or a later one. The
// direction alternates. Both calls are part of the round's history too.
func runPairs(cls [2]*linearize.Client, ids []string, round int, stop <-chan struct{}, s *pairStats) {
	ctx := context.Background()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		w, r := cls[seq%2], cls[1-seq%2]
		id := ids[seq%len(ids)]
		wrote := w.Update(ctx, id, fmt.Sprintf("r%d-pair-%d", round, seq), 0)
		got := r.Read(ctx, id)
		if wrote.Result != linearize.OK {
			time.Sleep(20 * time.Millisecond) // as runLinClient: no call again at once
			continue
		}
		switch {
		case got.Result != linearize.OK:
			s.unanswered++
		case got.Revision < wrote.Revision || (got.Revision == wrote.Revision && got.Value != wrote.Value):
			s.stale++
			s.staleReads = append(s.staleReads, fmt.Sprintf("%s: wrote r%d %s through %s, then read r%d %s through %s",
				id, wrote.Revision, wrote.Value, w.Base, got.Revision, got.Value, r.Base))
			s.pairs++
		default:
			s.pairs++
		}
	}
}
