package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/internal/benchload"
)

// runPeer is make bench-peer: the read and write workloads against gantry and OpenBao in turn,
// interleaved over rounds, and the ratio of each round. Without an OpenBao binary it says how to get
// one and exits 0: the comparison is optional, never a failure.
//
// -store bolt (the default) is one gantry process on bbolt against one OpenBao node without audit.
// -store etcd is the deployment that outgrew one machine: a 3-member etcd cluster, two secrets
// replicas and a gateway (cluster.go) against two OpenBao 3-node raft clusters, one with a file
// audit device and one without; each round runs every workload against the three in turn, and a
// table per OpenBao cluster compares gantry's figures with its own.
func runPeer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench peer", flag.ContinueOnError)
	o := addOptions(fs, 3)
	// make bench-peer passes its BAO (from the environment or the command line) as -bao.
	bao := fs.String("bao", "", "the OpenBao binary (make bench-peer: BAO)")
	store := fs.String("store", "bolt", "gantry's store: bolt (one process) or etcd (3 etcd members, 2 secrets replicas, a gateway; against OpenBao's 3-node raft cluster)")
	etcdBin := fs.String("etcd", "bin/etcd", "with -store etcd: the etcd server binary (make build-etcd's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store != "bolt" && *store != "etcd" {
		return fmt.Errorf("-store %q: bolt or etcd", *store)
	}
	if *bao == "" {
		fmt.Fprintln(stdout, "bench-peer: skipped: no OpenBao binary. Build one (docs/performance.md, \"Side by side with OpenBao\") and run BAO=/path/to/bao make bench-peer.")
		return nil
	}
	if info, err := os.Stat(*bao); err != nil || info.IsDir() {
		fmt.Fprintf(stdout, "bench-peer: skipped: BAO=%s is not a file (%v). Build OpenBao (docs/performance.md, \"Side by side with OpenBao\") and point BAO at the binary.\n", *bao, err)
		return nil
	}
	b, err := newBencher(o, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	s := settings{writeLimit: "0"}
	var (
		g          *gantry
		gantryPIDs []int
		// parts split gantry's CPU by process kind (STORE=etcd): where a request's CPU goes.
		parts      []cpuPart
		gantryDesc string
		peers      []*peerSide
	)
	if *store == "etcd" {
		if _, err := os.Stat(*etcdBin); err != nil {
			return fmt.Errorf("no etcd binary at %s (make build-etcd makes it): %w", *etcdBin, err)
		}
		etcd, err := startEtcdCluster(ctx, *etcdBin, b.dir)
		if err != nil {
			return err
		}
		defer etcd.stop()
		var replicas *group
		g, replicas, err = startGantryEtcd(ctx, o.gantryBin, b.dir, etcd.endpoints, s)
		if err != nil {
			return err
		}
		defer replicas.stop()
		gantryPIDs = append(replicas.pids(), etcd.pids()...)
		rp := replicas.pids()
		parts = []cpuPart{{name: "gateway", pids: rp[2:]}, {name: "2 secrets replicas", pids: rp[:2]}, {name: "3 etcd members", pids: etcd.pids()}}
		gantryDesc = fmt.Sprintf("gantry on etcd (serve -kms local; %s; a 3-member etcd %s cluster, etcd's defaults: fsync on, 100 ms heartbeat, 1 s election; CPU per request: the gateway, both replicas and the 3 members)",
			etcdSettings(s), etcd.version)
		for _, audit := range []bool{true, false} {
			ob, err := startOpenBaoCluster(ctx, *bao, b.dir, audit)
			if err != nil {
				return err
			}
			defer ob.stop()
			w, err := b.baoWorkloads(ob.openBao)
			if err != nil {
				return err
			}
			peers = append(peers, &peerSide{settings: baoSettings(3, audit) + "; CPU per request: the 3 nodes", pids: ob.pids(), work: w})
		}
	} else {
		g, err = startGantry(ctx, o.gantryBin, o.repo, b.dir, s)
		if err != nil {
			return err
		}
		defer g.stop()
		gantryPIDs = []int{g.pid()}
		gantryDesc = fmt.Sprintf("gantry (serve -kms local, bbolt, %s)", s)
		ob, err := startOpenBao(ctx, *bao, b.dir)
		if err != nil {
			return err
		}
		defer ob.stop()
		w, err := b.baoWorkloads(ob)
		if err != nil {
			return err
		}
		peers = append(peers, &peerSide{settings: "server, raft storage, KV v2, a policy token, audit off", pids: []int{ob.pid()}, work: w})
	}
	gw, err := b.gantryWorkloads(g)
	if err != nil {
		return err
	}
	fsync, err := benchload.FsyncRate(b.dir, o.fsyncTime)
	if err != nil {
		return err
	}
	baoVersion := "unknown"
	if out, err := exec.CommandContext(ctx, *bao, "version").Output(); err == nil {
		baoVersion = strings.TrimSpace(string(out))
	}
	gantryVersion, _ := exec.Command(o.gantryBin, "version").Output()
	load0 := loadAvg()
	gantryResults := map[string][]benchload.Result{}
	var order []string
	per := o.duration
	run := func(w workload, pids []int, d time.Duration) (benchload.Result, error) {
		return benchload.Run(ctx, b.client, benchload.Options{Conns: w.conns, Duration: d, PIDs: pids}, w.req)
	}
	for round := range o.rounds {
		for _, w := range gw {
			if _, ok := peers[0].work[w.name]; !ok {
				continue
			}
			if round == 0 {
				order = append(order, w.name)
				if _, err := run(w, nil, o.warmup); err != nil {
					return err
				}
				for _, p := range peers {
					if _, err := run(p.work[w.name], nil, o.warmup); err != nil {
						return err
					}
				}
			}
			fmt.Fprintf(stderr, "bench-peer: round %d: %s\n", round+1, w.name)
			before := partsCPU(parts)
			gr, err := run(w, gantryPIDs, per)
			if err != nil {
				return err
			}
			for i, c := range partsCPU(parts) {
				parts[i].add(w.name, c-before[i], gr.OK)
			}
			gantryResults[w.name] = append(gantryResults[w.name], gr)
			for _, p := range peers {
				br, err := run(p.work[w.name], p.pids, per)
				if err != nil {
					return err
				}
				if p.results == nil {
					p.results = map[string][]benchload.Result{}
				}
				p.results[w.name] = append(p.results[w.name], br)
			}
		}
	}
	for i, p := range peers {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s against OpenBao (%s), each its own process;\n", gantryDesc, p.settings)
		fmt.Fprintf(stdout, "load from this process, %v per workload and server, %d rounds interleaved. %d CPUs; load average %s at the start, %s at the end; raw fdatasync rate %s/s.\n",
			per, o.rounds, runtime.NumCPU(), load0, loadAvg(), num(fsync))
		fmt.Fprintf(stdout, "%s; %s.\n\n", strings.TrimSpace(string(gantryVersion)), strings.ReplaceAll(baoVersion, "\n", " "))
		printPeerTable(stdout, order, gantryResults, p.results)
	}
	if len(parts) > 0 {
		fmt.Fprintln(stdout, "\ngantry's CPU per successful request by process, all rounds (µs):")
		fmt.Fprintln(stdout)
		header, rule := "| workload |", "|---|"
		for _, p := range parts {
			header, rule = header+" "+p.name+" |", rule+"---:|"
		}
		fmt.Fprintln(stdout, header)
		fmt.Fprintln(stdout, rule)
		for _, name := range order {
			line := "| " + name + " |"
			for _, p := range parts {
				line += fmt.Sprintf(" %s |", p.perOK(name))
			}
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}

// cpuPart is some processes of gantry's side whose CPU is added up per workload.
type cpuPart struct {
	name string
	pids []int
	cpu  map[string]time.Duration
	ok   map[string]int
}

func (p *cpuPart) add(workload string, cpu time.Duration, ok int) {
	if p.cpu == nil {
		p.cpu, p.ok = map[string]time.Duration{}, map[string]int{}
	}
	p.cpu[workload] += cpu
	p.ok[workload] += ok
}

func (p *cpuPart) perOK(workload string) string {
	if p.ok[workload] == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(p.cpu[workload].Microseconds())/float64(p.ok[workload]))
}

// partsCPU is the CPU each part's processes have used so far (0 for a part it cannot read).
func partsCPU(parts []cpuPart) []time.Duration {
	out := make([]time.Duration, len(parts))
	for i, p := range parts {
		for _, pid := range p.pids {
			if c, err := benchload.ProcessCPU(pid); err == nil {
				out[i] += c
			}
		}
	}
	return out
}

// peerSide is one OpenBao server or cluster of the comparison: its workloads, the processes whose CPU
// counts, and its results by workload.
type peerSide struct {
	settings string
	pids     []int
	work     map[string]workload
	results  map[string][]benchload.Result
}

// printPeerTable is the table of gantry's rounds against one OpenBao's, workload by workload.
func printPeerTable(stdout io.Writer, order []string, gantry, bao map[string][]benchload.Result) {
	fmt.Fprintln(stdout, "| workload | conns | gantry ok/s (rounds) | OpenBao ok/s (rounds) | gantry vs OpenBao, median (range) | by CPU per request | errors gantry / OpenBao |")
	fmt.Fprintln(stdout, "|---|---:|---|---|---|---|---|")
	for _, name := range order {
		pg, pb := gantry[name], bao[name]
		var rps, cpu []float64
		var gs, bs []string
		var ge, be benchload.Result
		for i := range pg {
			gs, bs = append(gs, num(pg[i].OKPerSec())), append(bs, num(pb[i].OKPerSec()))
			if pb[i].OKPerSec() > 0 {
				rps = append(rps, pg[i].OKPerSec()/pb[i].OKPerSec())
			}
			if c := pg[i].CPUPerOK(); c > 0 && pb[i].CPUPerOK() > 0 {
				cpu = append(cpu, float64(pb[i].CPUPerOK())/float64(c))
			}
			if i == 0 {
				ge, be = pg[i], pb[i]
			} else {
				ge, be = ge.Merge(pg[i]), be.Merge(pb[i])
			}
		}
		conns := 16
		if strings.HasPrefix(name, "one ") {
			conns = 1
		}
		fmt.Fprintf(stdout, "| %s | %d | %s | %s | %s | %s | %s / %s |\n", name, conns, strings.Join(gs, ", "), strings.Join(bs, ", "),
			medianRange(rps), medianRange(cpu), errorsOf(ge), errorsOf(be))
	}
}

// medianRange is "1.23× (1.10–1.40×)" of ratios.
func medianRange(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	median := v[len(v)/2]
	if len(v)%2 == 0 {
		median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf("%s (%s–%s)", ratio(median, 1), strings.TrimSuffix(ratio(v[0], 1), "×"), ratio(v[len(v)-1], 1))
}

// openBao is a running OpenBao server with a KV v2 mount and a token of a policy (not the root token).
type openBao struct {
	*proc
	addr, token string
}

// startOpenBao starts bao server with raft storage in a new folder under dir, initialises and unseals
// it with one key share, mounts KV v2 at secret/, and creates a token of a policy that may read and
// write secret/data/* (the root token is used for this setup only).
func startOpenBao(ctx context.Context, bin, dir string) (*openBao, error) {
	data, err := os.MkdirTemp(dir, "openbao-")
	if err != nil {
		return nil, err
	}
	configPath, api, err := writeOpenBaoConfig(data, "bench", "")
	if err != nil {
		return nil, err
	}
	p, err := startProc("openbao", bin, filepath.Join(data, "openbao.log"), "server", "-config="+configPath)
	if err != nil {
		return nil, err
	}
	ob := &openBao{proc: p, addr: "http://" + api}
	// An uninitialised server answers its health check with 501.
	if err := p.waitHTTP(ctx, ob.addr+"/v1/sys/health", http.StatusNotImplemented); err != nil {
		p.stop()
		return nil, err
	}
	if _, err := ob.setUp(ctx); err != nil {
		p.stop()
		return nil, fmt.Errorf("set up OpenBao: %w (its log: %s)\n%s", err, p.log, tail(p.log))
	}
	return ob, nil
}

// setUp initialises and unseals the server, mounts KV v2 and creates the policy token; it returns the
// unseal key (the followers of a cluster are unsealed with it).
func (ob *openBao) setUp(ctx context.Context) (string, error) {
	var initAnswer struct {
		Keys      []string `json:"keys_base64"`
		RootToken string   `json:"root_token"`
	}
	if err := ob.call(ctx, http.MethodPut, "/v1/sys/init", "", map[string]any{"secret_shares": 1, "secret_threshold": 1}, &initAnswer); err != nil {
		return "", err
	}
	if len(initAnswer.Keys) == 0 {
		return "", fmt.Errorf("init returned no unseal key")
	}
	if err := ob.call(ctx, http.MethodPut, "/v1/sys/unseal", "", map[string]any{"key": initAnswer.Keys[0]}, nil); err != nil {
		return "", err
	}
	// Raft elects itself leader a moment after the unseal: active is 200 on the health check.
	if err := ob.waitHTTP(ctx, ob.addr+"/v1/sys/health", http.StatusOK); err != nil {
		return "", err
	}
	root := initAnswer.RootToken
	if err := ob.call(ctx, http.MethodPost, "/v1/sys/mounts/secret", root, map[string]any{"type": "kv", "options": map[string]string{"version": "2"}}, nil); err != nil {
		return "", err
	}
	policy := `path "secret/data/*" { capabilities = ["create", "read", "update"] }`
	if err := ob.call(ctx, http.MethodPut, "/v1/sys/policies/acl/bench", root, map[string]any{"policy": policy}, nil); err != nil {
		return "", err
	}
	var tok struct {
		Auth struct {
			ClientToken string `json:"client_token"`
		} `json:"auth"`
	}
	if err := ob.call(ctx, http.MethodPost, "/v1/auth/token/create", root, map[string]any{"policies": []string{"bench"}, "ttl": "2h", "no_default_policy": true}, &tok); err != nil {
		return "", err
	}
	if tok.Auth.ClientToken == "" {
		return "", fmt.Errorf("token create returned no token")
	}
	ob.token = tok.Auth.ClientToken
	return initAnswer.Keys[0], nil
}

// call makes one request to OpenBao's API, retrying briefly while the new mount settles.
func (ob *openBao) call(ctx context.Context, method, path, token string, body, out any) error {
	data, _ := json.Marshal(body)
	var last error
	for range 50 {
		req, err := http.NewRequestWithContext(ctx, method, ob.addr+path, strings.NewReader(string(data)))
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("X-Vault-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 300 {
			if out != nil && len(answer) > 0 {
				return json.Unmarshal(answer, out)
			}
			return nil
		}
		last = fmt.Errorf("%s %s: %d %.300s", method, path, resp.StatusCode, answer)
		if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusBadRequest {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// baoWorkloads are the OpenBao side of the workloads gantry also runs, by the same names: KV v2
// reads and writes of a secret of the same pairs, with the policy token.
func (b *bencher) baoWorkloads(ob *openBao) (map[string]workload, error) {
	ctx := context.Background()
	header := http.Header{"X-Vault-Token": {ob.token}, "Content-Type": {"application/json"}}
	put := func(name string, i int) error {
		return ob.call(ctx, http.MethodPost, "/v1/secret/data/"+name, ob.token, map[string]any{"data": map[string]string{"password": fmt.Sprint("v", i)}}, nil)
	}
	if err := ob.call(ctx, http.MethodPost, "/v1/secret/data/bench-read", ob.token, map[string]any{"data": map[string]string{"user": "app", "password": "hunter2"}}, nil); err != nil {
		return nil, err
	}
	for i := range 102 {
		if err := put(fmt.Sprintf("w-%d", i), 0); err != nil {
			return nil, err
		}
	}
	update := func(first, n int) benchload.Request {
		return func(i int) (string, string, http.Header, []byte) {
			body := fmt.Appendf(nil, `{"data":{"password":"v%d"}}`, i)
			return http.MethodPost, fmt.Sprintf("%s/v1/secret/data/w-%d", ob.addr, first+i%n), header, body
		}
	}
	return map[string]workload{
		"read one credential": {conns: 16, req: func(int) (string, string, http.Header, []byte) {
			return http.MethodGet, ob.addr + "/v1/secret/data/bench-read", header, nil
		}},
		"one sequential writer":           {conns: 1, req: update(0, 1)},
		"16 writers over 100 credentials": {conns: 16, req: update(2, 100)},
		"16 writers on one credential":    {conns: 16, req: update(1, 1)},
	}, nil
}
