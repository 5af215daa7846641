// Package etcdtest runs real etcd servers inside a test process (go.etcd.io/etcd/server/v3/embed), on
// loopback ports with their data in temporary folders, for the etcd store's conformance tests and the
// multi-replica end-to-end tests. Servers are tuned to start fast (short raft ticks, no fsync): they
// are for tests only.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/faultnet"
	"github.com/gantry-dev/gantry/pkg/freeport"
)

// readyTimeout bounds how long a cluster may take to elect a leader; generous, because the machine
// may be loaded (race detector, parallel builds).
const readyTimeout = 60 * time.Second

// Cluster is a running set of embedded etcd members. Each member's peer traffic goes through a
// faultnet proxy (the member advertises the proxy's URL), so that a test can cut one member off from
// its peers while clients still reach it (PartitionPeers).
type Cluster struct {
	members []*Member
	// peerProxies[i] stands in front of member i's peer listener.
	peerProxies []*faultnet.Proxy
}

// Member is one embedded etcd server.
type Member struct {
	Name      string
	ClientURL string
	etcd      *embed.Etcd
	stopOnce  sync.Once
	// cfg is the configuration the member started with, for Restart.
	cfg embed.Config
	mu  sync.Mutex
}

// Endpoints returns the client URLs of every member, stopped ones included (clients skip those).
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.ClientURL
	}
	return out
}

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Close stops every member.
func (c *Cluster) Close() {
	for _, m := range c.members {
		m.Stop()
	}
	for _, p := range c.peerProxies {
		_ = p.Close()
	}
}

// PartitionPeers cuts member i off from its peers, both ways, while its clients still reach it: the
// connections to its peer listener are closed and refused, and so are its raft connections to the
// others (told apart by their X-Server-From header). Its requests forwarded outside raft (lease
// renewals, /version) still get through. HealPeers ends the partition.
func (c *Cluster) PartitionPeers(i int) {
	id := c.members[i].id()
	c.peerProxies[i].CutAll()
	for j, p := range c.peerProxies {
		if j != i {
			p.Cut(id)
		}
	}
}

// HealPeers ends PartitionPeers(i).
func (c *Cluster) HealPeers(i int) {
	id := c.members[i].id()
	c.peerProxies[i].HealAll()
	for j, p := range c.peerProxies {
		if j != i {
			p.Heal(id)
		}
	}
}

// Leader returns the index of the member that is leader in the newest term, as the members report
// it; -1 when none is.
func (c *Cluster) Leader() int {
	leader, term := -1, uint64(0)
	for i, m := range c.members {
		m.mu.Lock()
		e := m.etcd
		m.mu.Unlock()
		if e.Server.Leader() == e.Server.MemberID() && e.Server.Term() > term {
			leader, term = i, e.Server.Term()
		}
	}
	return leader
}

// id is the member's ID as its peers name it (hex).
func (m *Member) id() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd.Server.MemberID().String()
}

// Stop stops the member (a crash as far as the others can tell); it is idempotent.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopOnce.Do(func() { m.etcd.Close() })
}

// Restart starts a stopped member again on its data folder and ports, and waits until it is ready
// (it rejoins its cluster, which needs a quorum of members running with it).
func (m *Member) Restart() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cfg := m.cfg
	cfg.ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(&cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: restart member %s: %w", m.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdtest: member %s: %w", m.Name, err)
	case <-time.After(readyTimeout):
		e.Close()
		return errors.New("etcdtest: restarted member " + m.Name + " not ready within " + readyTimeout.String())
	}
	m.etcd, m.stopOnce = e, sync.Once{}
	return nil
}

// Option adjusts the members' configuration.
type Option func(*embed.Config)

// Durable keeps etcd's fsync on every commit (the tests' default turns it off), for benchmarks that
// compare etcd with a durable store.
func Durable() Option {
	return func(cfg *embed.Config) { cfg.UnsafeNoFsync = false }
}

// ClientTLS serves the members' client URLs over TLS (https) with the certificate and key given;
// with caFile set they also require a client certificate signed by it.
func ClientTLS(certFile, keyFile, caFile string) Option {
	return func(cfg *embed.Config) {
		for _, urls := range [][]url.URL{cfg.ListenClientUrls, cfg.AdvertiseClientUrls} {
			for i := range urls {
				urls[i].Scheme = "https"
			}
		}
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = certFile, keyFile
		if caFile != "" {
			cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = caFile, true
		}
	}
}

