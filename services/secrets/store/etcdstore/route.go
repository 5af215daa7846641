package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The store sends its key-value requests itself rather than through the etcd client's balancer, so
// that it chooses the member of each request and knows what became of it:
//
//   - A request goes only to a member that serves: one that reports a leader in the newest term and is
//     not far behind it (serving). The balancer would send it to any member that answers, and a member
//     cut off from its peers answers – with no leader, or as a leader of an older term until it steps
//     down – so every write sent there waited the request timeout, and soon every client waited in one.
//   - Every request asks for a leader (clientv3.WithRequireLeader): a member without one refuses it at
//     once, before doing anything, and it is sent again to another member.
//   - When the member probe takes a member out of service, the requests in flight on it end at once
//     (its try's context is cancelled). That is the per-try deadline: it cuts a request on a member
//     that stopped serving, never one that is only slow on a healthy member.
//   - What ended without an answer is sent again to another member when that is safe: a read always; a
//     write only when its outcome is known (it never reached a member, or the member refused it for
//     want of a leader). A write cut in flight may have been applied: it fails (503) and is not repeated.

// errMemberDropped is the cause of a try's cancellation when the probe took its member out of service.
var errMemberDropped = errors.New("etcd member taken out of service")

// retryBackoff bounds the pause between two tries of one request (it doubles from retryBackoffMin):
// a request refused for want of a leader during an election is retried until the new leader is
// there or the request timeout ends.
const (
	retryBackoffMin = 10 * time.Millisecond
	retryBackoffMax = 200 * time.Millisecond
)

// etcdMaxRaftLag is how many raft entries a member may be behind the newest committed index the
// probe saw and still serve: a member further behind (catching up after a restart, or cut off) would
// hold every linearizable read until it caught up.
const etcdMaxRaftLag = 1000

// member is one etcd member, on a connection of its own.
type member struct {
	endpoint string
	conn     *grpc.ClientConn
	kv       clientv3.KV
	status   pb.MaintenanceClient

	mu sync.Mutex
	// inService is cancelled, with errMemberDropped, when the probe takes the member out of service;
	// the tries on it derive their context from it.
	inService context.Context
	drop      context.CancelCauseFunc
}

// dialMember connects to one member (http://host:port, https://host:port or host:port).
func dialMember(endpoint string, tlsCfg credentials.TransportCredentials, o Options) (*member, error) {
	target := endpoint
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		target = rest
	}
	target = strings.TrimSuffix(target, "/")
	// As the etcd client does: TLS when the settings name a TLS file or the endpoint is https (then
	// with the system's roots if no CA is given), plaintext otherwise.
	creds := tlsCfg
	switch {
	case strings.HasPrefix(endpoint, "http://"):
		creds = insecure.NewCredentials()
	case creds == nil && strings.HasPrefix(endpoint, "https://"):
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	case creds == nil:
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient("passthrough:///"+target,
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: o.KeepAliveTime, Timeout: o.KeepAliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(o.MaxRequestBytes+1<<20), grpc.MaxCallRecvMsgSize(1<<30)),
	)
	if err != nil {
		return nil, fmt.Errorf("etcd endpoint %s: %w", endpoint, err)
	}
	conn.Connect()
	m := &member{endpoint: endpoint, conn: conn, kv: clientv3.NewKVFromKVClient(memberKV{pb.NewKVClient(conn)}, nil),
		status: pb.NewMaintenanceClient(conn)}
	m.inService, m.drop = context.WithCancelCause(context.Background())
	return m, nil
}

// setServing takes the member out of service (ending its tries in flight) or puts it back.
func (m *member) setServing(serving bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if was := m.inService.Err() == nil; was == serving {
		return
	}
	if serving {
		m.inService, m.drop = context.WithCancelCause(context.Background())
	} else {
		m.drop(errMemberDropped)
	}
}

// try returns the context of one try on m: ctx, also cancelled when m is taken out of service.
func (m *member) try(ctx context.Context) (context.Context, context.CancelFunc) {
	m.mu.Lock()
	inService := m.inService
	m.mu.Unlock()
	tctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(inService, func() { cancel(errMemberDropped) })
	return tctx, func() { stop(); cancel(nil) }
}

// memberKV sends a member's KV calls without waiting for a connection (a member that cannot be
// reached fails the try at once, and it goes elsewhere) and records, in the peer the try's context
// carries, whether the call reached the member.
type memberKV struct{ pb.KVClient }

