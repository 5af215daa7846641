package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
