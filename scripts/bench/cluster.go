package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gantry-dev/gantry/pkg/freeport"
)

// The deployment that outgrew one machine (make bench-peer STORE=etcd): a 3-member etcd cluster, two
// gantry secrets replicas on it and a gantry gateway balancing both, each a process of its own, as
// docker-compose.etcd.yml runs them; against OpenBao's 3-node raft cluster. Everything listens on
// 127.0.0.1 and keeps its data in a folder under the bencher's temporary folder.

// group is the processes of one side of the comparison; stop ends them all, the last started first.
type group struct{ procs []*proc }

func (g *group) add(p *proc) { g.procs = append(g.procs, p) }

func (g *group) pids() []int {
	var out []int
	for _, p := range g.procs {
		out = append(out, p.pid())
	}
	return out
}

func (g *group) stop() {
	for i := len(g.procs) - 1; i >= 0; i-- {
		g.procs[i].stop()
	}
}

// etcdCluster is three etcd members started from bin (make build-etcd's bin/etcd: etcd's own server
// main, built from the etcd module of go.mod), with etcd's defaults but for the addresses: fsync on,
// 100 ms heartbeat, 1 s election timeout.
type etcdCluster struct {
	group
	endpoints []string
	version   string
}

func startEtcdCluster(ctx context.Context, bin, dir string) (*etcdCluster, error) {
	c := &etcdCluster{}
	clientPorts, peerPorts := make([]string, 3), make([]string, 3)
	var peers []string
	for i := range 3 {
		var err error
		if clientPorts[i], err = freeport.Find(); err != nil {
			return nil, err
		}
		if peerPorts[i], err = freeport.Find(); err != nil {
			return nil, err
		}
		peers = append(peers, fmt.Sprintf("etcd-%d=http://%s", i, peerPorts[i]))
	}
	for i := range 3 {
		data, err := os.MkdirTemp(dir, fmt.Sprintf("etcd-%d-", i))
		if err != nil {
			c.stop()
			return nil, err
		}
		client, peer := "http://"+clientPorts[i], "http://"+peerPorts[i]
		// --name comes first: the test binary standing in for etcd recognises it by that.
		p, err := startProc(fmt.Sprintf("etcd-%d", i), bin, filepath.Join(data, "etcd.log"),
			fmt.Sprintf("--name=etcd-%d", i), "--data-dir="+filepath.Join(data, "data"),
			"--listen-client-urls="+client, "--advertise-client-urls="+client,
			"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
			"--initial-cluster="+strings.Join(peers, ","), "--initial-cluster-token=gantry-bench",
			"--initial-cluster-state=new", "--log-level=warn")
		if err != nil {
			c.stop()
			return nil, err
		}
		c.add(p)
		c.endpoints = append(c.endpoints, client)
	}
	// /health is 200 once the member has a leader and serves (a fresh cluster needs a quorum up).
	for i, p := range c.procs {
		if err := p.waitHTTP(ctx, c.endpoints[i]+"/health", http.StatusOK); err != nil {
			c.stop()
			return nil, err
		}
	}
	if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 3 {
			c.version = f[2] // "etcd Version: 3.6.16"
		}
	}
	return c, nil
}

// etcdSettings are how gantry runs on etcd in make bench-peer STORE=etcd.
func etcdSettings(s settings) string {
	return fmt.Sprintf("2 secrets replicas (-target=secrets -store=etcd, one data folder: keyring and keys) and a gateway (-target=gateway, both replicas in its secrets cluster, internal mutual TLS), each its own process; %s", s)
}

