package etcdstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// etcd layout, schema version 3, under <prefix>secrets/. Key parts are those of the bbolt layout,
// built by package codec ("|" is 0x00, rev is 4 big-endian bytes, lower() is strings.ToLower), so
// both stores order listings and shape page tokens the same way. Records are the same bytes
// (codec.Writer's EncodeCred, EncodeService, EncodeArchived, EncodeGrants): protobuf or, for records
// not rewritten since version 2, JSON.
//
//	meta/schema                        "3"
//	cred/cur/<id>                      current record
//	cred/hist/<id>|rev                 record of that revision (kept after archiving, see below)
//	cred/byname/<lower(name)>|<id>     ListCredentials order
//	cred/name/<name>                   → id: name uniqueness among current credentials
//	cred/histname/<lower(name)>|<id>|rev  ListAllCredentialRevisions order
//	cred/svc/<credential id>|<service id>  services mapping a credential
//	cred/archive/<id>                  codec.Archived of the last revision
//	svc/cur/<lower(id)>|<id>           current record: ListServices order without an index
//	svc/hist/<lower(id)>|<id>|rev      record of that revision: ListAllServiceRevisions order
//	grants/<service id>                codec.Grants: the local keyring's grants of a service
//	login/used/<nonce>                 expiry (unix ms, decimal) of a used login link, on a lease
//	replicas/<name>                    what a running replica encrypts with and holds, on a lease (replicas.go)
//	changes/<id>                       a change request (codec.EncodeChangeRequest: always protobuf)
//
// login/used/ needs no schema version: its keys expire with their leases within minutes, and a build
// that does not know them only ignores them. Neither does changes/: a build that does not know change
// requests never reads the area (every read and the upgrade pass name their areas), so it ignores
// them, and they are not data (HasData leaves them out). They are written in protobuf even at schema
// version 2, where the other records are JSON: only builds that know them read them.
//
// Archiving does not copy the history (a long history could exceed etcd's request size and
// operation limits in one transaction): the history records stay under cred/hist/ and every history
// read checks, in the same transaction, that the current record exists, so an archived history is
// unreachable through the store.Store exactly as if it had moved.
//
// Version 2 only added grants/, so a version 1 prefix is moved to 2 when this build opens it (by
// rewriting the version key, as version 2 builds did). Version 3 only allows records in
// codec.FormatProto beside the JSON ones (which this build reads), and builds that read version 2
// refuse it; but replicas share a prefix and are upgraded one by one, so the move from 2 to 3 is in
// two phases, as etcd moves its cluster version only once every member runs the new one:
//
//  1. This build opened on a version 2 prefix leaves it at 2 and writes JSON (codec.FormatJSON),
//     which every replica still running a version 2 build reads.
//  2. Once every replica runs this build, gantry check -store etcd -upgrade (UpgradeRecords) moves
//     the prefix to 3 with a compare-and-set, then rewrites the JSON records. Running replicas see
//     the move on their next Probe (every -store-probe-interval) and write protobuf from then on;
//     a JSON record written meanwhile is still read by all and rewritten by its next write or the
//     next -upgrade.
//
// A new, empty prefix starts at version 3.
const etcdSchemaVersion = "3"

// etcdSchemaJSON is the version at which this build writes the JSON format (phase 1 above).
const etcdSchemaJSON = "2"

// etcdSchemaUpgradable is the version ensureSchema moves in place to etcdSchemaJSON.
const etcdSchemaUpgradable = "1"

const (
	etcdCredCurrent   = "cred/cur/"
	etcdCredHistory   = "cred/hist/"
	etcdCredByName    = "cred/byname/"
	etcdCredName      = "cred/name/"
	etcdCredHistName  = "cred/histname/"
	etcdCredServices  = "cred/svc/"
	etcdCredArchive   = "cred/archive/"
	etcdSvcCurrent    = "svc/cur/"
	etcdSvcHistory    = "svc/hist/"
	etcdGrants        = "grants/"
	etcdLoginNonces   = "login/used/"
	etcdChangeReqs    = "changes/"
	etcdSchemaKey     = "meta/schema"
	etcdWriteAttempts = 8
	// etcdOpOverhead approximates the bytes a transaction operation costs beyond its key and value.
	etcdOpOverhead = 32
	// etcdMaxTxnOps is etcd's default --max-txn-ops: the most operations one transaction may carry.
	etcdMaxTxnOps = 128
	// etcdReadChunk bounds the record fetches of one listing transaction, below etcdMaxTxnOps.
	etcdReadChunk = 100
)

// tlsConfig builds the client TLS configuration, nil when no TLS file is set.
func tlsConfig(o Options) (*tls.Config, error) {
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("GANTRY_ETCD_CA_FILE: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("GANTRY_ETCD_CA_FILE: %s holds no PEM certificate", o.CAFile)
		}
	}
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("GANTRY_ETCD_CERT_FILE / GANTRY_ETCD_KEY_FILE: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Store is the store.Store adapter for an etcd cluster, so several stateless secrets replicas can share
// one store. Every write is one etcd transaction that compares the mod revision of the current
// record read just before (and of every index key it relies on) and writes the history record, the
// current record and the indexes together: of two replicas writing revision N+1 of a credential,
// exactly one succeeds and the other gets store.ErrRevisionConflict (the service then reloads and
// retries). Reads are linearizable (etcd's default, never WithSerializable), so a read on any
// replica sees every write acknowledged before it started.
//
// Behaviour beyond the store.Store contract matches the bbolt adapter's, boltstore.Store (ids and
// names without 0x00, archived ids cannot be created again, nil empty collections). Writes larger
// than MaxRequestBytes, or needing more operations than etcd's default --max-txn-ops (a service
// mapping more than about 120 credentials), fail with store.ErrTooLarge. An unreachable or
// leaderless cluster yields errUnavailable.
type Store struct {
	cli             *clientv3.Client
	prefix          string // <Prefix>secrets/
	timeout         time.Duration
	maxRequestBytes int
	logger          *zap.Logger
	// afterIndexRead, nil in production, runs between a page's index read and its record reads, so
	// a test can compact etcd in that window.
	afterIndexRead func()
	// beforeRewrapCommit, nil in production, runs between RewrapCredential's read and its
	// transaction, so a test can change the record in that window.
	beforeRewrapCommit func()
	// afterUpgradeRead, nil in production, runs between UpgradeRecords' read of a chunk and its
	// rewrite, so a test can write a record in that window.
	afterUpgradeRead func()
	// format is the codec.Format writes use: FormatJSON while the prefix is at schema version 2,
	// FormatProto from 3 (see etcdSchemaVersion). Set at Open, followed by Probe.
	format atomic.Uint32
	// schemaSettle is how long UpgradeRecords waits after moving the schema to 3 before it reads
	// the records, so that running replicas (which follow the schema key every
	// -store-probe-interval, 1 s by default) write protobuf before the pass goes by; tests shorten it.
	schemaSettle time.Duration
	// probeDone is closed when watchMembers has returned (nil when it does not run).
	probeDone chan struct{}
	// leaderless is set by watchMembers while the cluster has no leader (quorum lost) or no member
	// answers (see leaderlessAfter): every request then fails at once (see router.do) instead of
	// waiting the request timeout.
	leaderless atomic.Bool
	// router sends every key-value request to a member that serves (route.go).
	router *router
	// replicaLeases are the leases of the replica records this store published (replicas.go).
	replicaLeases replicaLeases
}

var _ store.Store = (*Store)(nil)

// Open connects to the cluster and checks (or writes, on an empty prefix) the schema
// version, within opts.DialTimeout. logger receives storage failures (never record contents); the
// etcd client logs warnings and errors on its "etcd" sub-logger. nil means no logging.
func Open(ctx context.Context, opts Options, logger *zap.Logger) (*Store, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	tlsCfg, err := tlsConfig(opts)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		DialTimeout: opts.DialTimeout,
		TLS:         tlsCfg,
		Logger:      logger.Named("etcd").WithOptions(zap.IncreaseLevel(zap.WarnLevel)),
		Context:     context.WithoutCancel(ctx),
		// A whole transaction must fit in one gRPC message; leave room above the request limit so
		// etcd, not the client, refuses an oversized one with a recognisable error.
		MaxCallSendMsgSize:   opts.MaxRequestBytes + 1<<20,
		DialKeepAliveTime:    opts.KeepAliveTime,
		DialKeepAliveTimeout: opts.KeepAliveTimeout,
		PermitWithoutStream:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("GANTRY_ETCD_ENDPOINTS: %w", err)
	}
	s := &Store{cli: cli, prefix: opts.Prefix + "secrets/", timeout: opts.RequestTimeout, maxRequestBytes: opts.MaxRequestBytes, logger: logger,
		schemaSettle: etcdSchemaSettle}
	var creds credentials.TransportCredentials
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	members := make([]*member, 0, len(opts.Endpoints))
	for _, ep := range opts.Endpoints {
		m, err := dialMember(ep, creds, opts)
		if err != nil {
			closeMembers(members)
			_ = cli.Close()
			return nil, fmt.Errorf("GANTRY_ETCD_ENDPOINTS: %w", err)
		}
		members = append(members, m)
	}
	s.router = newRouter(members, &s.leaderless)
	cli.KV = routedKV{s.router}
	if err := s.ensureSchema(ctx, opts.DialTimeout); err != nil {
		closeMembers(members)
		_ = cli.Close()
		return nil, fmt.Errorf("GANTRY_ETCD_ENDPOINTS %s: %w", strings.Join(opts.Endpoints, ","), err)
	}
	if opts.ProbeInterval > 0 {
		s.probeDone = make(chan struct{})
		go s.watchMembers(cli.Ctx(), opts.Endpoints, opts.ProbeInterval, opts.ProbeTimeout)
	}
	return s, nil
}

