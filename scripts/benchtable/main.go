// Command benchtable turns the output of `go test -bench` on stdin into one table of the workloads of
// make bench-inproc (the in-process benchmarks, which flatter: make bench measures from outside): requests per second, p50 and p99 latency, and each workload's share of the bare-server
// limit measured in the same run (BenchmarkLimit/<workload>, or the credential-read limit for a
// workload without its own), so the ratios hold on any machine. Benchmarks it does not know (the
// write workloads, new ones) get a row too, their ok/s (successful requests per second) read as req/s;
// metrics beyond req/s, p50 and p99 go to the last column.
// The raw benchmark lines are echoed to stderr.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// limitPrefix names the bare-server benchmarks; defaultLimit is the ceiling of workloads without one
// of their own.
const (
	limitPrefix  = "Limit/"
	defaultLimit = "credential_read"
)

// openBao is the reference measurement (another machine, wrk -t2 -c16): OpenBao reading one
// secret, and a bare net/http server returning the same body there.
const (
	openBaoReadsPerSec   = 11500.0
	openBaoMachineLimit  = 66700.0
	openBaoReadsPerServe = 10 // OpenBao has no service: 10 credentials are 10 reads
)

type row struct {
	name    string
	metrics map[string]float64
	order   []string
}

// benchLine is "BenchmarkName-N <iterations> <value> <unit> ...".
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader, echo io.Writer) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Fprintln(echo, line)
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		rw := row{name: m[1], metrics: map[string]float64{}}
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			rw.metrics[fields[i+1]] = v
			rw.order = append(rw.order, fields[i+1])
		}
		rows = append(rows, rw)
	}
	return rows, sc.Err()
}

// first returns the first metric of names that the row has.
func (r row) first(names ...string) (float64, bool) {
	for _, n := range names {
		if v, ok := r.metrics[n]; ok {
			return v, true
		}
	}
	return 0, false
}

func lastPart(name string) string { return name[strings.LastIndex(name, "/")+1:] }

// share is a workload's fraction of its limit: by throughput, and by CPU per request (the limit's CPU
// per request over the workload's), which holds up better when other work shares the machine.
type share struct {
	limitName      string
	byRPS, byCPU   float64
	hasRPS, hasCPU bool
	// also is a second reference, already worded ("31% of a bbolt-shaped commit"), or "".
	also string
}

func (s share) String() string {
	if s.limitName == "" || !s.hasRPS && !s.hasCPU {
		return "-"
	}
	out := []string{}
	if s.hasRPS {
		out = append(out, fmt.Sprintf("%.0f%%", 100*s.byRPS))
	}
	if s.hasCPU {
		out = append(out, fmt.Sprintf("%.0f%% by CPU", 100*s.byCPU))
	}
	text := strings.Join(out, ", ") + " of " + s.limitName
	if s.also != "" {
		text += "; " + s.also
	}
	return text
}

func render(w io.Writer, rows []row) {
	limits := map[string]row{}
	for _, r := range rows {
		if rest, ok := strings.CutPrefix(r.name, limitPrefix); ok {
			limits[rest] = r
		}
	}
	shareOf := func(r row) share {
		if _, relative := r.metrics["direct-p50-ms"]; relative {
			return share{} // measured against its own reference (chat against the fake Slack)
		}
		// A workload that measured its own bare server, interleaved with it, is compared with that.
		if lrps, ok := r.metrics["limit-req/s"]; ok {
			s := share{limitName: "its bare server (interleaved)"}
			if rps := r.metrics["req/s"]; rps > 0 && lrps > 0 {
				s.byRPS, s.hasRPS = rps/lrps, true
			}
			if cpu, lcpu := r.metrics["cpu-us/op"], r.metrics["limit-cpu-us/op"]; cpu > 0 && lcpu > 0 {
				s.byCPU, s.hasCPU = lcpu/cpu, true
			}
			return s
		}
		// Durable writes are bounded by the disk: compared with the raw fsync rate of the same run.
		if isWrite(r.name) {
			if syncs := fsyncRate(rows); syncs > 0 {
				if rps, _ := r.first("req/s", "ok/s"); rps > 0 {
					s := share{limitName: "the raw fsync rate", byRPS: rps / syncs, hasRPS: true}
					if commits := metricOf(rows, "BoltCommitLimit", "commits/s"); commits > 0 {
						s.also = fmt.Sprintf("%.0f%% of a bbolt-shaped commit", 100*rps/commits)
					}
					return s
				}
			}
		}
		name := lastPart(r.name)
		limit, ok := limits[name]
		if !ok {
			name = defaultLimit
			if limit, ok = limits[name]; !ok {
				return share{}
			}
		}
		s := share{limitName: name}
		if rps, _ := r.first("req/s", "ok/s"); rps > 0 && limit.metrics["req/s"] > 0 {
			lrps := limit.metrics["req/s"]
			s.byRPS, s.hasRPS = rps/lrps, true
		}
		if cpu, lcpu := r.metrics["cpu-us/op"], limit.metrics["cpu-us/op"]; cpu > 0 && lcpu > 0 {
			s.byCPU, s.hasCPU = lcpu/cpu, true
		}
		return s
	}
	shown := map[string]bool{"req/s": true, "ok/s": true, "p50-ms": true, "p99-ms": true, "gateway-p50-ms": true, "cpu-us/op": true,
		"limit-req/s": true, "limit-cpu-us/op": true, "allocs/req": true,
		"ns/op": true, "B/op": true, "allocs/op": true}
	_, _ = fmt.Fprintln(w, "| workload | req/s | p50 ms | p99 ms | CPU µs/req | allocs/req | bare limit req/s | share of its limit | other |")
	_, _ = fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|---|")
	for _, r := range rows {
		rps, hasRPS := r.first("req/s", "ok/s")
		p50, _ := r.first("p50-ms", "gateway-p50-ms")
		p99, _ := r.first("p99-ms")
		cpu, hasCPU := r.first("cpu-us/op")
		sh := shareOf(r).String()
		if _, isLimit := strings.CutPrefix(r.name, limitPrefix); isLimit {
			sh = "(limit)"
		}
		allocs, hasAllocs := r.first("allocs/req", "allocs/op")
		var other []string
		for _, k := range r.order {
			if !shown[k] {
				other = append(other, fmt.Sprintf("%s %s", strconv.FormatFloat(r.metrics[k], 'f', -1, 64), k))
			}
		}
		limitRPS, hasLimit := r.first("limit-req/s")
		_, _ = fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, num(rps, hasRPS), ms(p50), ms(p99),
			num(cpu, hasCPU), num(allocs, hasAllocs), num(limitRPS, hasLimit), sh, strings.Join(other, ", "))
	}
	openBaoReference(w, rows, shareOf)
}