// startGantryEtcd starts two secrets replicas on the etcd cluster of endpoints and a gateway in
// front of both, as docker-compose.etcd.yml does: the replicas share one data folder (the keyring,
// the session key, the JWT keys and the internal CA); the first replica creates them, and the second
// and the gateway start once it serves.
func startGantryEtcd(ctx context.Context, bin, dir string, endpoints []string, s settings) (*gantry, *group, error) {
	shared, err := os.MkdirTemp(dir, "gantry-replicas-")
	if err != nil {
		return nil, nil, err
	}
	tlsDir := filepath.Join(shared, "tls")
	grp := &group{}
	fail := func(err error) (*gantry, *group, error) {
		grp.stop()
		return nil, nil, err
	}
	var replicas []string
	for i := range 2 {
		listen, err := freeport.Find()
		if err != nil {
			return fail(err)
		}
		stats, err := freeport.Find()
		if err != nil {
			return fail(err)
		}
		args := []string{"serve", "-target=secrets", "-data-dir=" + shared, "-kms=local", "-grpc-tls-dir=" + tlsDir,
			"-secrets-listen=" + listen, "-stats-listen=" + stats,
			"-store=etcd", "-etcd-endpoints=" + strings.Join(endpoints, ","), "-etcd-prefix=/gantry-bench/"}
		if s.writeLimit != "" {
			args = append(args, "-write-rate="+s.writeLimit)
		}
		p, err := startProc(fmt.Sprintf("gantry secrets replica %d", i), bin, filepath.Join(shared, fmt.Sprintf("secrets-%d.log", i)), args...)
		if err != nil {
			return fail(err)
		}
		grp.add(p)
		if err := p.waitHTTP(ctx, "http://"+stats+"/ready", http.StatusOK); err != nil {
			return fail(err)
		}
		replicas = append(replicas, listen)
	}
	gwData, err := os.MkdirTemp(dir, "gantry-gateway-")
	if err != nil {
		return fail(err)
	}
	ports := make([]string, 3)
	for i := range ports {
		if ports[i], err = freeport.Find(); err != nil {
			return fail(err)
		}
	}
	// The access log is on by default (stdout): off is said explicitly, as in startGantry.
	accessLog := "off"
	if s.accessLog {
		accessLog = filepath.Join(gwData, "access.log")
	}
	p, err := startProc("gantry gateway", bin, filepath.Join(gwData, "gateway.log"), "serve", "-target=gateway",
		"-data-dir="+gwData, "-grpc-tls-dir="+tlsDir, "-secrets-upstream="+strings.Join(replicas, ","),
		"-gateway-listen="+ports[0], "-admin-listen="+ports[1], "-admin-grpc-listen="+ports[2],
		"-health-check-interval=1s", "-access-log="+accessLog)
	if err != nil {
		return fail(err)
	}
	grp.add(p)
	g := &gantry{proc: p, rest: "http://" + ports[0], admin: "http://" + ports[1]}
	if err := p.waitHTTP(ctx, g.admin+"/ready", http.StatusOK); err != nil {
		return fail(err)
	}
	for _, t := range []struct {
		user string
		into *string
	}{{"bench", &g.auth}, {"bench-setup", &g.setupAuth}} {
		out, err := exec.CommandContext(ctx, bin, "token", "--data-dir", shared, "--from", t.user, "--user-type", "user", "--lifetime", "1h", "--basic").Output()
		if err != nil {
			return fail(fmt.Errorf("gantry token: %w", err))
		}
		*t.into = "Basic " + base64.StdEncoding.EncodeToString([]byte(strings.TrimSpace(string(out))))
	}
	// Both replicas serve before any figure is taken: the gateway's health checks see them healthy.
	if err := waitBothHealthy(ctx, g, replicas); err != nil {
		return fail(err)
	}
	return g, grp, nil
}

// waitBothHealthy polls the gateway's /clusters until every replica is a healthy host of its secrets
// cluster (Envoy's format: one "secrets::HOST::health_flags::healthy" line per healthy host).
func waitBothHealthy(ctx context.Context, g *gantry, replicas []string) error {
	return g.poll(ctx, "both replicas healthy in the gateway's secrets cluster", func() bool {
		resp, err := http.Get(g.admin + "/clusters")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.WriteString(string(buf[:n]))
			if err != nil {
				break
			}
		}
		for _, r := range replicas {
			if !strings.Contains(b.String(), "secrets::"+r+"::health_flags::healthy") {
				return false
			}
		}
		return true
	})
}

// openBaoCluster is OpenBao's 3-node raft cluster: node 0 is initialised and unsealed (one key
// share) and becomes the active node; nodes 1 and 2 join its raft cluster (the raft join API) and are
// unsealed with the same key, becoming standbys. Clients talk to the active node (ob.addr).
type openBaoCluster struct {
	*openBao
	group
	audit string // the audit log file; "" without an audit device
}

