package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// lines parses text as audit lines, failing unless each is one JSON object tagged "log":"audit".
func lines(t *testing.T, text string) []Record {
	t.Helper()
	var out []Record
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Log != Tag {
			t.Fatalf("not an audit line (%v): %q", err, line)
		}
		out = append(out, r)
	}
	return out
}

// TestRecordsAreOneJSONLineEach: records written concurrently, with hostile text (newlines, quotes,
// invalid UTF-8, very long ids), come out as one whole JSON object per line, every field bounded.
func TestRecordsAreOneJSONLineEach(t *testing.T) {
	out := &lockedBuffer{}
	s := NewWriter(out)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := Record{Service: "secrets", Outcome: Denied, Action: "get", Principal: "eve\n{\"log\":\"audit\"}",
					ResourceID: strings.Repeat("x", 10_000) + fmt.Sprint(w, i), Reason: "bad \xff utf-8 \"quoted\"\r\n"}
				if err := s.Write(r); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	recs := lines(t, out.String())
	if len(recs) != writers*each {
		t.Fatalf("%d records, want %d", len(recs), writers*each)
	}
	for _, r := range recs {
		if len(r.ResourceID) > FieldLimit+len("…") || r.Time.IsZero() || r.Time.Location().String() != "UTC" {
			t.Fatalf("record not bounded or without a UTC time: %d bytes of id, time %v", len(r.ResourceID), r.Time)
		}
	}
}