// isWrite tells the durable write workloads (BenchmarkSecretsWrites, BenchmarkWrites*).
func isWrite(name string) bool {
	return strings.HasPrefix(name, "SecretsWrites") || strings.HasPrefix(name, "Writes")
}

// fsyncRate is the syncs/s of the run's BenchmarkFsyncLimit row, 0 when it did not run.
func fsyncRate(rows []row) float64 { return metricOf(rows, "FsyncLimit", "syncs/s") }

// metricOf is the metric of the row named name, 0 when that benchmark did not run.
func metricOf(rows []row, name, metric string) float64 {
	for _, r := range rows {
		if r.name == name {
			return r.metrics[metric]
		}
	}
	return 0
}

// openBaoReference scales the OpenBao figures to this run by the share of the limit.
func openBaoReference(w io.Writer, rows []row, shareOf func(row) share) {
	for _, r := range rows {
		var perOpenBaoRead float64
		switch r.name {
		case "Reads/credential_read":
			perOpenBaoRead = 1
		case "Reads/service_read_10_credentials":
			perOpenBaoRead = openBaoReadsPerServe
		default:
			continue
		}
		// Shares against the credential-read limit: OpenBao's figure is for one secret's body.
		s := shareOf(row{name: "Reads/" + defaultLimit, metrics: credentialLimitOf(rows, r)})
		if s.limitName == "" {
			continue
		}
		if perOpenBaoRead == 1 {
			_, _ = fmt.Fprintf(w, "\nReference, not measured here (an earlier round, on another machine, wrk -t2 -c16): OpenBao read one secret at %.1fk req/s where a bare\n"+
				"net/http server reached %.1fk (%.0f%% of it). Scaled by this run's shares of the credential-read limit (in-process shares,\n"+
				"which flatter: reads measured from outside were 1.05x OpenBao in an earlier round; make bench-peer measures it side by side):\n",
				openBaoReadsPerSec/1000, openBaoMachineLimit/1000, 100*openBaoReadsPerSec/openBaoMachineLimit)
		}
		baoRate := openBaoReadsPerSec / perOpenBaoRead
		line := fmt.Sprintf("- %s: ", r.name)
		if s.hasRPS {
			line += fmt.Sprintf("by req/s %.1fk req/s there, %.1fx OpenBao", s.byRPS*openBaoMachineLimit/1000, s.byRPS*openBaoMachineLimit/baoRate)
		}
		if s.hasCPU {
			line += fmt.Sprintf("; by CPU %.1fk req/s, %.1fx OpenBao", s.byCPU*openBaoMachineLimit/1000, s.byCPU*openBaoMachineLimit/baoRate)
		}
		if perOpenBaoRead > 1 {
			line += fmt.Sprintf(" (OpenBao reads 10 secrets in 10 requests: %.2fk services/s)", baoRate/1000)
		}
		_, _ = fmt.Fprintln(w, line)
	}
}

// credentialLimitOf returns the metrics of r with the credential read's limit in place of its own:
// the interleaved limit of the credential-read row when it has one, else r's metrics as they are (the
// Limit/credential_read row then applies).
func credentialLimitOf(rows []row, r row) map[string]float64 {
	out := map[string]float64{}
	for k, v := range r.metrics {
		out[k] = v
	}
	delete(out, "limit-req/s")
	delete(out, "limit-cpu-us/op")
	for _, c := range rows {
		if c.name == "Reads/"+defaultLimit {
			for _, k := range []string{"limit-req/s", "limit-cpu-us/op"} {
				if v, ok := c.metrics[k]; ok {
					out[k] = v
				}
			}
		}
	}
	return out
}

func num(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func ms(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func main() {
	rows, err := parse(os.Stdin, os.Stderr)
	if err != nil {
		_, _ = fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		_, _ = fmt.Fprintln(os.Stderr, "benchtable: no benchmark results on stdin")
		os.Exit(1)
	}
	render(os.Stdout, rows)
}
