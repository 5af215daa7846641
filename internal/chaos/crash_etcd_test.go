package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/faultnet"
	"github.com/gantry-dev/gantry/services/secrets/store/etcdstore"
)

const (
	// envMemberConfig makes the test binary an etcd member: the JSON of a memberConfig.
	envMemberConfig = "GANTRY_CRASH_ETCD_MEMBER"
	// chaosEtcdPrefix is the key prefix of the crash test's store.
	chaosEtcdPrefix = "/chaos/"
	// etcdWait bounds every wait on the cluster (a member restarting, a leader election, members
	// catching up); generous, because the machine is shared and may run the race detector.
	etcdWait = 60 * time.Second
)

// memberConfig is what an etcd member child needs: the same on every restart, so a killed member
// comes back as itself on its own data folder and ports.
type memberConfig struct {
	Name, Dir, ReadyFile string
	ClientPort, PeerPort int
	// AdvertisePeerPort is the port of the member's peer proxy (a pkg/faultnet proxy in the test
	// process in front of PeerPort), which its peers dial: a test can cut it off from them.
	AdvertisePeerPort int
	InitialCluster    string
}

// TestEtcdMemberChild is not a test: it is one etcd member the etcd crash test kills. It serves its
// data folder until killed and writes its ready file once it has joined the cluster.
func TestEtcdMemberChild(t *testing.T) {
	raw := os.Getenv(envMemberConfig)
	if raw == "" {
		t.Skip("only runs as a member of TestCrashDurabilityEtcd")
	}
	var mc memberConfig
	if err := json.Unmarshal([]byte(raw), &mc); err != nil {
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(3)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = mc.Name, mc.Dir
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", mc.ClientPort)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", mc.PeerPort)}
	advertisedPeer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", mc.AdvertisePeerPort)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{advertisedPeer}
	// On a restart the member's WAL wins and these two are ignored, as with a real etcd.
	cfg.InitialCluster = mc.InitialCluster
	cfg.InitialClusterToken = "gantry-chaos"
	cfg.ClusterState = embed.ClusterStateFlagNew
	// Fsync stays on (etcd's default): the test is about durability, so the members run the way
	// production ones do. Elections are quicker than etcd's 100/1000 ms so a killed leader is
	// replaced within the cycle, but not so quick that a loaded machine keeps electing.
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd member: start:", err)
		os.Exit(3)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd member:", err)
		os.Exit(3)
	}
	if err := os.WriteFile(mc.ReadyFile+".tmp", nil, 0o600); err != nil {
		os.Exit(4)
	}
	if err := os.Rename(mc.ReadyFile+".tmp", mc.ReadyFile); err != nil {
		os.Exit(4)
	}
	err = <-e.Err()
	fmt.Fprintln(os.Stderr, "etcd member:", err)
	os.Exit(5)
}

// member is one etcd member child process: its configuration and, while it runs, its process.
type member struct {
	cfg      memberConfig
	endpoint string
	// peerProxy stands in front of the member's peer listener (partitionPeers).
	peerProxy *faultnet.Proxy
	cmd       *exec.Cmd
	exited    chan struct{} // closed once the process is reaped
	stderr    *bytes.Buffer
}

// start re-executes the test binary as the member; wait for it with waitReady (a fresh cluster only
// becomes ready once a quorum runs, so all members start before any is waited for).
func (m *member) start(t *testing.T) {
	t.Helper()
	_ = os.Remove(m.cfg.ReadyFile)
	raw, err := json.Marshal(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(os.Args[0], "-test.run=^TestEtcdMemberChild$", "-test.count=1")
	m.cmd.Env = append(os.Environ(), envMemberConfig+"="+string(raw))
	m.stderr = &bytes.Buffer{}
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	m.exited = exited
	cmd := m.cmd
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
}

func (m *member) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.After(etcdWait)
	for {
		if _, err := os.Stat(m.cfg.ReadyFile); err == nil {
			return
		}
		select {
		case <-m.exited:
			t.Fatalf("etcd member %s exited before serving: %v\n%s", m.cfg.Name, m.cmd.ProcessState, m.stderr)
		case <-deadline:
			t.Fatalf("etcd member %s not ready within %v", m.cfg.Name, etcdWait)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (m *member) kill(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	<-m.exited
}

// startMembers starts a 3-member cluster of child processes with their data under dir.
func startMembers(t *testing.T, dir string) []*member {
	t.Helper()
	// Member i: client port 3i, peer listener 3i+1, peer proxy 3i+2 (advertised to its peers).
	ports := freeLoopbackPorts(t, 9)
	peers := make([]string, 3)
	for i := range peers {
		peers[i] = fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[3*i+2])
	}
	ms := make([]*member, 3)
	for i := range ms {
		proxy, err := faultnet.Listen(fmt.Sprintf("127.0.0.1:%d", ports[3*i+2]), fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]),
			faultnet.WithTagger(faultnet.TagEtcdPeer))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		ms[i] = &member{
			cfg: memberConfig{
				Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
				ReadyFile:  filepath.Join(dir, fmt.Sprintf("m%d.ready", i)),
				ClientPort: ports[3*i], PeerPort: ports[3*i+1], AdvertisePeerPort: ports[3*i+2], InitialCluster: strings.Join(peers, ","),
			},
			endpoint:  fmt.Sprintf("http://127.0.0.1:%d", ports[3*i]),
			peerProxy: proxy,
		}
		ms[i].start(t)
	}
	for _, m := range ms {
		m.waitReady(t)
	}
	return ms
}

