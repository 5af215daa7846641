// Package audit writes gantry's audit trail: one JSON object per line, tagged "log":"audit", to sinks
// of its own (stdout and/or a file) that the log level never filters. A record says who (principal,
// its kind and how it authenticated), did or was refused what (action, RPC method, resource), from
// where (request id, client address) and with which outcome; it never holds a secret value.
//
// The trail is a precondition of writes (Vault's rule): a service writes a "pending" record before a
// change and refuses the change when no sink took it (Write returns ErrUnavailable); reads and
// refusals go on when the trail is down, and that failure is on the error log.
package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Outcome is what became of the call a record is about.
type Outcome string

const (
	// Pending is written before a write takes effect; the call's allowed or failed record follows.
	Pending Outcome = "pending"
	// Allowed: the call was authorised and done (a write committed, a read answered).
	Allowed Outcome = "allowed"
	// Denied: the call was refused by authentication, access control or a rate limit.
	Denied Outcome = "denied"
	// Failed: the call was authorised but did not succeed (bad input, a conflict, storage down); a
	// failed write changed nothing.
	Failed Outcome = "failed"
)

// Tag is the value of every record's "log" field: a log shipper routes audit lines on it.
const Tag = "audit"

// FieldLimit bounds each text field of a record, so a client-supplied value (a requested id, a
// claimed name quoted in a reason) cannot make a record large.
const FieldLimit = 200

// ErrUnavailable is returned by Write when no sink took the record.
var ErrUnavailable = errors.New("the audit trail cannot be written")

// Record is one audit line. Every field but revision, code, reason and suppressed is always present
// (empty when unknown), so a consumer can rely on the shape.
type Record struct {
	// Log is always Tag ("audit"); Write sets it.
	Log string `json:"log"`
	// Time is when the record was written (UTC); Write sets it.
	Time time.Time `json:"time"`
	// Service is the gantry service that decided: secrets or chat.
	Service string  `json:"service"`
	Outcome Outcome `json:"outcome"`
	// Action is what was done or refused, in the service's words (create, update, get, metadata...,
	// or the Slack method of a chat action).
	Action string `json:"action"`
	// Method is the full gRPC method of the call (the REST route's RPC).
	Method string `json:"method"`
	// Resource is the kind of thing acted on (credential, service, certificate, jwt, bot...), and
	// ResourceID which one.
	Resource   string `json:"resource"`
	ResourceID string `json:"resource_id"`
	// Revision is the revision a write created or a read returned, when there is one.
	Revision int32 `json:"revision,omitempty"`
	// Principal is who asked ("" before authentication succeeded), PrincipalType its kind (user,
	// service) and AuthType how it authenticated (kms, session, header, certificate...).
	Principal     string `json:"principal"`
	PrincipalType string `json:"principal_type"`
	AuthType      string `json:"auth_type"`
	// RequestID is the gateway's x-request-id (the one its access log and the client's answer carry)
	// or a direct gRPC caller's own.
	RequestID string `json:"request_id"`
	// ClientAddr is the client's IP address as the gateway saw it, or a direct gRPC caller's address.
	ClientAddr string `json:"client_addr"`
	// Code is the gRPC status code of a denial or failure; Reason the refusal in the server's words.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ChangeRequest is the change request a record is about (its steps, and the write that applied
	// it); Requester who asked for it and Approvers who approved it so far, so every step of a
	// two-person change names both sides.
	ChangeRequest string   `json:"change_request,omitempty"`
	Requester     string   `json:"requester,omitempty"`
	Approvers     []string `json:"approvers,omitempty"`
	// Suppressed counts the refusals left off the trail (by a flood limit) since the last one written.
	Suppressed int64 `json:"suppressed,omitempty"`
}

// Config selects the sinks.
type Config struct {
	// Stdout writes records to standard output (the logs go to standard error).
	Stdout bool
	// File appends records to this file (created 0600); SIGHUP reopens it for log rotation.
	File string
	// ReadsWhenDown gives secret values out (a credential's pairs, a service's, a JWT, a
	// certificate's key) while no sink can record it. Off by default, as in Vault: an unrecorded
	// disclosure is the event that matters most, so such reads are refused (503) like writes.
	ReadsWhenDown bool
}

// DefaultConfig writes the trail to standard output.
func DefaultConfig() Config { return Config{Stdout: true} }