type reachedKey struct{}

func callOpts(ctx context.Context, opts []grpc.CallOption) []grpc.CallOption {
	opts = append(opts, grpc.WaitForReady(false))
	if p, ok := ctx.Value(reachedKey{}).(*peer.Peer); ok {
		opts = append(opts, grpc.Peer(p))
	}
	return opts
}

func (k memberKV) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	return k.KVClient.Range(ctx, in, callOpts(ctx, opts)...)
}

func (k memberKV) Put(ctx context.Context, in *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	return k.KVClient.Put(ctx, in, callOpts(ctx, opts)...)
}

func (k memberKV) DeleteRange(ctx context.Context, in *pb.DeleteRangeRequest, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return k.KVClient.DeleteRange(ctx, in, callOpts(ctx, opts)...)
}

func (k memberKV) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	return k.KVClient.Txn(ctx, in, callOpts(ctx, opts)...)
}

func (k memberKV) Compact(ctx context.Context, in *pb.CompactionRequest, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return k.KVClient.Compact(ctx, in, callOpts(ctx, opts)...)
}

// router picks the member of each request among those in service and tries again where safe.
type router struct {
	members []*member
	// serving are the members requests go to (all of them until the first probe).
	serving atomic.Pointer[[]*member]
	next    atomic.Uint64
	// leader is the member the last probe found leading and in service (nil: none known). Requests go
	// to it first: a write sent to a follower is forwarded to the leader, and a linearizable read on a
	// follower asks the leader for its read index, one more hop between members each; on 3 members
	// sharing 2 CPUs (make bench-peer STORE=etcd) that halved etcd's CPU per read. The others take a
	// request the leader could not answer, as before.
	leader atomic.Pointer[member]
	// leaderless, set by the member probe, fails every request at once (see Store.leaderless).
	leaderless *atomic.Bool
}

func newRouter(members []*member, leaderless *atomic.Bool) *router {
	r := &router{members: members, leaderless: leaderless}
	all := append([]*member(nil), members...)
	r.serving.Store(&all)
	return r
}

// setServing routes requests to the members at the indexes given (of r.members) and takes the
// others out of service, ending their tries in flight.
func (r *router) setServing(use []bool) {
	var serving []*member
	for i, m := range r.members {
		if use[i] {
			serving = append(serving, m)
		}
	}
	r.serving.Store(&serving)
	for i, m := range r.members {
		m.setServing(use[i])
	}
}

// pick returns the leader when it is in service and not in tried, else the next member in service,
// preferring one not in tried.
func (r *router) pick(tried []*member) *member {
	serving := *r.serving.Load()
	if len(serving) == 0 {
		serving = r.members
	}
	if l := r.leader.Load(); l != nil && containsMember(serving, l) && !containsMember(tried, l) {
		return l
	}
	n := r.next.Add(1)
	for i := range serving {
		m := serving[(int(n)+i)%len(serving)]
		if !containsMember(tried, m) {
			return m
		}
	}
	return serving[int(n)%len(serving)]
}

func containsMember(ms []*member, m *member) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

// errWriteCut is a write whose try ended without an answer after it reached a member: it may have
// been applied, so it is not repeated. It wraps rpctypes.ErrTimeoutDueToConnectionLost, which the
// store answers as unavailable (503).
var errWriteCut = fmt.Errorf("%w (the etcd member was taken out of service with the write in flight: it may or may not have been applied)", rpctypes.ErrTimeoutDueToConnectionLost)

// do runs call on a member in service, and again on another while the outcome allows (see the
// comment at the top of this file). write tells whether call may change the store.
func (r *router) do(ctx context.Context, write bool, call func(context.Context, clientv3.KV) error) error {
	var tried []*member
	backoff := retryBackoffMin
	for {
		if r.leaderless.Load() {
			return rpctypes.ErrNoLeader
		}
		m := r.pick(tried)
		reached := &peer.Peer{}
		tctx, cancel := m.try(clientv3.WithRequireLeader(context.WithValue(ctx, reachedKey{}, reached)))
		err := call(tctx, m.kv)
		dropped := context.Cause(tctx) == errMemberDropped
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		code := grpcCode(err)
		refusedNoLeader := errors.Is(err, rpctypes.ErrNoLeader)
		notSent := reached.Addr == nil && code == codes.Unavailable
		switch {
		case write && !notSent && !refusedNoLeader:
			if dropped {
				return errWriteCut
			}
			return err
		case !write && !dropped && code != codes.Unavailable:
			// A read the member answered with an error (too large, compacted...) ends here.
			return err
		}
		if !containsMember(tried, m) {
			tried = append(tried, m)
		}
		if len(tried) >= len(r.members) {
			// Every member was tried: wait a little (a leader election) before the next round.
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
			backoff = min(2*backoff, retryBackoffMax)
			tried = tried[:0]
		}
	}
}

