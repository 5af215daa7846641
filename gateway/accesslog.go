package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// Access log: one line per request of the REST listener in Envoy's default format,
//
//	[START_TIME] "METHOD PATH PROTOCOL" CODE FLAGS BYTES_RECEIVED BYTES_SENT DURATION UPSTREAM_TIME "X-FORWARDED-FOR" "USER-AGENT" "X-REQUEST-ID" "AUTHORITY" "UPSTREAM_HOST"
//
// The path is logged without its query string: login callbacks carry one-time codes there. The
// method, path, user agent and authority are the client's: each is cut to logging.UntrustedLimit
// characters (the request id is already a short plain token), so no request writes a long line.
// Lines are buffered and flushed every accessLogFlush (Envoy flushes every second), so logging costs a
// request no system call.

// UPSTREAM_HOST, UPSTREAM_TIME and FLAGS (Envoy's response flags, upstream.Flag*) are what the
// request's cluster recorded in the upstream.RequestInfo the request's context carries.

const (
	accessLogFlush    = 100 * time.Millisecond
	accessLogMaxBytes = 4 << 20 // beyond this a request writes the buffer out itself
)

// accessLog buffers lines and writes them out in the background.
type accessLog struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	out  io.Writer
	file *os.File // closed on shutdown when the log is a file
	stop chan struct{}
	done chan struct{}
}

// openAccessLog opens the configured destination: "stdout", "off" (nil log) or a file path.
func openAccessLog(dest string) (*accessLog, error) {
	l := &accessLog{stop: make(chan struct{}), done: make(chan struct{})}
	switch dest {
	case "off", "":
		return nil, nil
	case "stdout":
		l.out = logging.Stdout // shared with the audit trail: their lines never interleave
	default:
		f, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, settings.Invalid("access-log", "%v", err)
		}
		l.out, l.file = f, f
	}
	go l.loop()
	return l, nil
}

func (l *accessLog) loop() {
	defer close(l.done)
	t := time.NewTicker(accessLogFlush)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.flush()
			return
		case <-t.C:
			l.flush()
		}
	}
}

func (l *accessLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		_, _ = l.out.Write(l.buf.Bytes())
		l.buf.Reset()
	}
}

// close writes what is buffered and closes a log file.
func (l *accessLog) close() {
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
	if l.file != nil {
		_ = l.file.Close()
	}
}

// wrap logs every request that passes through next.
func (l *accessLog) wrap(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ri := &upstream.RequestInfo{}
		rec := &countingWriter{ResponseWriter: w}
		body := &countingBody{ReadCloser: r.Body}
		if r.Body != nil {
			r.Body = body
		}
		next.ServeHTTP(rec, r.WithContext(upstream.WithRequestInfo(r.Context(), ri)))
		l.write(r, rec, body.n, start, ri)
	})
}

func (l *accessLog) write(r *http.Request, rec *countingWriter, received int64, start time.Time, ri *upstream.RequestInfo) {
	code := rec.code
	if code == 0 {
		code = http.StatusOK
	}
	flags, host, upstreamTime := "-", "-", "-"
	upHost, upTime, upFlags := ri.Upstream()
	if len(upFlags) > 0 {
		flags = strings.Join(upFlags, ",")
	}
	if upHost != "" {
		host = upHost
		upstreamTime = strconv.FormatInt(upTime.Milliseconds(), 10)
	}
	xff := "-"
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		xff = ip
	}
	// The line is Envoy's default format, built with appends (a fmt.Sprintf of 13 verbs was most of
	// the access log's cost on every request); %q is strconv.Quote's quoting, as fmt's.
	var scratch [512]byte
	b := append(scratch[:0], '[')
	b = start.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
	b = append(b, "] "...)
	b = strconv.AppendQuote(b, logging.Truncate(r.Method)+" "+logging.Truncate(r.URL.Path)+" "+r.Proto)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(append(append(b, ' '), flags...), ' ')
	b = strconv.AppendInt(b, received, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, rec.n, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, time.Since(start).Milliseconds(), 10)
	b = append(append(append(b, ' '), upstreamTime...), ' ')
	b = strconv.AppendQuote(b, xff)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, orDash(logging.Truncate(r.UserAgent())))
	b = append(b, ' ')
	b = strconv.AppendQuote(b, orDash(r.Header.Get(wirekeys.RequestID)))
	b = append(b, ' ')
	b = strconv.AppendQuote(b, logging.Truncate(r.Host))
	b = append(b, ' ')
	b = strconv.AppendQuote(b, host)
	b = append(b, '\n')
	l.mu.Lock()
	l.buf.Write(b)
	full := l.buf.Len() >= accessLogMaxBytes
	l.mu.Unlock()
	if full {
		l.flush()
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// countingWriter remembers the status and counts the bytes of the response.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and friends.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the bytes of the request body read.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}
