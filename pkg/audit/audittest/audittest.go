// Package audittest reads an audit trail back in tests: whole lines, each one JSON object tagged
// "log":"audit", as a log shipper routing on the tag would need them.
package audittest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// TB is the part of testing.TB the readers need.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Buffer collects a sink's output (audit.Open's stdout writer, say); it is safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Take returns the records written since the last Take.
func (b *Buffer) Take(t TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	recs := Records(t, b.buf.String())
	b.buf.Reset()
	return recs
}

// Records parses text as audit records and fails the test unless it is whole lines, each one JSON
// object tagged "log":"audit". skip, when set, names lines that are not the trail's (another log
// sharing the stream) and are left out.
func Records(t TB, text string, skip ...func(line string) bool) []map[string]any {
	t.Helper()
	if text != "" && !strings.HasSuffix(text, "\n") {
		t.Fatalf("the audit trail does not end with a whole line: %q", text)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" || len(skip) > 0 && skip[0](line) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line is not one JSON object: %v: %q", err, line)
		}
		if rec["log"] != "audit" {
			t.Fatalf("audit line without \"log\":\"audit\": %q", line)
		}
		out = append(out, rec)
	}
	return out
}
