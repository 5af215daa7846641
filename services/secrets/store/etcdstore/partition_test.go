package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/etcdtest"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// TestServing: the client keeps the members that report a leader in the newest term, not far behind;
// a member without a leader, one still calling itself leader in an older term (a leader cut off from
// its peers before it steps down), and one that does not answer are dropped.
func TestServing(t *testing.T) {
	all := []string{"a", "b", "c"}
	st := func(leader, term, index uint64) *etcdserverpb.StatusResponse {
		return &etcdserverpb.StatusResponse{Leader: leader, RaftTerm: term, RaftIndex: index}
	}
	for _, tc := range []struct {
		name     string
		statuses []*etcdserverpb.StatusResponse
		want     []string
	}{
		{"all serving", []*etcdserverpb.StatusResponse{st(1, 2, 100), st(1, 2, 99), st(1, 2, 100)}, []string{"a", "b", "c"}},
		{"follower cut: no leader", []*etcdserverpb.StatusResponse{st(1, 2, 100), st(0, 2, 90), st(1, 2, 100)}, []string{"a", "c"}},
		{"leader cut: an older term", []*etcdserverpb.StatusResponse{st(1, 2, 90), st(2, 3, 100), st(2, 3, 101)}, []string{"b", "c"}},
		{"silent", []*etcdserverpb.StatusResponse{nil, st(2, 3, 100), st(2, 3, 101)}, []string{"b", "c"}},
		{"far behind", []*etcdserverpb.StatusResponse{st(2, 3, 100), st(2, 3, 100+etcdMaxRaftLag+1), st(2, 3, 100+etcdMaxRaftLag)}, []string{"b", "c"}},
		{"an election: none", []*etcdserverpb.StatusResponse{st(0, 3, 100), st(0, 3, 100), nil}, nil},
	} {
		statuses := make([]*clientv3.StatusResponse, len(tc.statuses))
		for i, s := range tc.statuses {
			statuses[i] = (*clientv3.StatusResponse)(s)
		}
		if got := serving(all, statuses); !slices.Equal(got, tc.want) {
			t.Errorf("%s: serving = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// fakeMemberKV is a member's KV whose every call is answered by answer, after recording that the call
// reached the member when reached says so.
type fakeMemberKV struct {
	clientv3.KV
	name    string
	reached bool
	answer  func(ctx context.Context) error
	calls   *[]string
	mu      *sync.Mutex
}

func (k *fakeMemberKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return &clientv3.PutResponse{}, k.call(ctx)
}

func (k *fakeMemberKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return &clientv3.GetResponse{}, k.call(ctx)
}

func (k *fakeMemberKV) call(ctx context.Context) error {
	k.mu.Lock()
	*k.calls = append(*k.calls, k.name)
	k.mu.Unlock()
	if p, ok := ctx.Value(reachedKey{}).(*peer.Peer); ok && k.reached {
		p.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2379}
	}
	return k.answer(ctx)
}

// TestRouterRetriesOnlyWhatIsSafe: a try that ends without an answer is sent to another member when
// that cannot apply a change twice (a read; a write that never reached its member, or that the
// member refused for want of a leader), never when it may have been applied (a write cut in flight,
// or that timed out on the member).
func TestRouterRetriesOnlyWhatIsSafe(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "connection refused")
	for _, tc := range []struct {
		name    string
		write   bool
		reached bool
		// first is the first member's answer; the second member answers nil.
		first     func(ctx context.Context) error
		dropFirst bool
		wantErr   error
		wantCalls int
	}{
		{"read refused for want of a leader", false, true, func(context.Context) error { return rpctypes.ErrNoLeader }, false, nil, 2},
		{"read on a member taken out of service", false, true, nil, true, nil, 2},
		{"read that timed out on the member", false, true, func(context.Context) error { return rpctypes.ErrTimeout }, false, nil, 2},
		{"read answered with an error", false, true, func(context.Context) error { return rpctypes.ErrCompacted }, false, rpctypes.ErrCompacted, 1},
		{"write that never reached a member", true, false, func(context.Context) error { return unavailable }, false, nil, 2},
		{"write refused for want of a leader", true, true, func(context.Context) error { return rpctypes.ErrNoLeader }, false, nil, 2},
		{"write cut in flight", true, true, nil, true, errWriteCut, 1},
		{"write that timed out on the member", true, true, func(context.Context) error { return rpctypes.ErrTimeout }, false, rpctypes.ErrTimeout, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			var mu sync.Mutex
			var leaderless atomic.Bool
			first := &member{endpoint: "first"}
			first.inService, first.drop = context.WithCancelCause(context.Background())
			second := &member{endpoint: "second"}
			second.inService, second.drop = context.WithCancelCause(context.Background())
			answer := tc.first
			var r *router
			if tc.dropFirst {
				// The member is taken out of service while the try waits on it.
				answer = func(ctx context.Context) error {
					r.setServing([]bool{false, true})
					<-ctx.Done()
					return status.Error(codes.Canceled, "context canceled")
				}
			}
			first.kv = &fakeMemberKV{name: "first", reached: tc.reached, answer: answer, calls: &calls, mu: &mu}
			second.kv = &fakeMemberKV{name: "second", reached: true, answer: func(context.Context) error { return nil }, calls: &calls, mu: &mu}
			r = newRouter([]*member{first, second}, &leaderless)
			r.next.Store(^uint64(0)) // the next pick is the first member
			kv := routedKV{r}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var err error
			if tc.write {
				_, err = kv.Put(ctx, "k", "v")
			} else {
				_, err = kv.Get(ctx, "k")
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("error = %v, want %v", err, tc.wantErr)
			}
			if len(calls) != tc.wantCalls || calls[0] != "first" {
				t.Errorf("tries on %v, want %d starting with the first member", calls, tc.wantCalls)
			}
		})
	}
}

// partitionLoad runs workers that each update their own credential and read it back, counting the
// operations that succeed in a row (any failure starts the count again).
type partitionLoad struct {
	s                 *Store
	streak, failures  atomic.Int64
	counting          atomic.Bool
	stop              chan struct{}
	done              sync.WaitGroup
	firstErr          atomic.Value
	lastFailedAt      atomic.Int64
	countingSinceNano atomic.Int64
}

func startPartitionLoad(t *testing.T, s *Store, workers int) *partitionLoad {
	l := &partitionLoad{s: s, stop: make(chan struct{})}
	for w := range workers {
		cur := storetest.NewCred(fmt.Sprintf("w%d", w), fmt.Sprintf("w%d", w), 1)
		storetest.PutCred(t, s, cur, 0)
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					next := storetest.NextCred(cur)
					if err = s.PutCredential(context.Background(), next, cur.Revision); err == nil {
						cur = next
					}
				} else {
					_, err = s.GetCredential(context.Background(), cur.ID)
				}
				if err != nil && errors.Is(err, store.ErrRevisionConflict) {
					err = nil // a write of ours answered 503 had been applied: read the revision again
				}
				if err != nil || i%2 == 0 && cur.Revision == 0 {
					if got, gerr := s.GetCredential(context.Background(), cur.ID); gerr == nil {
						cur = got
					}
				}
				l.record(err)
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

func (l *partitionLoad) record(err error) {
	if !l.counting.Load() {
		return
	}
	if err != nil {
		l.failures.Add(1)
		l.streak.Store(0)
		l.lastFailedAt.Store(time.Now().UnixNano())
		l.firstErr.CompareAndSwap(nil, err)
		return
	}
	l.streak.Add(1)
}

// count starts counting from now.
func (l *partitionLoad) count() {
	l.streak.Store(0)
	l.failures.Store(0)
	l.lastFailedAt.Store(0)
	l.countingSinceNano.Store(time.Now().UnixNano())
	l.counting.Store(true)
}

func (l *partitionLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.done.Wait()
}

// inService reports whether the store sends requests to member i.
func inService(s *Store, i int) bool {
	return slices.Contains(*s.router.serving.Load(), s.router.members[i])
}

// TestMemberCutOffFromPeers: with one member of three cut off from its peers (it still answers
// clients), the store takes it out of service at the next probe and requests flow on the two others;
// once the partition heals it serves again. Before, the client kept sending requests to the cut-off
// member, which answers, and every write sent there waited the request timeout: the load stalled for
// the whole cut. A follower and the leader are cut in turn (a cut leader leads its old term until it
// steps down).
func TestMemberCutOffFromPeers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3-member etcd cluster")
	}
	c := etcdtest.New(t, 3, zap.NewNop())
	opts := DefaultOptions()
	opts.Endpoints = c.Endpoints()
	opts.Prefix = "/partition/"
	opts.ProbeInterval = 100 * time.Millisecond
	opts.ProbeTimeout = 500 * time.Millisecond
	s, err := Open(context.Background(), opts, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	load := startPartitionLoad(t, s, 6)
	defer load.end()

	// The streak the load must reach with the member cut off: far more operations than the workers
	// could run between two waves of writes held by the cut-off member.
	const streak = 300
	for _, victim := range []string{"follower", "leader"} {
		var i int
		testwait.Until(t, "a leader", func() bool { return c.Leader() >= 0 })
		if leader := c.Leader(); victim == "leader" {
			i = leader
		} else {
			i = (leader + 1) % 3
		}
		testwait.Until(t, "every member in service before the cut", func() bool {
			return inService(s, 0) && inService(s, 1) && inService(s, 2)
		})
		cutAt := time.Now()
		load.count()
		c.PartitionPeers(i)
		testwait.Until(t, fmt.Sprintf("%d operations in a row succeeding with the %s (member %d) cut off", streak, victim, i), func() bool {
			return load.streak.Load() >= streak
		})
		if inService(s, i) {
			t.Errorf("the cut-off %s is still in service", victim)
		}
		var lastFailure time.Duration
		if at := load.lastFailedAt.Load(); at != 0 {
			lastFailure = time.Unix(0, at).Sub(cutAt)
		}
		t.Logf("%s cut off: %d operations failed, the last %v after the cut (first error: %v)", victim, load.failures.Load(), lastFailure.Round(time.Millisecond), load.firstErr.Load())
		c.HealPeers(i)
		testwait.Until(t, fmt.Sprintf("the %s back in service after the heal", victim), func() bool { return inService(s, i) })
	}
}