// watchMembers keeps requests on the members that serve (see serving and route.go). A member that
// is frozen (SIGSTOP, a hung disk, a half-open network) does not answer the probe; one cut off from
// its peers answers but has no leader, or leads an older term. Either is taken out of service at the
// next probe, which ends the requests in flight on it (reads go to another member; a write that may
// have been applied fails), and put back once it serves again. Each member is asked for its status
// on its own connection. When no member serves (an election, or quorum lost), requests go to the
// members that answer (to all when none does): they refuse them for want of a leader, and the
// router tries again until a leader is there or the request timeout ends.
//
// The same probe tells whether the cluster can serve at all (see leaderlessAfter): while it cannot,
// the store is leaderless and every request fails at once with rpctypes.ErrNoLeader (503) rather than
// waiting the request timeout; the first probe that finds a leader again ends it.
func (s *Store) watchMembers(ctx context.Context, all []string, interval, timeout time.Duration) {
	defer close(s.probeDone)
	current := strings.Join(all, ",")
	t := time.NewTicker(interval)
	defer t.Stop()
	noLeaderRounds := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		statuses := make([]*clientv3.StatusResponse, len(all))
		var wg sync.WaitGroup
		for i, m := range s.router.members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				if st, err := m.status.Status(pctx, &etcdserverpb.StatusRequest{}, grpc.WaitForReady(false)); err == nil {
					statuses[i] = (*clientv3.StatusResponse)(st)
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		var answering []string
		withLeader := false
		for i, st := range statuses {
			if st != nil {
				answering = append(answering, all[i])
				withLeader = withLeader || st.Leader != 0
			}
		}
		if withLeader {
			noLeaderRounds = 0
		} else {
			noLeaderRounds++
		}
		leaderless := noLeaderRounds > 0 && noLeaderRounds >= leaderlessAfter(len(answering), len(all))
		if was := s.leaderless.Swap(leaderless); was != leaderless {
			if leaderless {
				s.logger.Warn("etcd cluster has no leader (quorum lost) or does not answer: requests fail at once with 503 until it has one",
					zap.Strings("answering", answering), zap.Strings("configured", all))
			} else {
				s.logger.Info("etcd cluster has a leader again", zap.Strings("answering", answering))
			}
		}
		use := serving(all, statuses)
		if len(use) == 0 {
			use = answering
		}
		if len(use) == 0 {
			use = all
		}
		// The member that says it leads (its own ID is the leader's) and serves takes requests first.
		var leader *member
		for i, st := range statuses {
			if st != nil && st.Leader != 0 && st.Header != nil && st.Leader == st.Header.MemberId && slices.Contains(use, all[i]) {
				leader = s.router.members[i]
			}
		}
		s.router.leader.Store(leader)
		if next := strings.Join(use, ","); next != current {
			s.logger.Warn("etcd members serving changed; requests now go only to these",
				zap.Strings("endpoints", use), zap.Strings("configured", all), zap.Strings("answering", answering))
			inUse := make([]bool, len(all))
			for i, ep := range all {
				inUse[i] = slices.Contains(use, ep)
			}
			s.router.setServing(inUse)
			s.cli.SetEndpoints(use...)
			current = next
		}
	}
}

// ensureSchema writes the schema version on an empty prefix, moves version 1 to 2, refuses a version
// this build does not read, and sets the format writes use (see etcdSchemaVersion).
func (s *Store) ensureSchema(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := s.prefix + etcdSchemaKey
	// The Get is retried by the client until the deadline (a member may still be starting).
	got, err := s.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("etcd not reachable: %w", err)
	}
	if len(got.Kvs) == 0 {
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, etcdSchemaVersion)).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fmt.Errorf("write schema version: %w", err)
		}
		if resp.Succeeded {
			s.format.Store(uint32(codec.FormatProto))
			return nil
		}
		got = (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange())
	}
	if string(got.Kvs[0].Value) == etcdSchemaUpgradable {
		// Compare on the value: of replicas upgrading at once one writes, the others read its result.
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", etcdSchemaUpgradable)).
			Then(clientv3.OpPut(key, etcdSchemaJSON)).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return fmt.Errorf("upgrade schema version: %w", err)
		}
		if resp.Succeeded {
			s.logger.Info("upgraded the etcd store's schema", zap.String("from", etcdSchemaUpgradable), zap.String("to", etcdSchemaJSON))
			got.Kvs[0].Value = []byte(etcdSchemaJSON)
		} else if got = (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()); len(got.Kvs) == 0 {
			return fmt.Errorf("prefix %q: schema version deleted during the upgrade", s.prefix)
		}
	}
	switch v := string(got.Kvs[0].Value); v {
	case etcdSchemaVersion:
		s.format.Store(uint32(codec.FormatProto))
	case etcdSchemaJSON:
		s.format.Store(uint32(codec.FormatJSON))
		s.logger.Info("the etcd store is at schema version 2: records are written in JSON, which replicas of older versions read, "+
			"until `gantry check -store etcd -upgrade` runs (once every secrets replica runs this version); replicas then switch to protobuf without a restart",
			zap.String("prefix", s.prefix))
	default:
		return fmt.Errorf("prefix %q holds secrets schema version %s, this build reads %s and %s", s.prefix, v, etcdSchemaJSON, etcdSchemaVersion)
	}
	return nil
}

// followSchema sets the format of writes from a schema version read in the store (see
// etcdSchemaVersion): protobuf once gantry check -upgrade moved the prefix to 3. Any other value
// (the key deleted, a version this build does not know) leaves it as it is: Open refuses those, and
// a running replica keeps writing what the replicas it shares the prefix with read.
func (s *Store) followSchema(version []byte) {
	var f codec.Format
	switch string(version) {
	case etcdSchemaVersion:
		f = codec.FormatProto
	case etcdSchemaJSON:
		f = codec.FormatJSON
	default:
		return
	}
	if was := codec.Format(s.format.Swap(uint32(f))); was != f {
		format := "protobuf"
		if f == codec.FormatJSON {
			format = "JSON"
		}
		s.logger.Info("the etcd store's schema version changed: records are now written in "+format,
			zap.String("prefix", s.prefix), zap.String("version", string(version)))
	}
}