// grpcCode is the gRPC code of an error of the etcd client, which turns the server's statuses into
// rpctypes.EtcdError values.
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}

// routedKV is the client's KV: every request goes through the router. While the probe finds the
// cluster leaderless, requests fail at once with rpctypes.ErrNoLeader (503) instead of waiting the
// request timeout.
type routedKV struct{ r *router }

var _ clientv3.KV = routedKV{}

func (k routedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.GetResponse, err error) {
	err = k.r.do(ctx, false, func(ctx context.Context, kv clientv3.KV) (err error) {
		resp, err = kv.Get(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (k routedKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (resp *clientv3.PutResponse, err error) {
	err = k.r.do(ctx, true, func(ctx context.Context, kv clientv3.KV) (err error) {
		resp, err = kv.Put(ctx, key, val, opts...)
		return err
	})
	return resp, err
}

func (k routedKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (resp *clientv3.DeleteResponse, err error) {
	err = k.r.do(ctx, true, func(ctx context.Context, kv clientv3.KV) (err error) {
		resp, err = kv.Delete(ctx, key, opts...)
		return err
	})
	return resp, err
}

func (k routedKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (resp *clientv3.CompactResponse, err error) {
	err = k.r.do(ctx, true, func(ctx context.Context, kv clientv3.KV) (err error) {
		resp, err = kv.Compact(ctx, rev, opts...)
		return err
	})
	return resp, err
}

func (k routedKV) Do(ctx context.Context, op clientv3.Op) (resp clientv3.OpResponse, err error) {
	err = k.r.do(ctx, !op.IsGet(), func(ctx context.Context, kv clientv3.KV) (err error) {
		resp, err = kv.Do(ctx, op)
		return err
	})
	return resp, err
}

func (k routedKV) Txn(ctx context.Context) clientv3.Txn { return &routedTxn{ctx: ctx, r: k.r} }

// routedTxn records a transaction and sends it, on Commit, through the router: a read-only one (gets
// in both branches) is a read, anything else a write.
type routedTxn struct {
	ctx              context.Context
	r                *router
	cmps             []clientv3.Cmp
	thenOps, elseOps []clientv3.Op
}

func (t *routedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *routedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thenOps = append(t.thenOps, ops...)
	return t
}

func (t *routedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elseOps = append(t.elseOps, ops...)
	return t
}

func (t *routedTxn) Commit() (resp *clientv3.TxnResponse, err error) {
	write := false
	for _, op := range append(append([]clientv3.Op(nil), t.thenOps...), t.elseOps...) {
		write = write || !op.IsGet()
	}
	err = t.r.do(t.ctx, write, func(ctx context.Context, kv clientv3.KV) (err error) {
		resp, err = kv.Txn(ctx).If(t.cmps...).Then(t.thenOps...).Else(t.elseOps...).Commit()
		return err
	})
	return resp, err
}

// serving returns the members of all (statuses[i] is member i's answer to the probe, nil when it did
// not answer) that requests may go to: those that report a leader in the newest term any member
// reports, no more than etcdMaxRaftLag entries behind the newest index. A member cut off from its
// peers reports no leader once an election timeout has passed; a leader cut off keeps calling itself
// leader, in the older term, until it steps down.
func serving(all []string, statuses []*clientv3.StatusResponse) []string {
	var term, index uint64
	for _, st := range statuses {
		if st != nil && st.Leader != 0 {
			term = max(term, st.RaftTerm)
		}
	}
	for _, st := range statuses {
		if st != nil && st.Leader != 0 && st.RaftTerm == term {
			index = max(index, st.RaftIndex)
		}
	}
	var out []string
	for i, st := range statuses {
		if st == nil || st.Leader == 0 || st.RaftTerm < term || st.RaftIndex+etcdMaxRaftLag < index {
			continue
		}
		out = append(out, all[i])
	}
	return out
}
