package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/freeport"
)

// proc is a server process this command started; stop ends it.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	// exited is closed when the process has exited, with its error in err.
	exited chan struct{}
	err    error
}

// startProc starts bin with args, its output appended to logPath.
func startProc(name, bin, logPath string, args ...string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop interrupts the process and kills it if it has not exited after 15 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitHTTP polls url until it answers want, the process exits, or 60 s pass.
func (p *proc) waitHTTP(ctx context.Context, url string, want int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited at startup (%v); its log: %s\n%s", p.name, p.err, p.log, tail(p.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after 60 s; its log: %s\n%s", p.name, url, p.log, tail(p.log))
		}
	}
}

// poll calls cond until it holds, the process exits, or 60 s pass; what names the condition.
func (p *proc) poll(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited (%v) before %s; its log: %s\n%s", p.name, p.err, what, p.log, tail(p.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s after 60 s; the log of %s: %s\n%s", what, p.name, p.log, tail(p.log))
		}
	}
	return nil
}

// tail is the last lines of a log, for an error.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// settings are the gantry settings a figure was taken with; every row of the table names them.
type settings struct {
	// writeLimit is -write-rate: "" is the default (20 writes/s per principal, burst 200), "0" off.
	writeLimit string
	accessLog  bool
}

func (s settings) String() string {
	limit := "write limit on (default 20/s per principal, burst 200)"
	if s.writeLimit == "0" {
		limit = "write limit off"
	} else if s.writeLimit != "" {
		limit = "write limit " + s.writeLimit + "/s"
	}
	access := "access log off"
	if s.accessLog {
		access = "access log on (a file)"
	}
	// The audit trail cannot be turned off (gantry refuses to start without a sink): it is on, to
	// standard output (the default), which goes to a file here.
	return fmt.Sprintf("%s, %s, audit on (stdout)", limit, access)
}

// gantry is a running gantry serve process.
type gantry struct {
	*proc
	rest, admin string
	// stats is the read-only stats listener (-stats-listen), which Prometheus scrapes.
	stats string
	// auth is the Authorization header of the benchmark's user; setupAuth is another user's, so the
	// records a workload needs do not use up the workload's own write allowance.
	auth, setupAuth string
	slackAPI        string
}

// startGantry starts bin serve with s on free ports and a new data folder under dir, with make run's
// chat configuration and demo Slack workspace (in the gantry process), and mints the tokens.
func startGantry(ctx context.Context, bin, repo, dir string, s settings) (*gantry, error) {
	dataDir, err := os.MkdirTemp(dir, "gantry-data-")
	if err != nil {
		return nil, err
	}
	ports := make([]string, 6)
	for i := range ports {
		if ports[i], err = freeport.Find(); err != nil {
			return nil, err
		}
	}
	args := []string{"serve", "-data-dir=" + dataDir, "-kms=local",
		"-gateway-listen=" + ports[0], "-admin-listen=" + ports[1], "-admin-grpc-listen=" + ports[2],
		"-secrets-listen=" + ports[3], "-chat-listen=" + ports[4], "-stats-listen=" + ports[5],
		"-chat-config=" + filepath.Join(repo, "deploy/chat.yaml"), "-chat-demo"}
	if s.writeLimit != "" {
		args = append(args, "-write-rate="+s.writeLimit)
	}
	// The access log is on by default (stdout): off is said explicitly, or the rows labelled
	// "access log off" would measure it (they did, until this was found in a profile).
	accessLog := "off"
	if s.accessLog {
		accessLog = filepath.Join(dataDir, "access.log")
	}
	args = append(args, "-access-log="+accessLog)
	p, err := startProc("gantry", bin, filepath.Join(dataDir, "gantry.log"), args...)
	if err != nil {
		return nil, err
	}
	g := &gantry{proc: p, rest: "http://" + ports[0], admin: "http://" + ports[1], stats: "http://" + ports[5]}
	if err := p.waitHTTP(ctx, g.admin+"/ready", http.StatusOK); err != nil {
		p.stop()
		return nil, err
	}
	for _, t := range []struct {
		user string
		into *string
	}{{"bench", &g.auth}, {"bench-setup", &g.setupAuth}} {
		out, err := exec.CommandContext(ctx, bin, "token", "--data-dir", dataDir, "--from", t.user, "--user-type", "user", "--lifetime", "1h", "--basic").Output()
		if err != nil {
			p.stop()
			return nil, fmt.Errorf("gantry token: %w", err)
		}
		*t.into = "Basic " + base64.StdEncoding.EncodeToString([]byte(strings.TrimSpace(string(out))))
	}
	if g.slackAPI, err = slackAPIOf(p.log); err != nil {
		p.stop()
		return nil, err
	}
	return g, nil
}

// slackAPIRE finds the demo workspace's address in gantry's log line announcing it.
var slackAPIRE = regexp.MustCompile(`demo Slack workspace[^\n]*"slack_api": ?"(http://[^"]+)"`)

func slackAPIOf(logPath string) (string, error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return "", err
	}
	m := slackAPIRE.FindSubmatch(data)
	if m == nil {
		return "", fmt.Errorf("no demo Slack workspace address in %s", logPath)
	}
	return string(m[1]), nil
}