// writer encodes records in the format the prefix's schema version allows (see followSchema).
func (s *Store) writer() codec.Writer {
	return codec.Writer{Format: codec.Format(s.format.Load())}
}

// Close closes the client.
func (s *Store) Close() error {
	err := s.cli.Close()
	if s.probeDone != nil {
		<-s.probeDone
	}
	closeMembers(s.router.members)
	return err
}

// closeMembers closes the members' connections.
func closeMembers(members []*member) {
	for _, m := range members {
		_ = m.conn.Close()
	}
}

// leaderlessAfter is how many probes in a row must find no member reporting a leader before the
// store calls the cluster leaderless, given how many of the configured members answered:
//   - some answer but not a majority: one. No election can succeed without a majority, so the cluster
//     has lost its quorum (two of three members down); its members have no leader once an election
//     timeout has passed.
//   - none answers: three (a silent probe or two may be a loaded machine whose member still serves,
//     slowly; three seconds of silence at the default interval is a cluster that cannot serve).
//   - a majority answers: five. A leader election leaves the members without a leader for an election
//     timeout or two (one second each by default), and requests then wait for the new leader rather
//     than fail; only a cluster that stays leaderless longer (a partition among the members) counts.
func leaderlessAfter(answering, configured int) int {
	switch {
	case answering == 0:
		return 3
	case answering*2 <= configured:
		return 1
	default:
		return 5
	}
}

// call bounds one etcd request by the request timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// txn runs one transaction within the request timeout, after checking it fits etcd's limits.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := s.fits(cmps, ops); err != nil {
		return nil, err
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	return s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
}

// fits checks that a transaction stays within etcd's operation limit and the request size limit,
// so an oversized write fails with store.ErrTooLarge before it is sent.
func (s *Store) fits(cmps []clientv3.Cmp, ops []clientv3.Op) error {
	if len(cmps) > etcdMaxTxnOps || len(ops) > etcdMaxTxnOps {
		return fmt.Errorf("%w: %d comparisons and %d operations in one transaction (etcd allows %d)", store.ErrTooLarge, len(cmps), len(ops), etcdMaxTxnOps)
	}
	size := 0
	for _, op := range ops {
		size += len(op.KeyBytes()) + len(op.ValueBytes()) + len(op.RangeBytes()) + etcdOpOverhead
	}
	for _, c := range cmps {
		// A value comparison (ReplaceKeyCheck) carries the value too.
		size += len(c.Key) + len(c.RangeEnd) + len(c.ValueBytes()) + etcdOpOverhead
	}
	if size > s.maxRequestBytes {
		return fmt.Errorf("%w: a write of about %d bytes (limit %d, GANTRY_ETCD_MAX_REQUEST_BYTES)", store.ErrTooLarge, size, s.maxRequestBytes)
	}
	return nil
}

// read runs read-only operations in one transaction, so they see one snapshot.
func (s *Store) read(ctx context.Context, ops ...clientv3.Op) ([]*clientv3.GetResponse, int64, error) {
	ctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, err
	}
	out := make([]*clientv3.GetResponse, len(resp.Responses))
	for i, r := range resp.Responses {
		out[i] = (*clientv3.GetResponse)(r.GetResponseRange())
	}
	return out, resp.Header.Revision, nil
}

// result passes nil and the store.Store's own errors through and classifies the rest: the caller's
// cancellation as is, etcd's size limits as store.ErrTooLarge, an unreachable or leaderless cluster as
// errUnavailable (503), anything else as a logged failure of the storage.
func (s *Store) result(ctx context.Context, op string, err error) error {
	var nameTaken *store.NameTakenError
	var unknown *store.UnknownCredentialsError
	switch {
	case err == nil,
		errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrRevisionConflict), errors.Is(err, store.ErrBadPageToken),
		errors.Is(err, store.ErrStillMapped), errors.As(err, &nameTaken), errors.As(err, &unknown):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, store.ErrTooLarge):
		s.logger.Warn("etcd store: write refused as too large", zap.String("op", op), zap.Error(err))
		return err
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrTooManyOps),
		status.Code(err) == codes.ResourceExhausted:
		s.logger.Warn("etcd store: etcd refused a write as too large", zap.String("op", op), zap.Error(err))
		return fmt.Errorf("%w: %v", store.ErrTooLarge, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrStopped), errors.Is(err, rpctypes.ErrNotCapable),
		status.Code(err) == codes.Unavailable, status.Code(err) == codes.DeadlineExceeded:
		s.logger.Warn("etcd store: cluster unavailable", zap.String("op", op), zap.Error(err))
		return fmt.Errorf("%w: etcd store: %s: %v", store.ErrStorage, op, err)
	}
	s.logger.Error("etcd store failure", zap.String("op", op), zap.Error(err))
	return fmt.Errorf("%w: etcd store: %s: %v", store.ErrStorage, op, err)
}

// etcdKeyCheck is the key of the key-check value.
const etcdKeyCheck = "meta/keycheck"

// KeyCheck implements store.Store.
func (s *Store) KeyCheck(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.prefix+etcdKeyCheck)
	if err != nil {
		return nil, s.result(ctx, "KeyCheck", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, store.ErrNotFound
	}
	return resp.Kvs[0].Value, nil
}

// InitKeyCheck implements store.Store.
func (s *Store) InitKeyCheck(ctx context.Context, value []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(value) == 0 {
		return nil, errors.New("secrets: etcd store: empty key-check value")
	}
	key := s.prefix + etcdKeyCheck
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, s.result(ctx, "InitKeyCheck", err)
	}
	if resp.Succeeded {
		return bytes.Clone(value), nil
	}
	got := resp.Responses[0].GetResponseRange()
	if len(got.Kvs) == 0 {
		return nil, s.result(ctx, "InitKeyCheck", errors.New("key-check value deleted concurrently"))
	}
	return got.Kvs[0].Value, nil
}

