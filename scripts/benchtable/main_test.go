package main

import (
	"io"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkLimit/credential_read-2    	   20000	     20000 ns/op	        30.00 cpu-us/op	         0.2400 p50-ms	         3.050 p99-ms	     50000 req/s	    5000 B/op	      87 allocs/op
BenchmarkReads/credential_read-2    	   20000	     90000 ns/op	       577.0 allocs/req	        96.00 cpu-us/op	        24.00 limit-cpu-us/op	     40000 limit-req/s	         0.6900 p50-ms	         3.760 p99-ms	     10000 req/s	   60000 B/op	     664 allocs/op
BenchmarkWritesBatch/update-2       	    5000	    400000 ns/op	         4.000 p50-ms	        9.000 p99-ms	      2500 req/s
BenchmarkSecretsWrites/bolt/16_writers_one_credential-2 	    2000	    500000 ns/op	         0 failed	      1000 ok/s	         8.000 p50-ms	        20.00 p99-ms
BenchmarkFsyncLimit-2               	    1000	   1000000 ns/op	      1000 syncs/s
BenchmarkBoltCommitLimit-2          	    1000	   2000000 ns/op	       500.0 commits/s
BenchmarkChatActionPassThrough-2    	   10000	    166034 ns/op	         0.3600 direct-p50-ms	         1.648 gateway-p50-ms	       121.2 overhead-cpu-us/op	      6023 req/s
PASS
`

func TestTable(t *testing.T) {
	rows, err := parse(strings.NewReader(sample), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7", len(rows))
	}
	var out strings.Builder
	render(&out, rows)
	got := out.String()
	for _, want := range []string{
		"| Limit/credential_read | 50000 | 0.24 | 3.05 | 30 | 87 | - | (limit) |",
		// Its own interleaved limit, and the workload's allocations rather than -benchmem's.
		"| Reads/credential_read | 10000 | 0.69 | 3.76 | 96 | 577 | 40000 | 25%, 25% by CPU of its bare server (interleaved) |",
		// Durable writes are compared with the raw fsync rate of the same run, and with the
		// bbolt-shaped commit when that ran.
		"| WritesBatch/update | 2500 | 4.00 | 9.00 | - | - | - | 250% of the raw fsync rate; 500% of a bbolt-shaped commit |",
		// ok/s is read as req/s; extra metrics go to the last column.
		"| SecretsWrites/bolt/16_writers_one_credential | 1000 | 8.00 | 20.00 | - | - | - | 100% of the raw fsync rate; 200% of a bbolt-shaped commit | 0 failed |",
		"| BoltCommitLimit | - | - | - | - | - | - | - | 500 commits/s |",
		"| FsyncLimit | - | - | - | - | - | - | - | 1000 syncs/s |",
		// Chat is measured against the fake Slack, not the limit; its other metrics are listed.
		"| ChatActionPassThrough | 6023 | 1.65 | - | - | - | - | - | 0.36 direct-p50-ms, 121.2 overhead-cpu-us/op |",
		"OpenBao",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
