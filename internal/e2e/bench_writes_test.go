package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/etcdtest"
)

// BenchmarkSecretsWrites measures credential updates (each a new revision, sealed under a fresh data
// key, durably stored) through the gateway, once per store (bbolt; a single etcd member with fsync
// on, embedded in the test process):
//
//   - sequential_writer: one client, one update after the other;
//   - 16_writers_one_credential: 16 clients updating the same credential (they queue; none may fail);
//   - 16_writers_100_credentials: 16 clients spread over 100 credentials.
//
// Run BenchmarkFsyncLimit beside it for the disk's own figure. Numbers are printed, never asserted;
// only a failed update (a lost race was answered 409) fails the benchmark.
func BenchmarkSecretsWrites(b *testing.B) {
	b.Logf("GOMAXPROCS=%d", runtime.GOMAXPROCS(0))
	b.Run("bolt", func(b *testing.B) { benchWrites(b, startStack(b, unlimitedWrites)) })
	b.Run("etcd", func(b *testing.B) {
		cluster := etcdtest.New(b, 1, zap.NewNop(), etcdtest.Durable())
		onBenchEtcd := onEtcd(cluster.Endpoints(), "/bench-writes/")
		benchWrites(b, startStack(b, func(c *stack.Config) { onBenchEtcd(c); unlimitedWrites(c) }))
	})
}

func benchWrites(b *testing.B, s *testStack) {
	var created atomic.Int64
	newCredentials := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = s.createCredential(fmt.Sprintf("write-bench-%d", created.Add(1)), map[string]any{"password": "v0"})
		}
		return ids
	}
	update := func(id string, i int) error {
		r := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": fmt.Sprint("v", i)}})
		if r.code != 200 {
			return fmt.Errorf("update %s: status %d: %s", id, r.code, r.body)
		}
		return nil
	}

	b.Run("sequential_writer", func(b *testing.B) {
		id := newCredentials(1)[0]
		reportWrites(b, 1, func(i int) error { return update(id, i) })
	})
	b.Run("16_writers_one_credential", func(b *testing.B) {
		id := newCredentials(1)[0]
		reportWrites(b, 16, func(i int) error { return update(id, i) })
	})
	b.Run("16_writers_100_credentials", func(b *testing.B) {
		ids := newCredentials(100)
		reportWrites(b, 16, func(i int) error { return update(ids[i%len(ids)], i) })
	})
}

// reportWrites runs op b.N times from the given number of clients and reports requests per second,
// the p50/p99 latency of the successful ones and the number of failed ones; any failure (a write
// refused for losing a race was the old 409) fails the benchmark, after the figures are reported.
func reportWrites(b *testing.B, clients int, op func(i int) error) {
	b.Helper()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		all      = make([]time.Duration, 0, b.N)
		failures int
		first    error
		wg       sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			var local []time.Duration
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				t0 := time.Now()
				err := op(int(i))
				if err == nil {
					local = append(local, time.Since(t0))
					continue
				}
				mu.Lock()
				if failures++; first == nil {
					first = err
				}
				mu.Unlock()
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ok/s")
	b.ReportMetric(ms(percentile(all, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(all, 0.99)), "p99-ms")
	b.ReportMetric(float64(failures), "failed")
	if failures > 0 {
		b.Errorf("%d of %d writes failed (0 expected; %.0f ok/s), the first: %v", failures, b.N, float64(len(all))/elapsed.Seconds(), first)
	}
}

// BenchmarkFsyncLimit is the disk's limit for durable writes, the reference of the figures above:
// per iteration, 4 KiB written at the start of a file in a temporary folder (where the stacks keep
// their data) and fdatasync, one after the other. A store that syncs every write alone cannot go
// faster; group commit goes past it by syncing many writes at once.
func BenchmarkFsyncLimit(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "fsync-limit"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	if _, err := f.WriteAt(block, 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		block[0] = byte(i)
		if _, err := f.WriteAt(block, 0); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "syncs/s")
}

// BenchmarkBoltCommitLimit is the disk's limit for a store that commits as bbolt does, the ceiling
// of a lone writer: per iteration, the new pages of a credential update (6 pages, 24 KiB, written
// where the last ones ended, in a file filled beforehand) and fdatasync, then the meta page (4 KiB
// at the start) and fdatasync again — bbolt's two syncs, without its CPU. On the development
// machine it is about a quarter of BenchmarkFsyncLimit's rate (one 4 KiB overwrite per sync), which
// is what bounds the sequential writer, not the request handling.
func BenchmarkBoltCommitLimit(b *testing.B) {
	const (
		page      = 4096
		dataPages = 6
		fileSize  = 64 << 20
	)
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "commit-limit"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, fileSize), 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	data, meta := make([]byte, dataPages*page), make([]byte, page)
	b.ResetTimer()
	start := time.Now()
	off := int64(2 * page)
	for i := 0; b.Loop(); i++ {
		data[0], meta[0] = byte(i), byte(i)
		if _, err := f.WriteAt(data, off); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(meta, 0); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
		if off += int64(len(data)); off+int64(len(data)) > fileSize {
			off = 2 * page
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
}