// startOpenBaoCluster starts the three nodes in new folders under dir. With audit, every node's
// configuration declares a file audit device (OpenBao's declarative audit stanza: its API refuses to
// create audit devices unless unsafe_allow_api_audit_creation is set) writing to one file, which only
// the active node writes.
func startOpenBaoCluster(ctx context.Context, bin, dir string, audit bool) (*openBaoCluster, error) {
	c := &openBaoCluster{}
	base, err := os.MkdirTemp(dir, "openbao-cluster-")
	if err != nil {
		return nil, err
	}
	if audit {
		c.audit = filepath.Join(base, "audit.log")
	}
	var nodes []*openBao
	for i := range 3 {
		ob, err := startOpenBaoNode(ctx, bin, base, i, c.audit)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.add(ob.proc)
		nodes = append(nodes, ob)
	}
	c.openBao = nodes[0]
	key, err := c.setUp(ctx)
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("set up OpenBao: %w (its log: %s)\n%s", err, c.log, tail(c.log))
	}
	for _, n := range nodes[1:] {
		if err := n.call(ctx, http.MethodPost, "/v1/sys/storage/raft/join", "", map[string]any{"leader_api_addr": c.addr}, nil); err != nil {
			c.stop()
			return nil, fmt.Errorf("raft join: %w (its log: %s)\n%s", err, n.log, tail(n.log))
		}
		if err := n.call(ctx, http.MethodPut, "/v1/sys/unseal", "", map[string]any{"key": key}, nil); err != nil {
			c.stop()
			return nil, fmt.Errorf("unseal a follower: %w (its log: %s)\n%s", err, n.log, tail(n.log))
		}
		// A standby answers its health check with 429 once unsealed and in the cluster.
		if err := n.waitHTTP(ctx, n.addr+"/v1/sys/health", http.StatusTooManyRequests); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// startOpenBaoNode starts node i of a raft cluster in a folder of its own under base, and waits
// until it answers (uninitialised: 501).
func startOpenBaoNode(ctx context.Context, bin, base string, i int, auditFile string) (*openBao, error) {
	data := filepath.Join(base, fmt.Sprintf("node-%d", i))
	configPath, api, err := writeOpenBaoConfig(data, fmt.Sprintf("bench-%d", i), auditFile)
	if err != nil {
		return nil, err
	}
	p, err := startProc(fmt.Sprintf("openbao node %d", i), bin, filepath.Join(data, "openbao.log"), "server", "-config="+configPath)
	if err != nil {
		return nil, err
	}
	ob := &openBao{proc: p, addr: "http://" + api}
	if err := p.waitHTTP(ctx, ob.addr+"/v1/sys/health", http.StatusNotImplemented); err != nil {
		p.stop()
		return nil, err
	}
	return ob, nil
}

// baoSettings are how OpenBao runs in a row of the table.
func baoSettings(nodes int, audit bool) string {
	storage := "raft storage"
	if nodes > 1 {
		storage = fmt.Sprintf("raft storage, %d nodes: one active, the others standbys, the load to the active node", nodes)
	}
	a := "no audit device"
	if audit {
		a = "a file audit device"
	}
	return fmt.Sprintf("server, %s, KV v2, a policy token, %s", storage, a)
}

// writeOpenBaoConfig writes the configuration of an OpenBao server with raft storage under data (made
// if absent) on two free loopback ports, with a file audit device when auditFile is set, and returns
// the file's path and the API's address.
func writeOpenBaoConfig(data, nodeID, auditFile string) (configPath, api string, err error) {
	if err := os.MkdirAll(filepath.Join(data, "raft"), 0o700); err != nil {
		return "", "", err
	}
	if api, err = freeport.Find(); err != nil {
		return "", "", err
	}
	cluster, err := freeport.Find()
	if err != nil {
		return "", "", err
	}
	config := fmt.Sprintf(`storage "raft" {
  path    = %q
  node_id = %q
}
listener "tcp" {
  address         = %q
  cluster_address = %q
  tls_disable     = true
}
api_addr      = "http://%s"
cluster_addr  = "https://%s"
disable_mlock = true
ui            = false
`, filepath.Join(data, "raft"), nodeID, api, cluster, api, cluster)
	if auditFile != "" {
		config += fmt.Sprintf(`audit "file" "file" {
  options {
    file_path = %q
  }
}
`, auditFile)
	}
	configPath = filepath.Join(data, "config.hcl")
	return configPath, api, os.WriteFile(configPath, []byte(config), 0o600)
}
