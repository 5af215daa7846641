// Package kubecheck runs the gantry Helm chart and Kubernetes service-account tokens against a real
// kube-apiserver: the API server and its etcd are built from their Go modules
// (k8s.io/kubernetes at the release of the k8s.io/* modules the chart is decoded with, and the etcd
// server it requires), since no image or release binary can be downloaded here. Strict decoding
// into the k8s.io/api types (deploy/helm/chartcheck) cannot see what only the server checks: field
// values, defaulting, admission (Pod Security), RBAC, the CRD schema of a ServiceMonitor. Nor can an
// in-test OIDC issuer prove that gantry verifies the tokens a real API server mints.
//
// It is a module of its own, outside go.work (make test-kube, GOWORK=off), for the same reason as
// chartcheck and more: k8s.io/kubernetes brings hundreds of modules. Its go.mod replaces each
// staging module of k8s.io/kubernetes (its own go.mod points them at ./staging/src/...) with the
// published k8s.io/* module of the same release. The first run compiles the API server (8 minutes
// of CPU, 20 on a shared two-core machine); later runs reuse the Go build cache and the binaries.
package kubecheck

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// cluster is the etcd and kube-apiserver every test of the package shares: starting them costs
// seconds of a shared two-core machine, so TestMain starts them once and each test works in
// namespaces of its own.
var cluster *apiServer

// bins holds the binaries TestMain built: kube-apiserver, etcd and gantry.
var bins string

type apiServer struct {
	URL       string // https://127.0.0.1:<port>, also the service-account issuer
	CAFile    string // the CA of its serving certificate
	CAPEM     []byte
	Token     string // a static token of a member of system:masters
	Config    *rest.Config
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	Warnings  *warnings
	dataDir   string
	logs      *lockedBuffer
	processes []*exec.Cmd
}