// ReplaceKeyCheck implements store.Store: one transaction comparing the stored value itself (etcd
// fails a value comparison on a missing key, so the else branch tells a missing value from another).
func (s *Store) ReplaceKeyCheck(ctx context.Context, prev, next []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(prev) == 0 || len(next) == 0 {
		return errors.New("secrets: etcd store: empty key-check value")
	}
	key := s.prefix + etcdKeyCheck
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", string(prev))}
	ops := []clientv3.Op{clientv3.OpPut(key, string(next))}
	if err := s.fits(cmps, ops); err != nil {
		return s.result(ctx, "ReplaceKeyCheck", err)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Txn(cctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(key, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return s.result(ctx, "ReplaceKeyCheck", err)
	}
	if resp.Succeeded {
		return nil
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return store.ErrNotFound
	}
	return store.ErrRevisionConflict
}

// HasData implements store.Store.
func (s *Store) HasData(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ops := []clientv3.Op{}
	for _, area := range []string{etcdCredHistory, etcdCredArchive, etcdSvcHistory} {
		p := s.prefix + area
		ops = append(ops, clientv3.OpGet(p, clientv3.WithRange(prefixEnd(p)), clientv3.WithCountOnly()))
	}
	resps, _, err := s.read(ctx, ops...)
	if err != nil {
		return false, s.result(ctx, "HasData", err)
	}
	for _, r := range resps {
		if r.Count > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Probe implements Store: a linearizable read of the schema version, which needs a member that
// answers and a cluster with a leader. The version read sets the format of the next writes
// (followSchema): this is how a running replica sees gantry check -upgrade move the prefix to 3.
func (s *Store) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.prefix+etcdSchemaKey)
	if err != nil {
		return fmt.Errorf("%w: etcd store probe: %v", store.ErrStorage, err)
	}
	if len(resp.Kvs) == 1 {
		s.followSchema(resp.Kvs[0].Value)
	}
	return nil
}

// key builds the full etcd key of an area and a key part.
func (s *Store) key(area string, part []byte) string {
	return s.prefix + area + string(part)
}

// prefixEnd is the end of the range of every key starting with p.
func prefixEnd(p string) string { return clientv3.GetPrefixRangeEnd(p) }

// getRecord reads the one record at part of area for the operation op, decoded: store.ErrNotFound
// when id cannot be a key or nothing is stored there. Every single-key read of a record is this.
func getRecord[T any](ctx context.Context, s *Store, op, id, area string, part []byte, decode func(area, raw []byte) (*T, error)) (*T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !codec.ValidKeyPart(id) {
		return nil, store.ErrNotFound
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.key(area, part))
	if err != nil {
		return nil, s.result(ctx, op, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, store.ErrNotFound
	}
	rec, err := decode([]byte(area), resp.Kvs[0].Value)
	if err != nil {
		return nil, s.result(ctx, op, err)
	}
	return rec, nil
}

// GetCredential implements store.Store.
func (s *Store) GetCredential(ctx context.Context, id string) (*store.CredentialRecord, error) {
	return getRecord(ctx, s, "GetCredential", id, etcdCredCurrent, []byte(id), codec.DecodeCred)
}

// GetCredentials implements Store: one transaction of gets per etcdReadChunk ids, so a service's
// credentials cost one round trip rather than one each.
func (s *Store) GetCredentials(ctx context.Context, ids []string) ([]*store.CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	valid := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !codec.ValidKeyPart(id) })
	out := make([]*store.CredentialRecord, 0, len(valid))
	for chunk := range slices.Chunk(valid, etcdReadChunk) {
		ops := make([]clientv3.Op, len(chunk))
		for i, id := range chunk {
			ops[i] = clientv3.OpGet(s.key(etcdCredCurrent, []byte(id)))
		}
		got, _, err := s.read(ctx, ops...)
		if err != nil {
			return nil, s.result(ctx, "GetCredentials", err)
		}
		for _, g := range got {
			if len(g.Kvs) == 0 {
				continue
			}
			rec, err := codec.DecodeCred([]byte(etcdCredCurrent), g.Kvs[0].Value)
			if err != nil {
				return nil, s.result(ctx, "GetCredentials", err)
			}
			out = append(out, rec)
		}
	}
	return out, nil
}

// GetCredentialRevision implements store.Store.
func (s *Store) GetCredentialRevision(ctx context.Context, id string, revision int32) (*store.CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !codec.ValidKeyPart(id) {
		return nil, store.ErrNotFound
	}
	got, _, err := s.read(ctx,
		clientv3.OpGet(s.key(etcdCredCurrent, []byte(id)), clientv3.WithCountOnly()),
		clientv3.OpGet(s.key(etcdCredHistory, codec.RevKey(id, revision))))
	if err != nil {
		return nil, s.result(ctx, "GetCredentialRevision", err)
	}
	if got[0].Count == 0 || len(got[1].Kvs) == 0 {
		return nil, store.ErrNotFound
	}
	rec, err := codec.DecodeCred([]byte(etcdCredHistory), got[1].Kvs[0].Value)
	return rec, s.result(ctx, "GetCredentialRevision", err)
}

// ListCredentials implements store.Store.
func (s *Store) ListCredentials(ctx context.Context, page store.Page) ([]*store.CredentialRecord, string, error) {
	return list(ctx, s, page, listing[store.CredentialRecord]{
		op: "ListCredentials", token: codec.TokenCredentials, validKey: codec.ValidNameKey,
		area: etcdCredByName, within: []byte(page.NamePrefix), records: etcdCredCurrent, decode: codec.DecodeCred,
	})
}

// ListCredentialRevisions implements store.Store.
func (s *Store) ListCredentialRevisions(ctx context.Context, id string, page store.Page) ([]*store.CredentialRecord, string, error) {
	return listRevisions(ctx, s, id, page, etcdCredCurrent, []byte(id), listing[store.CredentialRecord]{
		op: "ListCredentialRevisions", token: codec.TokenCredentialRevisions, area: etcdCredHistory, decode: codec.DecodeCred,
	})
}

// ListAllCredentialRevisions implements store.Store. The index key lower(name)|id|rev ends with the
// history key id|rev.
func (s *Store) ListAllCredentialRevisions(ctx context.Context, page store.Page) ([]*store.CredentialRecord, string, error) {
	return list(ctx, s, page, listing[store.CredentialRecord]{
		op: "ListAllCredentialRevisions", token: codec.TokenAllCredentialRevisions, validKey: codec.ValidRevNameKey,
		area: etcdCredHistName, records: etcdCredHistory, decode: codec.DecodeCred,
	})
}

// PutCredential implements Store: read the current record and the name's holder in one snapshot,
// check, then write in one transaction guarded by the mod revisions read. When a guard fails the
// state moved in between: read again, so the answer (conflict, name taken, or success) is that of
// the new state.
func (s *Store) PutCredential(ctx context.Context, rec *store.CredentialRecord, prevRevision int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: etcd store: PutCredential: nil record")
	}
	if err := checkEtcdKeyParts(rec.ID, rec.Name); err != nil {
		return err
	}
	data, err := s.writer().EncodeCred(rec)
	if err != nil {
		return fmt.Errorf("secrets: etcd store: PutCredential: encode: %w", err)
	}
	id := rec.ID
	curKey := s.key(etcdCredCurrent, []byte(id))
	histKey := s.key(etcdCredHistory, codec.RevKey(id, rec.Revision))
	nameKeyNew := s.key(etcdCredName, []byte(rec.Name))
	archiveKey := s.key(etcdCredArchive, []byte(id))
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx,
			clientv3.OpGet(curKey), clientv3.OpGet(nameKeyNew),
			clientv3.OpGet(archiveKey, clientv3.WithCountOnly()), clientv3.OpGet(histKey, clientv3.WithCountOnly()))
		if err != nil {
			return s.result(ctx, "PutCredential", err)
		}
		var old *store.CredentialRecord
		var curMod int64
		if kvs := got[0].Kvs; len(kvs) > 0 {
			if old, err = codec.DecodeCred([]byte(etcdCredCurrent), kvs[0].Value); err != nil {
				return s.result(ctx, "PutCredential", err)
			}
			curMod = kvs[0].ModRevision
		} else if got[2].Count > 0 {
			return store.ErrRevisionConflict // archived ids stay archived
		}
		if err := codec.CheckRevision(codec.CredRevision(old), prevRevision, rec.Revision); err != nil {
			return err
		}
		if got[3].Count > 0 {
			return store.ErrRevisionConflict
		}
		var nameMod int64
		if kvs := got[1].Kvs; len(kvs) > 0 {
			if holder := string(kvs[0].Value); holder != id {
				return &store.NameTakenError{ID: holder}
			}
			nameMod = kvs[0].ModRevision
		}

		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(curKey), "=", curMod),
			clientv3.Compare(clientv3.ModRevision(nameKeyNew), "=", nameMod),
			clientv3.Compare(clientv3.CreateRevision(archiveKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(histKey), "=", 0),
		}
		ops := []clientv3.Op{
			clientv3.OpPut(histKey, string(data)),
			clientv3.OpPut(curKey, string(data)),
			clientv3.OpPut(s.key(etcdCredByName, codec.NameKey(rec.Name, id)), ""),
			clientv3.OpPut(nameKeyNew, id),
			clientv3.OpPut(s.key(etcdCredHistName, codec.RevNameKey(rec.Name, id, rec.Revision)), ""),
		}
		if old != nil {
			// The keys of the old name go unless the new name reuses them (etcd refuses a key twice in
			// one transaction). The current record always holds its exact name (names are unique among
			// current credentials), so deleting it frees nobody else's.
			if oldKey := codec.NameKey(old.Name, id); string(oldKey) != string(codec.NameKey(rec.Name, id)) {
				ops = append(ops, clientv3.OpDelete(s.key(etcdCredByName, oldKey)))
			}
			if old.Name != rec.Name {
				ops = append(ops, clientv3.OpDelete(s.key(etcdCredName, []byte(old.Name))))
			}
		}
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil {
			return s.result(ctx, "PutCredential", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return store.ErrRevisionConflict
}

// SetLastDecrypted implements store.Store.
func (s *Store) SetLastDecrypted(ctx context.Context, id string, revision int32, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !codec.ValidKeyPart(id) {
		return store.ErrNotFound
	}
	curKey := s.key(etcdCredCurrent, []byte(id))
	histKey := s.key(etcdCredHistory, codec.RevKey(id, revision))
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx, clientv3.OpGet(curKey), clientv3.OpGet(histKey))
		if err != nil {
			return s.result(ctx, "SetLastDecrypted", err)
		}
		if len(got[0].Kvs) == 0 || len(got[1].Kvs) == 0 {
			return store.ErrNotFound
		}
		cur, err := codec.DecodeCred([]byte(etcdCredCurrent), got[0].Kvs[0].Value)
		if err != nil {
			return s.result(ctx, "SetLastDecrypted", err)
		}
		hist, err := codec.DecodeCred([]byte(etcdCredHistory), got[1].Kvs[0].Value)
		if err != nil {
			return s.result(ctx, "SetLastDecrypted", err)
		}
		stamp := at
		hist.LastDecryptedDate = &stamp
		w := s.writer() // one format for the whole transaction
		data, err := w.EncodeCred(hist)
		if err != nil {
			return s.result(ctx, "SetLastDecrypted", err)
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(curKey), "=", got[0].Kvs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(histKey), "=", got[1].Kvs[0].ModRevision),
		}
		ops := []clientv3.Op{clientv3.OpPut(histKey, string(data))}
		if cur.Revision == revision {
			cur.LastDecryptedDate = &stamp
			if data, err = w.EncodeCred(cur); err != nil {
				return s.result(ctx, "SetLastDecrypted", err)
			}
			ops = append(ops, clientv3.OpPut(curKey, string(data)))
		}
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil {
			return s.result(ctx, "SetLastDecrypted", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return store.ErrRevisionConflict
}

// RewrapCredential implements store.Store like SetLastDecrypted: read the current and the history
// record in one snapshot, check the wrapped key, then write in one transaction guarded by the mod
// revisions read. A lost guard means one of them changed in between — most often only its
// LastDecryptedDate, or a new current revision — so read again: the answer (done, not found,
// conflict) is that of the new state, and a stamp written meanwhile is kept. When the records change
// through every attempt the call fails with an error wrapping store.ErrStorage, not
// ErrRevisionConflict: the stored key is still oldWrapped, and a caller must not take it for rewrapped.
func (s *Store) RewrapCredential(ctx context.Context, id string, revision int32, oldWrapped, newWrapped []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(oldWrapped) == 0 || len(newWrapped) == 0 {
		return errors.New("secrets: etcd store: RewrapCredential: empty wrapped key")
	}
	if !codec.ValidKeyPart(id) {
		return store.ErrNotFound
	}
	curKey := s.key(etcdCredCurrent, []byte(id))
	histKey := s.key(etcdCredHistory, codec.RevKey(id, revision))
	// One read more than writes: the answer after the last lost write is still that of the state
	// then (a concurrent rewrap that won is a conflict, not a failure).
	for attempt := 1; ; attempt++ {
		got, _, err := s.read(ctx, clientv3.OpGet(curKey), clientv3.OpGet(histKey))
		if err != nil {
			return s.result(ctx, "RewrapCredential", err)
		}
		// The history outlives an archive here (see the layout comment): without a current record
		// it is archived, so not found.
		if len(got[0].Kvs) == 0 || len(got[1].Kvs) == 0 {
			return store.ErrNotFound
		}
		hist, err := codec.DecodeCred([]byte(etcdCredHistory), got[1].Kvs[0].Value)
		if err != nil {
			return s.result(ctx, "RewrapCredential", err)
		}
		if !bytes.Equal(hist.WrappedKey, oldWrapped) {
			return store.ErrRevisionConflict
		}
		if attempt > etcdWriteAttempts {
			s.logger.Warn("etcd store: a rewrap lost every attempt to concurrent writes of the record", zap.String("op", "RewrapCredential"),
				zap.String("credential_id", id), zap.Int32("revision", revision), zap.Int("attempts", etcdWriteAttempts))
			return fmt.Errorf("%w: etcd store: RewrapCredential: credential %s revision %d changed during each of %d attempts; retry later",
				store.ErrStorage, id, revision, etcdWriteAttempts)
		}
		cur, err := codec.DecodeCred([]byte(etcdCredCurrent), got[0].Kvs[0].Value)
		if err != nil {
			return s.result(ctx, "RewrapCredential", err)
		}
		hist.WrappedKey = newWrapped
		w := s.writer() // one format for the whole transaction
		data, err := w.EncodeCred(hist)
		if err != nil {
			return s.result(ctx, "RewrapCredential", err)
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(curKey), "=", got[0].Kvs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(histKey), "=", got[1].Kvs[0].ModRevision),
		}
		ops := []clientv3.Op{clientv3.OpPut(histKey, string(data))}
		if cur.Revision == revision && bytes.Equal(cur.WrappedKey, oldWrapped) {
			cur.WrappedKey = newWrapped
			if data, err = w.EncodeCred(cur); err != nil {
				return s.result(ctx, "RewrapCredential", err)
			}
			ops = append(ops, clientv3.OpPut(curKey, string(data)))
		}
		if s.beforeRewrapCommit != nil {
			s.beforeRewrapCommit()
		}
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil {
			return s.result(ctx, "RewrapCredential", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// CredentialServices implements store.Store.
func (s *Store) CredentialServices(ctx context.Context, id string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !codec.ValidKeyPart(id) {
		return nil, nil
	}
	prefix := s.key(etcdCredServices, codec.RevPrefix(id))
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, prefix, clientv3.WithRange(prefixEnd(prefix)), clientv3.WithKeysOnly())
	if err != nil {
		return nil, s.result(ctx, "CredentialServices", err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key[len(prefix):]))
	}
	return out, nil
}

// ArchiveCredential implements store.Store. The history stays where it is (see the layout comment); its
// ListAllCredentialRevisions index entries go with one range delete per distinct name it had.
func (s *Store) ArchiveCredential(ctx context.Context, id string, prevRevision int32, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !codec.ValidKeyPart(id) {
		return store.ErrNotFound
	}
	curKey := s.key(etcdCredCurrent, []byte(id))
	links := s.key(etcdCredServices, codec.RevPrefix(id))
	history := s.key(etcdCredHistory, codec.RevPrefix(id))
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx, clientv3.OpGet(curKey),
			clientv3.OpGet(links, clientv3.WithRange(prefixEnd(links)), clientv3.WithCountOnly()),
			clientv3.OpGet(history, clientv3.WithRange(prefixEnd(history))))
		if err != nil {
			return s.result(ctx, "ArchiveCredential", err)
		}
		if len(got[0].Kvs) == 0 {
			return store.ErrNotFound
		}
		rawCur := got[0].Kvs[0].Value
		cur, err := codec.DecodeCred([]byte(etcdCredCurrent), rawCur)
		if err != nil {
			return s.result(ctx, "ArchiveCredential", err)
		}
		if cur.Revision != prevRevision {
			return store.ErrRevisionConflict
		}
		if got[1].Count > 0 {
			return store.ErrStillMapped
		}
		data, err := s.writer().EncodeArchived(at, rawCur)
		if err != nil {
			return s.result(ctx, "ArchiveCredential", err)
		}
		ops := []clientv3.Op{
			clientv3.OpPut(s.key(etcdCredArchive, []byte(id)), string(data)),
			clientv3.OpDelete(curKey),
			clientv3.OpDelete(s.key(etcdCredByName, codec.NameKey(cur.Name, id))),
			clientv3.OpDelete(s.key(etcdCredName, []byte(cur.Name))),
		}
		names := map[string]bool{}
		for _, kv := range got[2].Kvs {
			h, err := codec.DecodeCred([]byte(etcdCredHistory), kv.Value)
			if err != nil {
				return s.result(ctx, "ArchiveCredential", err)
			}
			lower := strings.ToLower(h.Name)
			if !names[lower] {
				names[lower] = true
				p := s.key(etcdCredHistName, append(codec.NameKey(h.Name, id), 0))
				ops = append(ops, clientv3.OpDelete(p, clientv3.WithRange(prefixEnd(p))))
			}
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(curKey), "=", got[0].Kvs[0].ModRevision),
			clientv3.Compare(clientv3.CreateRevision(links), "=", 0).WithPrefix(),
		}
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil {
			return s.result(ctx, "ArchiveCredential", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return store.ErrRevisionConflict
}

// GetArchivedCredential implements store.Store.
func (s *Store) GetArchivedCredential(ctx context.Context, id string) (*store.CredentialRecord, error) {
	a, err := getRecord(ctx, s, "GetArchivedCredential", id, etcdCredArchive, []byte(id), codec.DecodeArchived)
	if err != nil {
		return nil, err
	}
	return a.Record, nil
}

// ListArchivedCredentials implements store.Store.
func (s *Store) ListArchivedCredentials(ctx context.Context, page store.Page) ([]*store.ArchivedCredential, string, error) {
	return list(ctx, s, page, listing[store.ArchivedCredential]{
		op: "ListArchivedCredentials", token: codec.TokenArchivedCredentials, area: etcdCredArchive, decode: codec.DecodeArchived,
		validKey: func(k []byte) bool { return codec.ValidKeyPart(string(k)) },
	})
}

// GetService implements store.Store.
func (s *Store) GetService(ctx context.Context, id string) (*store.ServiceRecord, error) {
	return getRecord(ctx, s, "GetService", id, etcdSvcCurrent, codec.NameKey(id, id), codec.DecodeService)
}

// Grants implements store.Store.
func (s *Store) Grants(ctx context.Context, serviceID string) (store.GrantsRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.GrantsRecord{}, err
	}
	if !codec.ValidKeyPart(serviceID) {
		return store.GrantsRecord{}, store.ErrNotFound
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.key(etcdGrants, []byte(serviceID)))
	if err != nil {
		return store.GrantsRecord{}, s.result(ctx, "Grants", err)
	}
	if len(resp.Kvs) == 0 {
		return store.GrantsRecord{}, store.ErrNotFound
	}
	rec, err := codec.DecodeGrants([]byte(etcdGrants), resp.Kvs[0].Value)
	return rec, s.result(ctx, "Grants", err)
}

// PutGrants implements store.Store.
func (s *Store) PutGrants(ctx context.Context, serviceID string, rec store.GrantsRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkEtcdKeyParts(serviceID, serviceID); err != nil {
		return err
	}
	data, err := s.writer().EncodeGrants(rec)
	if err != nil {
		return fmt.Errorf("secrets: etcd store: PutGrants: encode: %w", err)
	}
	_, err = s.txn(ctx, nil, clientv3.OpPut(s.key(etcdGrants, []byte(serviceID)), string(data)))
	return s.result(ctx, "PutGrants", err)
}

// ClaimLoginNonce implements store.Store: a put-if-absent transaction (the key's CreateRevision is
// 0), the key on a lease of the record's remaining lifetime so etcd drops it after expiry. Every
// replica sharing the prefix sees the same key, so a link opens one session across all of them.
func (s *Store) ClaimLoginNonce(ctx context.Context, nonce string, expires time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !codec.ValidKeyPart(nonce) {
		return false, errors.New("secrets: etcd store: a login nonce must be non-empty and free of 0x00")
	}
	// etcd counts lease TTLs in whole seconds (and raises short ones to its minimum): round up, so the
	// record never goes before expires.
	ttl := int64(math.Ceil(time.Until(expires).Seconds()))
	if ttl < 1 {
		ttl = 1
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	lease, err := s.cli.Grant(cctx, ttl)
	if err != nil {
		return false, s.result(ctx, "ClaimLoginNonce", err)
	}
	key := s.key(etcdLoginNonces, []byte(nonce))
	resp, err := s.cli.Txn(cctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, strconv.FormatInt(expires.UnixMilli(), 10), clientv3.WithLease(lease.ID))).Commit()
	if err == nil && resp.Succeeded {
		return true, nil
	}
	// The lease holds nothing: revoke it rather than leave it to expire (best effort, it does anyway).
	if _, rerr := s.cli.Revoke(cctx, lease.ID); rerr != nil {
		s.logger.Debug("etcd store: revoking an unused lease failed", zap.Error(rerr))
	}
	return false, s.result(ctx, "ClaimLoginNonce", err)
}

// LoginNonceClaimed implements store.Store: a linearizable read, so a session ended through one
// replica is refused by every other at once. The lease drops the key after its expiry; a key whose
// recorded expiry has passed before its lease ran out counts as gone.
func (s *Store) LoginNonceClaimed(ctx context.Context, nonce string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !codec.ValidKeyPart(nonce) {
		return false, errors.New("secrets: etcd store: a login nonce must be non-empty and free of 0x00")
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.key(etcdLoginNonces, []byte(nonce)))
	if err != nil {
		return false, s.result(ctx, "LoginNonceClaimed", err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	expires, perr := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	return perr != nil || expires > time.Now().UnixMilli(), nil
}

// GetChangeRequest implements store.Store.
func (s *Store) GetChangeRequest(ctx context.Context, id string) (*store.ChangeRequestRecord, error) {
	return getRecord(ctx, s, "GetChangeRequest", id, etcdChangeReqs, []byte(id), codec.DecodeChangeRequest)
}

// PutChangeRequest implements store.Store: read the stored record, check its version, then write in
// one transaction guarded by the mod revision read, so of two replicas writing the same version one
// wins. When the guard fails another write came in between: read again, so the answer (most often a
// conflict, the version having moved on) is that of the new state. A record too large for etcd's
// request limit is store.ErrTooLarge, as for every write.
func (s *Store) PutChangeRequest(ctx context.Context, rec *store.ChangeRequestRecord, prevVersion int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: etcd store: PutChangeRequest: nil record")
	}
	if !codec.ValidKeyPart(rec.ID) {
		return errors.New("secrets: etcd store: a change request id must be non-empty and free of 0x00")
	}
	// Protobuf whatever the prefix's schema version (see the layout comment).
	data, err := s.writer().EncodeChangeRequest(rec)
	if err != nil {
		return fmt.Errorf("secrets: etcd store: PutChangeRequest: encode: %w", err)
	}
	key := s.key(etcdChangeReqs, []byte(rec.ID))
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx, clientv3.OpGet(key))
		if err != nil {
			return s.result(ctx, "PutChangeRequest", err)
		}
		var stored int32
		var mod int64
		if kvs := got[0].Kvs; len(kvs) > 0 {
			old, err := codec.DecodeChangeRequest([]byte(etcdChangeReqs), kvs[0].Value)
			if err != nil {
				return s.result(ctx, "PutChangeRequest", err)
			}
			if prevVersion == 0 {
				return store.ErrRevisionConflict // a create finds the id taken
			}
			stored, mod = old.Version, kvs[0].ModRevision
		}
		if err := codec.CheckRevision(stored, prevVersion, rec.Version); err != nil {
			return err
		}
		// ModRevision 0 is a key that does not exist: a create compares that it still does not.
		resp, err := s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", mod)}, clientv3.OpPut(key, string(data)))
		if err != nil {
			return s.result(ctx, "PutChangeRequest", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return store.ErrRevisionConflict
}

// ListChangeRequests implements store.Store: the keys of changes/ are the ids, so their order is
// the listing's.
func (s *Store) ListChangeRequests(ctx context.Context, page store.Page) ([]*store.ChangeRequestRecord, string, error) {
	return list(ctx, s, page, listing[store.ChangeRequestRecord]{
		op: "ListChangeRequests", token: codec.TokenChangeRequests, area: etcdChangeReqs, decode: codec.DecodeChangeRequest,
		validKey: func(k []byte) bool { return codec.ValidKeyPart(string(k)) },
	})
}

// GetServiceRevision implements store.Store.
func (s *Store) GetServiceRevision(ctx context.Context, id string, revision int32) (*store.ServiceRecord, error) {
	return getRecord(ctx, s, "GetServiceRevision", id, etcdSvcHistory, codec.RevNameKey(id, id, revision), codec.DecodeService)
}

// ListServices implements store.Store: the current records' keys lower(id)|id are the order.
func (s *Store) ListServices(ctx context.Context, page store.Page) ([]*store.ServiceRecord, string, error) {
	return list(ctx, s, page, listing[store.ServiceRecord]{
		op: "ListServices", token: codec.TokenServices, validKey: codec.ValidNameKey,
		area: etcdSvcCurrent, decode: codec.DecodeService,
	})
}

// ListServiceRevisions implements store.Store.
func (s *Store) ListServiceRevisions(ctx context.Context, id string, page store.Page) ([]*store.ServiceRecord, string, error) {
	return listRevisions(ctx, s, id, page, etcdSvcCurrent, codec.NameKey(id, id), listing[store.ServiceRecord]{
		op: "ListServiceRevisions", token: codec.TokenServiceRevisions, area: etcdSvcHistory, decode: codec.DecodeService,
	})
}

// ListAllServiceRevisions implements store.Store: the history keys lower(id)|id|rev are the order.
func (s *Store) ListAllServiceRevisions(ctx context.Context, page store.Page) ([]*store.ServiceRecord, string, error) {
	return list(ctx, s, page, listing[store.ServiceRecord]{
		op: "ListAllServiceRevisions", token: codec.TokenAllServiceRevisions, validKey: codec.ValidRevNameKey,
		area: etcdSvcHistory, decode: codec.DecodeService,
	})
}

// PutService implements store.Store. The mapped credentials must exist when the transaction commits: it
// compares each one's creation revision, so a concurrent archive either sees the new mapping (and
// refuses) or removes the credential first (and this write reports it unknown).
func (s *Store) PutService(ctx context.Context, rec *store.ServiceRecord, prevRevision int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: etcd store: PutService: nil record")
	}
	if err := checkEtcdKeyParts(rec.ID, rec.ID); err != nil {
		return err
	}
	data, err := s.writer().EncodeService(rec)
	if err != nil {
		return fmt.Errorf("secrets: etcd store: PutService: encode: %w", err)
	}
	id := rec.ID
	curKey := s.key(etcdSvcCurrent, codec.NameKey(id, id))
	histKey := s.key(etcdSvcHistory, codec.RevNameKey(id, id, rec.Revision))
	wanted := slices.Compact(slices.Sorted(slices.Values(rec.Credentials)))
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx, clientv3.OpGet(curKey), clientv3.OpGet(histKey, clientv3.WithCountOnly()))
		if err != nil {
			return s.result(ctx, "PutService", err)
		}
		var old *store.ServiceRecord
		var curMod int64
		var before []string
		if kvs := got[0].Kvs; len(kvs) > 0 {
			if old, err = codec.DecodeService([]byte(etcdSvcCurrent), kvs[0].Value); err != nil {
				return s.result(ctx, "PutService", err)
			}
			curMod, before = kvs[0].ModRevision, old.Credentials
		}
		if err := codec.CheckRevision(codec.ServiceRevision(old), prevRevision, rec.Revision); err != nil {
			return err
		}
		if got[1].Count > 0 {
			return store.ErrRevisionConflict
		}
		mapCmps, linkOps, err := s.remap(ctx, id, before, wanted)
		if err != nil {
			return s.result(ctx, "PutService", err)
		}
		cmps := append([]clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(curKey), "=", curMod),
			clientv3.Compare(clientv3.CreateRevision(histKey), "=", 0),
		}, mapCmps...)
		ops := append([]clientv3.Op{clientv3.OpPut(histKey, string(data)), clientv3.OpPut(curKey, string(data))}, linkOps...)
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil {
			return s.result(ctx, "PutService", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return store.ErrRevisionConflict
}

// ReplaceServiceRevision implements store.Store: the transaction compares the mod revisions of
// the current and the history record read, so a write between the read and the transaction makes
// it read again.
func (s *Store) ReplaceServiceRevision(ctx context.Context, rec, prev *store.ServiceRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := codec.CheckReplacement(rec, prev); err != nil {
		return err
	}
	data, err := s.writer().EncodeService(rec)
	if err != nil {
		return fmt.Errorf("secrets: etcd store: ReplaceServiceRevision: encode: %w", err)
	}
	id := rec.ID
	curKey := s.key(etcdSvcCurrent, codec.NameKey(id, id))
	histKey := s.key(etcdSvcHistory, codec.RevNameKey(id, id, rec.Revision))
	wanted := slices.Compact(slices.Sorted(slices.Values(rec.Credentials)))
	for range etcdWriteAttempts {
		got, _, err := s.read(ctx, clientv3.OpGet(curKey), clientv3.OpGet(histKey))
		if err != nil {
			return s.result(ctx, "ReplaceServiceRevision", err)
		}
		if len(got[0].Kvs) == 0 || len(got[1].Kvs) == 0 {
			return store.ErrNotFound
		}
		cur, err := codec.DecodeService([]byte(etcdSvcCurrent), got[0].Kvs[0].Value)
		if err != nil {
			return s.result(ctx, "ReplaceServiceRevision", err)
		}
		stored, err := codec.DecodeService([]byte(etcdSvcHistory), got[1].Kvs[0].Value)
		if err != nil {
			return s.result(ctx, "ReplaceServiceRevision", err)
		}
		if !store.SameService(stored, prev) {
			return store.ErrRevisionConflict
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(curKey), "=", got[0].Kvs[0].ModRevision),
			clientv3.Compare(clientv3.ModRevision(histKey), "=", got[1].Kvs[0].ModRevision),
		}
		ops := []clientv3.Op{clientv3.OpPut(histKey, string(data))}
		if cur.Revision == rec.Revision {
			// The current revision: its mappings must be current credentials, and the index follows.
			mapCmps, linkOps, err := s.remap(ctx, id, cur.Credentials, wanted)
			if err != nil {
				return s.result(ctx, "ReplaceServiceRevision", err)
			}
			cmps = append(cmps, mapCmps...)
			ops = append(append(ops, clientv3.OpPut(curKey, string(data))), linkOps...)
		}
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil {
			return s.result(ctx, "ReplaceServiceRevision", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return store.ErrRevisionConflict
}

// remap is what a write of service id's current record adds to its transaction when the record maps
// the credentials wanted (sorted, unique) and mapped those of before: the wanted credentials must be
// current (else *store.UnknownCredentialsError) and stay so until the commit (the comparisons), and
// the credential→services links change only where the mapping does (the operations), which keeps
// the transaction small.
func (s *Store) remap(ctx context.Context, id string, before, wanted []string) ([]clientv3.Cmp, []clientv3.Op, error) {
	if missing, err := s.missingCredentials(ctx, wanted); err != nil {
		return nil, nil, err
	} else if len(missing) > 0 {
		return nil, nil, &store.UnknownCredentialsError{IDs: missing}
	}
	var cmps []clientv3.Cmp
	for _, cred := range wanted {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.key(etcdCredCurrent, []byte(cred))), ">", 0))
	}
	var ops []clientv3.Op
	before = slices.Compact(slices.Sorted(slices.Values(before)))
	for _, cred := range before {
		if _, found := slices.BinarySearch(wanted, cred); !found {
			ops = append(ops, clientv3.OpDelete(s.key(etcdCredServices, codec.LinkKey(cred, id))))
		}
	}
	for _, cred := range wanted {
		if _, found := slices.BinarySearch(before, cred); !found {
			ops = append(ops, clientv3.OpPut(s.key(etcdCredServices, codec.LinkKey(cred, id)), ""))
		}
	}
	return cmps, ops, nil
}