// Settings are the audit settings of the settings table.
func (c *Config) Settings() settings.Part {
	const group = "audit"
	return settings.Part{Settings: []settings.Setting{
		{Name: "audit-stdout", Group: group, Value: settings.Bool(&c.Stdout), Usage: "write the audit trail (JSON lines tagged \"log\":\"audit\") to standard output, whatever the log level"},
		{Name: "audit-file", Group: group, Value: settings.String(&c.File), Usage: "also append the audit trail to this file (mode 0600; SIGHUP reopens it after rotation); writes and reads of secret values fail with 503 while no audit sink can be written"},
		{Name: "audit-reads-when-down", Group: group, Value: settings.Bool(&c.ReadsWhenDown), Usage: "give secret values out (credential and service reads, JWTs, certificate keys) while no audit sink can record it; off: refused with 503 like writes (Vault's rule). Logged loudly at start"},
	}}
}

// Validate refuses a configuration without any sink: the trail cannot be switched off.
func (c Config) Validate() error {
	if !c.Stdout && strings.TrimSpace(c.File) == "" {
		return settings.Invalid("audit-stdout", "the audit trail needs a sink: keep -audit-stdout or set -audit-file")
	}
	return nil
}

// Sink writes records to the configured sinks. It is safe for concurrent use; each record is one
// write call per sink, so lines never interleave.
type Sink struct {
	mu     sync.Mutex
	stdout io.Writer      // nil when off
	path   string         // "" when there is no file
	file   io.WriteCloser // nil while the file cannot be opened
	// open opens the file for appending (openFile; a test wraps it to inject write failures).
	open   func(path string) (io.WriteCloser, error)
	down   map[string]bool // sinks whose last write failed, for logging each change once
	logger *zap.Logger
	now    func() time.Time
	buf    []byte
	// readsWhenDown is Config.ReadsWhenDown.
	readsWhenDown bool

	// stdoutTorn and fileTorn are set while the sink ends part-way through a line (a write that
	// failed after some bytes, a file found so when opened): the next record starts on a new line.
	stdoutTorn, fileTorn bool
}

// ReadsWhenDown reports whether secret values may be given out while no sink can record it
// (Config.ReadsWhenDown).
func (s *Sink) ReadsWhenDown() bool { return s.readsWhenDown }

// Open opens the sinks of cfg. stdout is where the standard-output sink writes (nil: os.Stdout;
// tests inject a buffer or a writer that fails). A file that cannot be opened stops the start.
func Open(cfg Config, stdout io.Writer, logger *zap.Logger) (*Sink, error) {
	return openSinks(cfg, stdout, logger, openFile)
}

// openSinks is Open with the function that opens the file (tests wrap openFile to fail writes).
func openSinks(cfg Config, stdout io.Writer, logger *zap.Logger, open func(string) (io.WriteCloser, error)) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Sink{path: cfg.File, open: open, logger: logger, now: time.Now, down: map[string]bool{}, readsWhenDown: cfg.ReadsWhenDown}
	if cfg.ReadsWhenDown {
		logger.Warn("-audit-reads-when-down is on: secret values are given out even while no audit sink can record who read them (writes are still refused); the default refuses such reads with 503")
	}
	if cfg.Stdout {
		s.stdout = stdout
		if s.stdout == nil {
			s.stdout = os.Stdout
		}
	}
	if s.path != "" {
		f, err := s.open(s.path)
		if err != nil {
			return nil, settings.Invalid("audit-file", "%v", err)
		}
		s.file, s.fileTorn = f, endsMidLine(s.path)
	}
	return s, nil
}

// Discard is a sink that takes every record and keeps none, for tests of code that needs a sink.
func Discard() *Sink {
	return &Sink{stdout: io.Discard, logger: zap.NewNop(), now: time.Now, down: map[string]bool{}}
}

// NewWriter is a sink writing to w alone (tests read what was written).
func NewWriter(w io.Writer) *Sink {
	return &Sink{stdout: w, logger: zap.NewNop(), now: time.Now, down: map[string]bool{}}
}