func TestMain(m *testing.M) {
	if _, err := os.Stat("../gantry/Chart.yaml"); err != nil {
		fmt.Fprintln(os.Stderr, "run from deploy/helm/kubecheck:", err)
		os.Exit(1)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// One folder for the whole run, removed at its end: the cluster outlives every test's t.TempDir.
	dir, err := os.MkdirTemp("", "kubecheck-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bins, err = buildBinaries(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err = startCluster(dir)
	if cluster != nil {
		defer cluster.stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if cluster != nil {
			fmt.Fprintln(os.Stderr, cluster.logs.String())
		}
		return 1
	}
	code := m.Run()
	if code != 0 && testing.Verbose() {
		fmt.Fprintln(os.Stderr, "--- etcd and kube-apiserver logs:\n"+tail(cluster.logs.String(), 8000))
	}
	return code
}

// buildBinaries builds kube-apiserver and etcd from this module and gantry from the repository root
// into a folder of the user's cache, so a later run only checks that they are up to date: go build
// -o does not link again a binary whose build ID is current.
func buildBinaries() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "gantry-kubecheck")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	for _, b := range []struct{ dir, pkg, name string }{
		{".", "./cmd/etcd", "etcd"},
		{".", "k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"},
		{"../../..", "./cmd/gantry", "gantry"},
	} {
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", filepath.Join(out, b.name), b.pkg)
		cmd.Dir = b.dir
		// This module is outside go.work: its builds need GOWORK=off whoever runs the test binary;
		// gantry's builds in its own module and workspace.
		cmd.Env = append(withoutEnv(os.Environ(), "GOWORK"), "GOWORK=off")
		if b.name == "gantry" {
			cmd.Env = withoutEnv(os.Environ(), "GOWORK")
		}
		if msg, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", b.pkg, err, msg)
		}
		if d := time.Since(start); d > 10*time.Second {
			fmt.Fprintf(os.Stderr, "built %s in %s\n", b.name, d.Round(time.Second))
		}
	}
	return out, nil
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// freePorts returns n loopback ports that were free a moment ago; the processes bind them right
// after (etcd and kube-apiserver take no port 0 that they would report back).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func startCluster(dir string) (*apiServer, error) {
	s := &apiServer{dataDir: dir, logs: &lockedBuffer{}, Warnings: &warnings{}}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcd := exec.Command(filepath.Join(bins, "etcd"),
		"--name=kubecheck", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdClient, "--advertise-client-urls="+etcdClient,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--initial-cluster=kubecheck=http://127.0.0.1:%d", ports[1]),
		"--log-level=warn")
	if err := s.start(etcd, "etcd"); err != nil {
		return s, err
	}

	s.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return s, err
	}
	if err := writePKI(pki); err != nil {
		return s, err
	}
	s.CAFile = filepath.Join(pki, "ca.pem")
	if s.CAPEM, err = os.ReadFile(s.CAFile); err != nil {
		return s, err
	}
	s.Token = randomToken()
	if err := os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(s.Token+`,kubecheck-admin,kubecheck-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return s, err
	}
	api := exec.Command(filepath.Join(bins, "kube-apiserver"),
		"--etcd-servers="+etcdClient,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--tls-cert-file="+filepath.Join(pki, "serving.pem"), "--tls-private-key-file="+filepath.Join(pki, "serving-key.pem"),
		"--token-auth-file="+filepath.Join(pki, "tokens.csv"),
		"--authorization-mode=RBAC",
		// Pod Security admission is on by default; the namespaces the tests make enforce restricted.
		"--enable-admission-plugins=PodSecurity",
		// The issuer of service-account tokens is the server's own URL, so gantry can find its keys by
		// OIDC discovery (/.well-known/openid-configuration, then /openid/v1/jwks).
		"--service-account-issuer="+s.URL,
		"--service-account-jwks-uri="+s.URL+"/openid/v1/jwks",
		"--service-account-key-file="+filepath.Join(pki, "sa-key.pem"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa-key.pem"),
		"--api-audiences="+s.URL,
		"--service-cluster-ip-range=10.96.0.0/24",
		// No kubelet, no controller manager: the kubernetes Service's endpoints (a loopback address,
		// which Endpoints refuse) are not reconciled.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--v=0")
	if err := s.start(api, "kube-apiserver"); err != nil {
		return s, err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CAPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	// Ready when /readyz answers 200 (etcd reached, RBAC's default roles and every post-start hook
	// done); the deadline only bounds a hang, and a process that exits fails at once.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		req, _ := http.NewRequest("GET", s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := hc.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		for _, p := range s.processes {
			if p.ProcessState != nil {
				return s, fmt.Errorf("%s exited: %v", p.Path, p.ProcessState)
			}
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("kube-apiserver not ready at %s: %v", s.URL, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	s.Config = &rest.Config{
		Host:            s.URL,
		BearerToken:     s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CAPEM},
		WarningHandler:  s.Warnings,
		QPS:             100, Burst: 200,
	}
	if s.Client, err = kubernetes.NewForConfig(s.Config); err != nil {
		return s, err
	}
	if s.Dynamic, err = dynamic.NewForConfig(s.Config); err != nil {
		return s, err
	}
	return s, nil
}

// start runs cmd with its output in the cluster's logs; a process that exits is noticed through
// ProcessState (set by the goroutine's Wait).
func (s *apiServer) start(cmd *exec.Cmd, name string) error {
	w := &prefixWriter{prefix: name + ": ", w: s.logs}
	cmd.Stdout, cmd.Stderr = w, w
	// Its own process group, so a stop reaches every child it may have.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", name, err)
	}
	s.processes = append(s.processes, cmd)
	go cmd.Wait()
	return nil
}

// stop ends the API server before etcd, then waits for each.
func (s *apiServer) stop() {
	for i := len(s.processes) - 1; i >= 0; i-- {
		p := s.processes[i]
		syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		deadline := time.Now().Add(20 * time.Second)
		for p.ProcessState == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if p.ProcessState == nil {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		}
	}
}

// writePKI writes a CA, the API server's serving certificate for 127.0.0.1 signed by it, and the
// service-account signing key (RSA, so the tokens are RS256 as most clusters' are).
func writePKI(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubecheck CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":          {Type: "CERTIFICATE", Bytes: caDER},
		"serving.pem":     {Type: "CERTIFICATE", Bytes: der},
		"serving-key.pem": {Type: "PRIVATE KEY", Bytes: keyDER},
		"sa-key.pem":      {Type: "PRIVATE KEY", Bytes: saDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 24)
	rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// warnings collects the Warning headers of the API server's answers (Pod Security's verdict on a
// workload's pod template arrives as one): take returns and clears them.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			p.w.Write([]byte(p.prefix + line))
		}
	}
	return len(b), nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// waitFor polls ok until it holds; the deadline only bounds a hang.
func waitFor(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		done, last := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute; last: %s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctx is a test's context, ended when the test ends.
func ctx(t *testing.T) context.Context {
	return t.Context()
}