// partitionPeers cuts member victim off from its peers, both ways, while clients still reach it (as
// etcdtest.Cluster.PartitionPeers does): its own peer proxy closes and refuses every connection, the
// others' close and refuse its raft connections (told apart by X-Server-From, its member ID). It
// returns the heal.
func partitionPeers(t *testing.T, statusCli *clientv3.Client, ms []*member, victim *member) (heal func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), etcdWait)
	defer cancel()
	st, err := statusCli.Status(ctx, victim.endpoint)
	if err != nil {
		t.Fatalf("member ID of %s: %v", victim.cfg.Name, err)
	}
	id := strconv.FormatUint(st.Header.MemberId, 16)
	victim.peerProxy.CutAll()
	for _, m := range ms {
		if m != victim {
			m.peerProxy.Cut(id)
		}
	}
	return func() {
		victim.peerProxy.HealAll()
		for _, m := range ms {
			if m != victim {
				m.peerProxy.Heal(id)
			}
		}
	}
}

// freeLoopbackPorts picks n free loopback ports (bound together, then released). Members keep their
// ports across restarts, so they are chosen once here.
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// What a cycle kills.
const (
	killGantry = iota
	killMember
	killBoth
)

var killNames = [...]string{"gantry", "etcd member", "gantry and an etcd member"}