// TestOneWorkingSinkIsEnough: Vault's rule: a record is written when at least one sink took it; with
// none, Write returns ErrUnavailable (the caller refuses the write).
func TestOneWorkingSinkIsEnough(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.log")
	s, err := Open(Config{Stdout: true, File: file}, failingWriter{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Write(Record{Action: "create"}); err != nil {
		t.Fatalf("stdout broken, file fine: %v", err)
	}
	data, _ := os.ReadFile(file)
	if recs := lines(t, string(data)); len(recs) != 1 || recs[0].Action != "create" {
		t.Fatalf("audit file: %v", recs)
	}

	broken, err := Open(Config{Stdout: true}, failingWriter{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := broken.Write(Record{Action: "create"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no working sink: %v, want ErrUnavailable", err)
	}
}

// TestReopen: after the file is moved away (logrotate), Reopen starts a new file under the name; when
// the folder is gone the file sink is down (writes refused if it is the only sink), and the first
// write after the folder is back opens it again.
func TestReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "audit.log")
	s, err := Open(Config{File: file}, nil, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func(action string) error { return s.Write(Record{Action: action}) }
	read := func(path string) []Record {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return lines(t, string(data))
	}
	if err := write("one"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file, file+".1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := write("two"); err != nil {
		t.Fatal(err)
	}
	if old, cur := read(file+".1"), read(file); len(old) != 1 || old[0].Action != "one" || len(cur) != 1 || cur[0].Action != "two" {
		t.Fatalf("rotated %v, current %v", old, cur)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Reopen(); err == nil {
		t.Fatal("reopen in a missing folder succeeded")
	}
	if err := write("three"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("write with the only sink down: %v, want ErrUnavailable", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := write("four"); err != nil {
		t.Fatalf("write once the folder is back: %v", err)
	}
	if cur := read(file); len(cur) != 1 || cur[0].Action != "four" {
		t.Fatalf("after recovery: %v", cur)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode %v, want 0600", info.Mode().Perm())
	}
}

// fillingDisk is a disk that fills up on the test's word: once full, a write stores only its first
// keep bytes (0: none) and fails with ENOSPC, as a write that meets the end of the space does.
type fillingDisk struct {
	mu   sync.Mutex
	full bool
	keep int
}

func (d *fillingDisk) fill(keep int) { d.mu.Lock(); d.full, d.keep = true, keep; d.mu.Unlock() }
func (d *fillingDisk) free()         { d.mu.Lock(); d.full = false; d.mu.Unlock() }

func (d *fillingDisk) write(w io.Writer, p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.full {
		return w.Write(p)
	}
	n, _ := w.Write(p[:min(d.keep, len(p))])
	return n, syscall.ENOSPC
}

// onDisk is a writer (the audit file, standard output) on a fillingDisk.
type onDisk struct {
	disk *fillingDisk
	w    io.Writer
}

func (o onDisk) Write(p []byte) (int, error) { return o.disk.write(o.w, p) }

func (o onDisk) Close() error {
	if c, ok := o.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// TestATornRecordNeverGluesTheNext: once a write stopped part-way through a record (a full disk),
// the next record that is written starts on a line of its own, whatever came in between: failed
// writes of no byte at all, a SIGHUP reopening the same file, a restart on a file that ends mid-line
// (issue 40). Each torn piece stays alone on its line, and every other line is a whole record.
func TestATornRecordNeverGluesTheNext(t *testing.T) {
	const keep = 25 // bytes of a torn record that reach the disk
	// check reads text as lines of whole records, in order, and torn pieces of keep bytes.
	check := func(t *testing.T, text string, want []string, torn int) {
		t.Helper()
		var actions []string
		pieces := 0
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			var r Record
			if err := json.Unmarshal([]byte(line), &r); err == nil && r.Log == Tag {
				actions = append(actions, r.Action)
				continue
			}
			if len(line) != keep || !strings.HasPrefix(line, `{"log":"audit"`) {
				t.Fatalf("line %q is neither a whole record nor a torn piece of one alone on its line:\n%s", line, text)
			}
			pieces++
		}
		if fmt.Sprint(actions) != fmt.Sprint(want) || pieces != torn {
			t.Fatalf("records %v and %d torn pieces, want %v and %d:\n%s", actions, pieces, want, torn, text)
		}
	}

	t.Run("file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "audit.log")
		disk := &fillingDisk{}
		open := func(path string) (io.WriteCloser, error) {
			f, err := openFile(path)
			if err != nil {
				return nil, err
			}
			return onDisk{disk: disk, w: f}, nil
		}
		s, err := openSinks(Config{File: file}, nil, logtest.New(t), open)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		write := func(action string, wantOK bool) {
			t.Helper()
			if err := s.Write(Record{Action: action}); (err == nil) != wantOK {
				t.Fatalf("write %s: %v", action, err)
			}
		}
		read := func() string {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}

		write("one", true)
		disk.fill(keep)
		write("two", false) // torn
		disk.fill(0)
		write("three", false) // nothing written: the line is still torn
		disk.free()
		write("four", true)
		check(t, read(), []string{"one", "four"}, 1)

		disk.fill(keep)
		write("five", false)
		if err := s.Reopen(); err != nil { // SIGHUP, the file not rotated
			t.Fatal(err)
		}
		disk.free()
		write("six", true)
		check(t, read(), []string{"one", "four", "six"}, 2)

		disk.fill(keep)
		write("seven", false)
		disk.free()
		if err := s.Close(); err != nil { // a restart on the file that ends mid-line
			t.Fatal(err)
		}
		if s, err = openSinks(Config{File: file}, nil, logtest.New(t), open); err != nil {
			t.Fatal(err)
		}
		write("eight", true)
		check(t, read(), []string{"one", "four", "six", "eight"}, 3)
	})

	t.Run("stdout", func(t *testing.T) {
		disk, out := &fillingDisk{}, &lockedBuffer{}
		s, err := Open(Config{Stdout: true}, onDisk{disk: disk, w: out}, logtest.New(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			action string
			keep   int // -1: the disk has room
		}{{"one", -1}, {"two", keep}, {"three", 0}, {"four", -1}} {
			if step.keep < 0 {
				disk.free()
			} else {
				disk.fill(step.keep)
			}
			if err := s.Write(Record{Action: step.action}); (err == nil) != (step.keep < 0) {
				t.Fatalf("write %s: %v", step.action, err)
			}
		}
		check(t, out.String(), []string{"one", "four"}, 1)
	})
}

// TestTheTrailCannotBeSwitchedOff: a configuration without any sink is refused, naming the setting.
func TestTheTrailCannotBeSwitchedOff(t *testing.T) {
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "audit-stdout") {
		t.Fatalf("no sink: %v", err)
	}
	if _, err := Open(Config{File: filepath.Join(t.TempDir(), "missing", "audit.log")}, nil, nil); err == nil || !strings.Contains(err.Error(), "audit-file") {
		t.Fatalf("a file that cannot be opened: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestGRPCCall: the client address is the last x-forwarded-for entry (the gateway's view of the
// client) when there is one, else the peer's host; the request id is x-request-id.
func TestGRPCCall(t *testing.T) {
	p := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4567}}
	ctx := peer.NewContext(context.Background(), p)
	if c := GRPCCall(ctx, "secrets", "/m"); c.ClientAddr != "10.1.2.3" || c.RequestID != "" {
		t.Errorf("peer only: %+v", c)
	}
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-forwarded-for", "198.51.100.7, 192.0.2.1", "x-request-id", "r-1"))
	if c := GRPCCall(ctx, "secrets", "/m"); c.ClientAddr != "192.0.2.1" || c.RequestID != "r-1" || c.Method != "/m" || c.Service != "secrets" {
		t.Errorf("with gateway metadata: %+v", c)
	}
}

// TestRefusalLimiter: a burst per second, then counted; the next record says how many were left out.
func TestRefusalLimiter(t *testing.T) {
	var now int64 = 1_800_000_000
	l := RefusalLimiter{Burst: 2, Now: func() time.Time { return time.Unix(now, 0) }}
	for i := range 2 {
		if _, ok := l.Allow(); !ok {
			t.Fatalf("refusal %d of the burst not allowed", i)
		}
	}
	for range 5 {
		if _, ok := l.Allow(); ok {
			t.Fatal("refusal past the burst allowed")
		}
	}
	now++
	if n, ok := l.Allow(); !ok || n != 5 {
		t.Fatalf("next second: %d, %v; want 5 suppressed", n, ok)
	}
}

// BenchmarkWrite is the cost of one record: to a discarding writer (encoding alone) and appended to
// a file (the write system call the stdout and file sinks pay).
func BenchmarkWrite(b *testing.B) {
	r := Record{Service: "secrets", Outcome: Allowed, Action: "update", Method: "/secrets.v1.SecretsService/UpdateCredential",
		Resource: "credential", ResourceID: "0123456789abcdef0123456789abcdef", Revision: 12, Principal: "alice@example.com",
		PrincipalType: "user", AuthType: "kms", RequestID: "4f1c2e3d4c5b6a798877665544332211", ClientAddr: "203.0.113.10"}
	b.Run("discard", func(b *testing.B) {
		s := Discard()
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Write(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("file", func(b *testing.B) {
		s, err := Open(Config{File: filepath.Join(b.TempDir(), "audit.log")}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Write(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