func openFile(path string) (io.WriteCloser, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Write writes r to every sink. It succeeds when at least one sink took the whole record (Vault's
// rule); otherwise it returns an error wrapping ErrUnavailable and the caller must not make the
// change the record is about. A sink that fails is on the error log once, until it works again.
func (s *Sink) Write(r Record) error {
	r.Log = Tag
	r.Time = s.now().UTC()
	limit(&r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(appendRecord(s.buf[:0], &r), '\n')
	written := 0
	var errs []error
	if s.stdout != nil {
		if err := writeLine(s.stdout, s.buf, &s.stdoutTorn); err != nil {
			errs = append(errs, s.failed("stdout", err))
		} else {
			s.recovered("stdout")
			written++
		}
	}
	if s.path != "" {
		if err := s.writeFile(); err != nil {
			errs = append(errs, s.failed("file", err))
		} else {
			s.recovered("file")
			written++
		}
	}
	if written == 0 {
		return fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
	}
	return nil
}

// writeFile appends the buffered record to the file, opening it again if an earlier open failed.
func (s *Sink) writeFile() error {
	if s.file == nil {
		f, err := s.open(s.path)
		if err != nil {
			return err
		}
		s.file, s.fileTorn = f, endsMidLine(s.path)
	}
	return writeLine(s.file, s.buf, &s.fileTorn)
}

// writeLine writes the record line (newline-terminated) to w in one call, after a newline when the
// sink ends part-way through a line (*torn), and keeps *torn true to the sink's last byte: a write
// that failed after some bytes leaves it mid-line unless the last byte it wrote ended one, and a
// write that failed before any byte changes nothing. So a torn record never glues the next record
// onto its line, whatever number of failed writes comes between.
func writeLine(w io.Writer, line []byte, torn *bool) error {
	out := line
	if *torn {
		out = append([]byte{'\n'}, line...)
	}
	n, err := w.Write(out)
	if n > 0 && n <= len(out) {
		*torn = out[n-1] != '\n'
	}
	if err == nil && n < len(out) {
		err = io.ErrShortWrite
	}
	return err
}

// endsMidLine reports whether the file at path ends part-way through a line: a record torn by a full
// disk or a crash before this process opened it (at start, SIGHUP or after a failed open). When it
// cannot tell it says so: an empty line is all that costs.
func endsMidLine(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return true
	}
	if info.Size() == 0 {
		return false
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, info.Size()-1); err != nil {
		return true
	}
	return last[0] != '\n'
}

func (s *Sink) failed(sink string, err error) error {
	if !s.down[sink] {
		s.down[sink] = true
		s.logger.Error("audit sink cannot be written: writes are refused while no audit sink works", zap.String("sink", sink),
			zap.String("file", s.path), zap.Error(err))
	}
	return fmt.Errorf("%s: %w", sink, err)
}

func (s *Sink) recovered(sink string) {
	if s.down[sink] {
		delete(s.down, sink)
		s.logger.Info("audit sink works again", zap.String("sink", sink), zap.String("file", s.path))
	}
}

// Reopen closes the audit file and opens it again under its name (SIGHUP after a log rotation that
// moved it). When the new file cannot be opened the file sink is down until a later write or reopen
// can open it; the error says why.
func (s *Sink) Reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path == "" {
		return nil
	}
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
	f, err := s.open(s.path)
	if err != nil {
		s.logger.Error("audit file cannot be reopened", zap.String("file", s.path), zap.Error(err))
		return err
	}
	s.file, s.fileTorn = f, endsMidLine(s.path) // the same file when it was not rotated
	s.logger.Info("audit file reopened", zap.String("file", s.path))
	return nil
}

// Close closes the audit file.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	s.path = "" // later writes go to stdout only (if on), never to a closed file
	return err
}

// limit truncates every text field to FieldLimit bytes (on a character boundary).
func limit(r *Record) {
	for _, p := range []*string{&r.Service, &r.Action, &r.Method, &r.Resource, &r.ResourceID, &r.Principal,
		&r.PrincipalType, &r.AuthType, &r.RequestID, &r.ClientAddr, &r.Code, &r.Reason, &r.ChangeRequest, &r.Requester} {
		*p = Truncate(*p)
	}
	for i := range r.Approvers {
		r.Approvers[i] = Truncate(r.Approvers[i])
	}
}

// Truncate cuts text to FieldLimit bytes, marking the cut with "…".
func Truncate(text string) string {
	if len(text) <= FieldLimit {
		return text
	}
	return strings.ToValidUTF8(text[:FieldLimit], "") + "…"
}