// missingCredentials returns the ids (sorted, unique as given) that have no current credential.
func (s *Store) missingCredentials(ctx context.Context, ids []string) ([]string, error) {
	var missing []string
	for chunk := range slices.Chunk(ids, etcdReadChunk) {
		var ops []clientv3.Op
		var asked []string
		for _, cred := range chunk {
			if !codec.ValidKeyPart(cred) {
				missing = append(missing, cred)
				continue
			}
			ops = append(ops, clientv3.OpGet(s.key(etcdCredCurrent, []byte(cred)), clientv3.WithCountOnly()))
			asked = append(asked, cred)
		}
		if len(ops) == 0 {
			continue
		}
		got, _, err := s.read(ctx, ops...)
		if err != nil {
			return nil, err
		}
		for i, r := range got {
			if r.Count == 0 {
				missing = append(missing, asked[i])
			}
		}
	}
	slices.Sort(missing)
	return missing, nil
}

// checkEtcdKeyParts validates the id and name of a record to write (services: the id twice).
func checkEtcdKeyParts(id, name string) error {
	if !codec.ValidKeyPart(id) {
		return errors.New("secrets: etcd store: id must be non-empty and must not contain 0x00")
	}
	if !codec.ValidKeyPart(name) {
		return errors.New("secrets: etcd store: name must be non-empty and must not contain 0x00")
	}
	return nil
}