// TestCrashDurabilityEtcd is TestCrashDurability on the etcd backend: a 3-member cluster of child
// processes and a gantry child on -store=etcd. Each cycle drives concurrent credential updates
// through the gateway and SIGKILLs, in turn, the gantry process, one etcd member (picked at random),
// or both, at a random moment; what was killed restarts. Then every acknowledged update must be in
// etcd with its value, every revision chain complete (1..N) and decryptable, the members must agree
// on the data (same KV hash at the same revision) and raise no alarm, and the store must open cleanly
// (its schema check) and serve every acknowledged revision through the restarted gateway.
func TestCrashDurabilityEtcd(t *testing.T) {
	if os.Getenv(envChildDataDir) != "" || os.Getenv(envMemberConfig) != "" {
		t.Skip("child process")
	}
	cycles := chaosCycles(t, 4, 3)
	start := time.Now()
	dataDir := filepath.Join(t.TempDir(), "data")
	members := startMembers(t, t.TempDir())
	endpoints := make([]string, len(members))
	for i, m := range members {
		endpoints[i] = m.endpoint
	}
	// statusCli only asks members whether they lead, to count the kills of a leader.
	statusCli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: etcdWait, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer statusCli.Close()
	childEnv := envChildEtcd + "=" + strings.Join(endpoints, ",")
	const creds, writersPerCred = 4, 3

	c := startChild(t, dataDir, childEnv)
	auth := userAuth(t, dataDir)
	ids, acked := createCrashCredentials(t, c.rest, auth, "crash-etcd", creds)
	load := &crashLoad{acked: acked, refusalsExpected: true}
	kills, leaderKills := [3]int{}, 0
	first := rand.IntN(3) // the kinds rotate from a random one, so any 3 cycles cover all three
	for cycle := range cycles {
		kind := (first + cycle) % 3
		kills[kind]++
		// Writers update until stopped or until the gantry process dies under them. A 503 is the
		// cluster electing a new leader after a member died: refused, not acknowledged, retried.
		stop := make(chan struct{})
		wg := load.run(t, c.rest, auth, ids, writersPerCred, cycle, stop, fmt.Sprintf("cycle %d (%s)", cycle, killNames[kind]))
		time.Sleep(time.Duration(20+rand.IntN(300)) * time.Millisecond)
		victim := members[rand.IntN(len(members))]
		if kind != killGantry && isLeader(t, statusCli, victim.endpoint) {
			leaderKills++
		}
		switch kind {
		case killGantry:
			c.kill(t)
		case killMember:
			victim.kill(t)
			// Writes go on against the two members left (a quorum) for a while before stopping.
			time.Sleep(time.Duration(20+rand.IntN(300)) * time.Millisecond)
		case killBoth:
			victim.kill(t)
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
			c.kill(t)
		}
		close(stop)
		wg.Wait()
		if t.Failed() {
			return
		}

		if kind != killGantry {
			victim.start(t)
			victim.waitReady(t)
		}
		// The store, read directly from the cluster with the gantry process dead or idle: it opens
		// (the schema check), holds every acknowledged update, and the members agree.
		store, err := etcdstore.Open(context.Background(), etcdstore.Options{
			Endpoints: endpoints, Prefix: chaosEtcdPrefix, DialTimeout: etcdWait, RequestTimeout: etcdWait,
			MaxRequestBytes: etcdstore.DefaultOptions().MaxRequestBytes,
		}, zap.NewNop())
		if err != nil {
			t.Fatalf("cycle %d (%s): the etcd store does not open: %v", cycle, killNames[kind], err)
		}
		checkStoreChains(t, store, dataDir, acked)
		_ = store.Close()
		checkMembersAgree(t, endpoints)

		if kind != killMember {
			c = startChild(t, dataDir, childEnv)
		}
		for _, id := range ids {
			r := readRecovered(t, c.rest, auth, "/v1/credentials/"+id)
			if r.code != 200 {
				t.Fatalf("cycle %d (%s): read %s after restart: %d %s", cycle, killNames[kind], id, r.code, r.body)
			}
			if rev := int(r.json["revision"].(float64)); rev < maxRevision(acked[id]) {
				t.Fatalf("cycle %d (%s): %s at revision %d after restart, but revision %d was acknowledged", cycle, killNames[kind], id, rev, maxRevision(acked[id]))
			}
		}
	}
	c.kill(t)
	msg := fmt.Sprintf("crash durability on etcd: %d SIGKILL cycles (gantry %d, etcd member %d, both %d; %d of the members killed were the leader), %d acknowledged updates kept, %d refused with 503 while the cluster recovered, %d requests cut by the kills, %d credentials, 3 members, %v",
		cycles, kills[killGantry], kills[killMember], kills[killBoth], leaderKills, load.acknowledged, load.refused, load.cut, creds, time.Since(start).Round(time.Millisecond))
	if os.Getenv(envCycles) != "" {
		fmt.Println(msg)
	} else {
		t.Log(msg)
	}
}

// isLeader reports whether the member at endpoint is the cluster's leader (false when it cannot tell).
func isLeader(t *testing.T, cli *clientv3.Client, endpoint string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	return err == nil && st.Leader == st.Header.MemberId
}

// readRecovered reads path, again while it answers 503 (the gateway's health check may still hold
// the secrets host down after the cluster recovered), until a deadline.
func readRecovered(t *testing.T, base, auth, path string) reply {
	t.Helper()
	deadline := time.Now().Add(etcdWait)
	for {
		r := request(t, base, auth, "GET", path, nil)
		if r.code != 503 || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkMembersAgree waits (with a deadline) until every member has applied the same revision, then
// requires the same KV hash of each at that revision (what etcd's own corruption check compares)
// and no alarm (NOSPACE, CORRUPT) on the cluster.
func checkMembersAgree(t *testing.T, endpoints []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), etcdWait)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: etcdWait, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(alarms.Alarms) > 0 {
		t.Fatalf("etcd alarms after the restart: %v", alarms.Alarms)
	}
	for {
		revs := make([]int64, len(endpoints))
		for i, ep := range endpoints {
			st, err := cli.Status(ctx, ep)
			if err != nil {
				t.Fatalf("status of %s: %v", ep, err)
			}
			revs[i] = st.Header.Revision
		}
		if revs[0] == revs[1] && revs[1] == revs[2] {
			var hashes []uint32
			for _, ep := range endpoints {
				h, err := cli.HashKV(ctx, ep, revs[0])
				if err != nil {
					t.Fatalf("hash of %s: %v", ep, err)
				}
				hashes = append(hashes, h.Hash)
			}
			if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
				t.Fatalf("members disagree at revision %d: KV hashes %v", revs[0], hashes)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("members did not reach the same revision within %v: %v", etcdWait, revs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
