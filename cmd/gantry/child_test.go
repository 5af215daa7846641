package main

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gantryChild is a gantry process a test started: the test binary re-run as main (TestMainChild).
type gantryChild struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited; err is then its Wait error
	err  error
}

// startChild starts gantry with args, its standard output and error to stdout and stderr, and kills
// it when the test ends if it is still running.
func startChild(t *testing.T, args []string, stdout, stderr io.Writer) *gantryChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GANTRY_TEST_MAIN_ARGS="+strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &gantryChild{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
	})
	return c
}

// waitFor polls ok until it holds; the process exiting first, or 20 s passing, fails the test with
// what logs returns.
func (c *gantryChild) waitFor(t *testing.T, what string, ok func() bool, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		select {
		case <-c.done:
			t.Fatalf("gantry exited while waiting for %s: %v\n%s", what, c.err, logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and fails the test unless gantry exits cleanly within 15 s.
func (c *gantryChild) stop(t *testing.T, logs func() string) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
		if c.err != nil {
			t.Errorf("gantry exit after SIGTERM: %v\n%s", c.err, logs())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gantry did not stop after SIGTERM")
	}
}