// SnapshotSource says which member a snapshot came from and what was checked of it first.
type SnapshotSource struct {
	// Endpoint is the member's client URL; MemberID its id, Leader the leader it followed (0: none).
	Endpoint string
	MemberID uint64
	Leader   uint64
	// Revision is the cluster revision of the linearizable read that verified the member (0 when not
	// verified): every write acknowledged before it is in the snapshot.
	Revision int64
	// Verified is true when the member had a leader and answered a linearizable read just before the
	// snapshot; false only for a snapshot taken with allowStale after every member failed that.
	Verified bool
	// PassedOver says why each member tried before this one was not used.
	PassedOver []string
}

// ErrNoCurrentMember is Snapshot's refusal when no member has a leader and answers a linearizable
// read: a snapshot of such a member may lack writes the cluster acknowledged.
var ErrNoCurrentMember = errors.New("no etcd member has a leader and is current")

// Snapshot streams a snapshot of the whole etcd cluster's key space (etcd's Maintenance.Snapshot, one
// read transaction of one member's backend) to w, and returns the bytes written and the member it
// came from. etcd serves a snapshot from whatever a member holds, leader or not, so a member cut off
// from its quorum (or frozen meanwhile) would give an old copy as readily as a current one: each
// endpoint is therefore tried in turn, and the first that reports a leader and answers a linearizable
// read (etcd's ReadIndex: the leader confirms it still leads, and the member has applied everything
// committed up to then) gives the snapshot, still asked with require-leader. Every write acknowledged
// before that read is in the snapshot. When none passes, Snapshot fails with ErrNoCurrentMember naming
// why each was passed over, unless allowStale: the snapshot then comes from the first member that
// serves one, with Verified false. The snapshot ends with the SHA-256 of what precedes it, which
// `etcdutl snapshot restore` verifies. It holds every prefix of the cluster, values of gantry's
// records sealed: restore it with the keyring of the same installation.
func Snapshot(ctx context.Context, opts Options, w io.Writer, allowStale bool) (int64, SnapshotSource, error) {
	tlsCfg, err := tlsConfig(opts)
	if err != nil {
		return 0, SnapshotSource{}, err
	}
	check := opts.RequestTimeout
	if check <= 0 {
		check = DefaultOptions().RequestTimeout
	}
	var passedOver []string
	clients := make([]*clientv3.Client, 0, len(opts.Endpoints))
	defer func() {
		for _, cli := range clients {
			_ = cli.Close()
		}
	}()
	for _, ep := range opts.Endpoints {
		// One client per member, so that every call below goes to that member and no other.
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: opts.DialTimeout, TLS: tlsCfg,
			Logger: zap.NewNop(), Context: ctx})
		if err != nil {
			passedOver = append(passedOver, fmt.Sprintf("%s: %v", ep, err))
			continue
		}
		clients = append(clients, cli)
		src, reason := currentMember(ctx, cli, ep, opts.Prefix, check)
		if reason != "" {
			passedOver = append(passedOver, reason)
			continue
		}
		src.PassedOver = passedOver
		n, err := copySnapshot(clientv3.WithRequireLeader(ctx), cli, ep, w)
		return n, src, err
	}
	if !allowStale {
		return 0, SnapshotSource{PassedOver: passedOver}, fmt.Errorf("%w (%s): a snapshot now could lack writes the cluster acknowledged; restore the quorum, or take a copy marked unverified with -allow-stale",
			ErrNoCurrentMember, strings.Join(passedOver, "; "))
	}
	for _, cli := range clients {
		ep := cli.Endpoints()[0]
		n, err := copySnapshot(ctx, cli, ep, w)
		if err != nil && n == 0 {
			continue // nothing written: try the next member
		}
		return n, SnapshotSource{Endpoint: ep, PassedOver: passedOver}, err
	}
	return 0, SnapshotSource{PassedOver: passedOver}, fmt.Errorf("%w, and none serves a snapshot (%s)", ErrNoCurrentMember, strings.Join(passedOver, "; "))
}

