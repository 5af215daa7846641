// Command benchtable turns the output of `go test -bench` on stdin into one table of the workloads of
// make bench: requests per second, p50 and p99 latency, and each workload's share of the bare-server
// limit measured in the same run (BenchmarkLimit/<workload>, or the credential-read limit for a
// workload without its own), so the ratios hold on any machine. Benchmarks it does not know (the
// write workloads, new ones) get a row too; metrics beyond req/s, p50 and p99 go to the last column.
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

func render(w io.Writer, rows []row) {
	limits := map[string]float64{}
	for _, r := range rows {
		if rest, ok := strings.CutPrefix(r.name, limitPrefix); ok {
			limits[rest] = r.metrics["req/s"]
		}
	}
	shown := map[string]bool{"req/s": true, "p50-ms": true, "p99-ms": true, "gateway-p50-ms": true, "ns/op": true, "B/op": true, "allocs/op": true}
	_, _ = fmt.Fprintln(w, "| workload | req/s | p50 ms | p99 ms | % of bare limit | allocs/op | other |")
	_, _ = fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|")
	var credentialShare float64
	for _, r := range rows {
		rps, hasRPS := r.first("req/s")
		p50, _ := r.first("p50-ms", "gateway-p50-ms")
		p99, _ := r.first("p99-ms")
		share := "-"
		if _, isLimit := strings.CutPrefix(r.name, limitPrefix); isLimit {
			share = "(limit)"
		} else if _, relative := r.metrics["direct-p50-ms"]; hasRPS && !relative {
			// A workload measured against its own reference (chat against the fake Slack) has no
			// bare-server share.
			limitName := lastPart(r.name)
			limit, ok := limits[limitName]
			if !ok {
				limitName = defaultLimit
				limit, ok = limits[limitName]
			}
			if ok && limit > 0 {
				share = fmt.Sprintf("%.0f%% of %s", 100*rps/limit, limitName)
				if strings.HasSuffix(r.name, "/"+defaultLimit) && strings.HasPrefix(r.name, "Reads/") {
					credentialShare = rps / limit
				}
			}
		}
		allocs := "-"
		if v, ok := r.metrics["allocs/op"]; ok {
			allocs = strconv.FormatFloat(v, 'f', 0, 64)
		}
		var other []string
		for _, k := range r.order {
			if !shown[k] {
				other = append(other, fmt.Sprintf("%s %s", strconv.FormatFloat(r.metrics[k], 'f', -1, 64), k))
			}
		}
		_, _ = fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.name, num(rps, hasRPS), ms(p50), ms(p99), share, allocs, strings.Join(other, ", "))
	}
	if credentialShare > 0 {
		_, _ = fmt.Fprintf(w, "\nReference, not measured here: OpenBao read one secret at %.1fk req/s where the bare-server limit was %.1fk (%.0f%% of it).\n",
			openBaoReadsPerSec/1000, openBaoMachineLimit/1000, 100*openBaoReadsPerSec/openBaoMachineLimit)
		_, _ = fmt.Fprintf(w, "At this run's share of the limit, gantry's credential read on that machine would be about %.1fk req/s, %.1fx OpenBao.\n",
			credentialShare*openBaoMachineLimit/1000, credentialShare*openBaoMachineLimit/openBaoReadsPerSec)
		for _, r := range rows {
			if r.name == "Reads/service_read_10_credentials" {
				if lim := limits[defaultLimit]; lim > 0 {
					scaled := r.metrics["req/s"] / lim * openBaoMachineLimit
					_, _ = fmt.Fprintf(w, "Service read (10 credentials) scaled the same way: about %.1fk req/s, %.1fx OpenBao's %d reads for 10 secrets (%.2fk/s).\n",
						scaled/1000, scaled/(openBaoReadsPerSec/openBaoReadsPerServe), openBaoReadsPerServe, openBaoReadsPerSec/openBaoReadsPerServe/1000)
				}
			}
		}
	}
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
