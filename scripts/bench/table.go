package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gantry-dev/gantry/internal/benchload"
)

// render prints the table in scripts/benchtable's style: one row per figure, its settings, and its
// share of its limit (a read: the bare server's req/s and CPU per request; a write: the raw fsync
// rate; chat: what the gateway adds to the direct call).
func render(w io.Writer, rows []row, fsync float64) {
	fmt.Fprintln(w, "| workload | settings | conns | ok/s | p50 ms | p99 ms | CPU µs/ok | limit | share of its limit | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|---|---|")
	for _, r := range rows {
		limit, share := "-", "-"
		switch r.kind {
		case "read":
			if r.limit != nil && r.limit.OKPerSec() > 0 {
				limit = fmt.Sprintf("bare server %s req/s, %s µs/req", num(r.limit.OKPerSec()), us(r.limit.CPUPerOK()))
				share = fmt.Sprintf("%.0f%% by req/s", 100*r.res.OKPerSec()/r.limit.OKPerSec())
				if c, lc := r.res.CPUPerOK(), r.limit.CPUPerOK(); c > 0 && lc > 0 {
					share += fmt.Sprintf(", %.0f%% by CPU", 100*float64(lc)/float64(c))
				}
			}
		case "write":
			limit = fmt.Sprintf("fsync %s/s", num(fsync))
			if fsync > 0 {
				share = fmt.Sprintf("%.0f%% of the raw fsync rate", 100*r.res.OKPerSec()/fsync)
			}
		case "chat":
			if r.limit != nil {
				limit = fmt.Sprintf("direct to Slack fake: %s req/s, p50 %s ms", num(r.limit.OKPerSec()), ms(r.limit.P50))
				share = fmt.Sprintf("adds %s ms at p50, %s µs of CPU per call", ms(r.res.P50-r.limit.P50), us(r.res.CPUPerOK()-r.limit.CPUPerOK()))
			}
		}
		errs := r.res.Errors(func(c int) bool { return c >= 200 && c <= 299 })
		if errs == "" {
			errs = "0"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", r.workload, r.settings, r.conns, num(r.res.OKPerSec()),
			ms(r.res.P50), ms(r.res.P99), us(r.res.CPUPerOK()), limit, share, errs)
	}
	for _, r := range rows {
		if r.res.FirstError != "" && !(r.limitOn && onlyRateLimited(r.res)) {
			fmt.Fprintf(w, "\nfirst error of %q (%s): %s\n", r.workload, r.settings, r.res.FirstError)
		}
	}
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64)
}

func us(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return strconv.FormatInt(d.Microseconds(), 10)
}

// ratio formats a/b as "1.23×", "-" when b is 0.
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// errorsOf is r's non-success answers, "0" when none.
func errorsOf(r benchload.Result) string {
	if e := r.Errors(func(c int) bool { return c >= 200 && c <= 299 }); e != "" {
		return e
	}
	return "0"
}

// onlyRateLimited says every answer that was not a success was a 429.
func onlyRateLimited(r benchload.Result) bool {
	for code := range r.ByStatus {
		if (code < 200 || code > 299) && code != 429 {
			return false
		}
	}
	return true
}