// currentMember checks that the member behind cli (ep) has a leader and answers a linearizable read,
// each step bounded by timeout; reason says why not ("" when it passes).
func currentMember(ctx context.Context, cli *clientv3.Client, ep, prefix string, timeout time.Duration) (src SnapshotSource, reason string) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Status(cctx, ep)
	if err != nil {
		return src, fmt.Sprintf("%s: no status: %v", ep, err)
	}
	src = SnapshotSource{Endpoint: ep, MemberID: st.Header.GetMemberId(), Leader: st.Leader}
	if st.Leader == 0 {
		return src, fmt.Sprintf("%s: has no leader (quorum lost?)", ep)
	}
	// Linearizable (the default): fails on a member without a leader, or one that cannot confirm
	// with its leader that it is current (cut off, or its leader gone).
	resp, err := cli.Get(clientv3.WithRequireLeader(cctx), prefix+"meta/keycheck", clientv3.WithCountOnly())
	if err != nil {
		return src, fmt.Sprintf("%s: no linearizable read (no leader, or not current): %v", ep, err)
	}
	src.Revision, src.Verified = resp.Header.GetRevision(), true
	return src, ""
}

// copySnapshot streams the snapshot of the member behind cli to w.
func copySnapshot(ctx context.Context, cli *clientv3.Client, ep string, w io.Writer) (int64, error) {
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd snapshot from %s: %w", ep, err)
	}
	defer rc.Close()
	n, err := io.Copy(w, rc)
	if err != nil {
		return n, fmt.Errorf("etcd snapshot from %s: %w", ep, err)
	}
	return n, nil
}
