package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// etcdReplicas holds one JSON store.ReplicaKeys per running replica, each on a lease of its own:
//
//	replicas/<name>                    store.ReplicaKeys (JSON), on the publishing replica's lease
//
// Like login/used/ it needs no schema version: a record lives for a lease's TTL, and a build that does
// not know the area only ignores it.
const etcdReplicas = "replicas/"

var _ store.ReplicaRegistry = (*Store)(nil)

// replicaLeases remembers the lease each published name is on, so a republish revokes the one before.
type replicaLeases struct {
	mu     sync.Mutex
	leases map[string]clientv3.LeaseID
}

// PublishReplicaKeys implements store.ReplicaRegistry: a new lease per publish, the record put on it,
// then the previous lease revoked. No keep-alive stream to lose: a replica that stops republishing
// (dead, frozen, cut off from etcd) disappears when its last lease runs out.
func (s *Store) PublishReplicaKeys(ctx context.Context, r store.ReplicaKeys, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !codec.ValidKeyPart(r.Name) {
		return errors.New("secrets: etcd store: a replica name must be non-empty and free of 0x00")
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	lease, err := s.cli.Grant(cctx, max(1, int64(math.Ceil(ttl.Seconds()))))
	if err != nil {
		return s.result(ctx, "PublishReplicaKeys", err)
	}
	if _, err := s.cli.Put(cctx, s.key(etcdReplicas, []byte(r.Name)), string(data), clientv3.WithLease(lease.ID)); err != nil {
		s.revokeLease(cctx, lease.ID)
		return s.result(ctx, "PublishReplicaKeys", err)
	}
	s.replicaLeases.mu.Lock()
	if s.replicaLeases.leases == nil {
		s.replicaLeases.leases = map[string]clientv3.LeaseID{}
	}
	previous, had := s.replicaLeases.leases[r.Name]
	s.replicaLeases.leases[r.Name] = lease.ID
	s.replicaLeases.mu.Unlock()
	if had {
		s.revokeLease(cctx, previous) // holds nothing now; it would run out anyway
	}
	return nil
}

// WithdrawReplicaKeys implements store.ReplicaRegistry.
func (s *Store) WithdrawReplicaKeys(ctx context.Context, name string) error {
	if !codec.ValidKeyPart(name) {
		return nil
	}
	s.replicaLeases.mu.Lock()
	lease, had := s.replicaLeases.leases[name]
	delete(s.replicaLeases.leases, name)
	s.replicaLeases.mu.Unlock()
	cctx, cancel := s.call(ctx)
	defer cancel()
	if had {
		// Revoking the lease deletes the record with it.
		if _, err := s.cli.Revoke(cctx, lease); err == nil {
			return nil
		}
	}
	_, err := s.cli.Delete(cctx, s.key(etcdReplicas, []byte(name)))
	return s.result(ctx, "WithdrawReplicaKeys", err)
}

// ListReplicaKeys implements store.ReplicaRegistry, in one linearizable read.
func (s *Store) ListReplicaKeys(ctx context.Context) ([]store.ReplicaKeys, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	p := s.key(etcdReplicas, nil)
	resp, err := s.cli.Get(cctx, p, clientv3.WithRange(prefixEnd(p)))
	if err != nil {
		return nil, s.result(ctx, "ListReplicaKeys", err)
	}
	out := make([]store.ReplicaKeys, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r store.ReplicaKeys
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, s.result(ctx, "ListReplicaKeys", err)
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Store) revokeLease(ctx context.Context, id clientv3.LeaseID) {
	if _, err := s.cli.Revoke(ctx, id); err != nil {
		s.logger.Debug("etcd store: revoking a replica lease failed (it runs out by itself)", zap.Error(err))
	}
}