// Start runs a cluster of n members in subfolders of dir and waits until it has a leader. The
// caller must Close it (tests: see New). logger receives the servers' errors only.
func Start(dir string, n int, logger *zap.Logger, opts ...Option) (*Cluster, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	// Ports are picked by binding :0 and releasing them; a port taken again in between fails the
	// start, which is retried with fresh ports.
	var lastErr error
	for range 3 {
		c, err := start(dir, n, logger, opts)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(dir string, n int, logger *zap.Logger, opts []Option) (*Cluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	// ports: member i's client port 3i, peer listener 3i+1, peer proxy 3i+2 (advertised).
	peers := make([]string, n)
	for i := range n {
		peers[i] = fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[3*i+2])
	}
	c := &Cluster{}
	for i := range n {
		p, err := faultnet.Listen(fmt.Sprintf("127.0.0.1:%d", ports[3*i+2]), fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]), faultnet.WithTagger(faultnet.TagEtcdPeer))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: peer proxy: %w", err)
		}
		c.peerProxies = append(c.peerProxies, p)
	}
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, fmt.Sprintf("etcd-%s-%d", cfg.Name, ports[3*i]))
		client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i])}
		peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])}
		advertisedPeer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{advertisedPeer}
		cfg.InitialCluster = strings.Join(peers, ",")
		cfg.InitialClusterToken = "gantry-test"
		cfg.ClusterState = embed.ClusterStateFlagNew
		// Fast elections on loopback; a single member elects itself after one election timeout.
		cfg.TickMs, cfg.ElectionMs = 20, 400
		if n == 1 {
			cfg.TickMs, cfg.ElectionMs = 10, 50
		}
		cfg.UnsafeNoFsync = true
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger.Named(cfg.Name).WithOptions(zap.IncreaseLevel(zap.ErrorLevel)))
		for _, opt := range opts {
			opt(cfg)
		}
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: start member %s: %w", cfg.Name, err)
		}
		c.members = append(c.members, &Member{Name: cfg.Name, ClientURL: cfg.AdvertiseClientUrls[0].String(), etcd: e, cfg: *cfg})
	}
	deadline := time.After(readyTimeout)
	for _, m := range c.members {
		select {
		case <-m.etcd.Server.ReadyNotify():
		case err := <-m.etcd.Err():
			c.Close()
			return nil, fmt.Errorf("etcdtest: member %s: %w", m.Name, err)
		case <-deadline:
			c.Close()
			return nil, errors.New("etcdtest: cluster not ready within " + readyTimeout.String())
		}
	}
	return c, nil
}

// New starts a cluster of n members for a test or benchmark, in t.TempDir(), closed at cleanup.
func New(t testing.TB, n int, logger *zap.Logger, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(t.TempDir(), n, logger, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// freePorts returns n distinct free loopback ports, outside the ephemeral range that outgoing
// connections draw from, so none is taken before etcd binds it (pkg/freeport).
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range n {
		addr, err := freeport.Find()
		if err != nil {
			return nil, err
		}
		_, p, _ := net.SplitHostPort(addr)
		if ports[i], err = strconv.Atoi(p); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// Restore starts a one-member cluster in a subfolder of dir from an etcd snapshot (as
// `etcdutl snapshot restore` then `etcd` do: the snapshot's SHA-256 is verified, the membership is
// rewritten for the new member), and waits until it has a leader.
func Restore(dir, snapshotPath string, logger *zap.Logger) (*Cluster, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	var restoreErr error
	c, err := start(dir, 1, logger, []Option{func(cfg *embed.Config) {
		restoreErr = snapshot.NewV3(logger).Restore(snapshot.RestoreConfig{
			SnapshotPath:        snapshotPath,
			Name:                cfg.Name,
			OutputDataDir:       cfg.Dir,
			PeerURLs:            []string{cfg.AdvertisePeerUrls[0].String()},
			InitialCluster:      cfg.InitialCluster,
			InitialClusterToken: cfg.InitialClusterToken,
		})
	}})
	if restoreErr != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("etcdtest: restore %s: %w", snapshotPath, restoreErr)
	}
	return c, err
}

// NewRestored is Restore for a test, in t.TempDir(), closed at cleanup.
func NewRestored(t testing.TB, snapshotPath string, logger *zap.Logger) *Cluster {
	t.Helper()
	c, err := Restore(t.TempDir(), snapshotPath, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
