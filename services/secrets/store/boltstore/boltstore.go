package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// bbolt layout, schema version 3 (version 1 lacked the grants bucket, versions 1 and 2 hold only
// JSON records; Open upgrades both in place). In the key shapes below "|" is a 0x00 byte and rev is a
// revision as 4 big-endian bytes; lower() is strings.ToLower. Ids and names cannot contain 0x00, so
// every key splits unambiguously and sorts by its first part, then the next. Records are codec's
// stored form (codec.EncodeCred, EncodeService, EncodeArchived, EncodeGrants), protobuf or, for
// records not rewritten since version 2, JSON; index values are empty unless stated.
var (
	boltMeta = []byte("meta") // schema version, see pkg/boltdb

	boltCredCurrent     = []byte("cred_current")         // id → current record
	boltCredHistory     = []byte("cred_history")         // id|rev → record of that revision
	boltCredByName      = []byte("cred_by_name")         // lower(name)|id: ListCredentials order
	boltCredNameExact   = []byte("cred_name_exact")      // name → id: name uniqueness among current credentials
	boltCredHistoryName = []byte("cred_history_by_name") // lower(name of that revision)|id|rev: ListAllCredentialRevisions order
	boltCredServices    = []byte("cred_services")        // credential id|service id: services mapping a credential

	boltSvcCurrent = []byte("svc_current") // id → current record
	boltSvcHistory = []byte("svc_history") // id|rev → record of that revision
	boltSvcByID    = []byte("svc_by_id")   // lower(id)|id: ListServices order

	boltArchiveCurrent = []byte("archive_current") // credential id → codec.Archived of the last revision
	boltArchiveHistory = []byte("archive_history") // credential id|rev → codec.Archived of that revision

	boltGrants = []byte("grants") // service id → codec.Grants (schema version 2)

	// boltLoginNonces holds the nonces of used login links: nonce → expiry, unix milliseconds as 8
	// big-endian bytes. It needs no schema version: records live minutes, and a build that does not
	// know the bucket only ignores it.
	boltLoginNonces = []byte("login_nonces")

	// boltChangeRequests holds the change requests: id → codec.EncodeChangeRequest (always
	// protobuf). It needs no schema version either: it only adds a bucket, which Open creates in a
	// file of the same version, and a build that does not know it only ignores it (its requests
	// are not data: HasData leaves them out).
	boltChangeRequests = []byte("change_requests")
)

// boltBuckets is every bucket of the layout; Open creates the missing ones.
var boltBuckets = [][]byte{
	boltMeta,
	boltCredCurrent, boltCredHistory, boltCredByName, boltCredNameExact, boltCredHistoryName, boltCredServices,
	boltSvcCurrent, boltSvcHistory, boltSvcByID,
	boltArchiveCurrent, boltArchiveHistory,
	boltGrants,
	boltLoginNonces,
	boltChangeRequests,
}

// boltSchemaVersion is the layout version this code reads and writes. Version 2 added the grants
// bucket; it is refused by builds that read version 1, which would ignore the grants it holds (and
// so refuse services granted since). Version 3 may hold records in codec.FormatProto; it is refused
// by builds that read version 2, which would fail on every such record instead of refusing to start.
const boltSchemaVersion = 3

// Store is the store.Store adapter for an embedded bbolt file (see pkg/boltdb). Every write is one
// transaction, run through a boltdb.Batcher (group commit without a fixed delay, its commit's panics
// contained): a lone writer commits at once, and writers arriving while a commit syncs share the
// next one. Reads are View transactions whose results are decoded into fresh memory.
//
// Empty collections: a returned record has nil — never empty non-nil — Metadata, Tags, Keys,
// SealedPairs, WrappedKey, Credentials and BlindCredentials when there is nothing in them (whatever was
// put), and listings and CredentialServices return a nil slice when there are no items.
//
// Besides the store.Store contract: ids, names and the credential ids of a service mapping must be
// non-empty and free of 0x00 bytes (writes with such values fail, reads find nothing); a credential
// id that was archived cannot be created again (store.ErrRevisionConflict); SetLastDecrypted
// returns store.ErrNotFound for a history revision that does not exist.
//
// A panic inside bbolt (which damaged pages can cause) is contained: the call returns
// store.ErrStorage, the store marks itself failed and refuses every later call with
// store.ErrStorage, and Probe fails, so health goes NOT_SERVING while the rest of the process
// (gateway, chat) keeps running. Only a restart, which checks the file again (boltdb.CheckFile,
// and the consistency check with -bolt-check), clears the state.
type Store struct {
	db *bolt.DB
	// batcher groups concurrent writes into one commit and recovers a panic of bbolt's commit, which
	// runs on the batcher's writer loop, a goroutine nothing else could recover it on.
	batcher *boltdb.Batcher
	logger  *zap.Logger
	// failed is set once bbolt panicked: its in-memory state can no longer be trusted.
	failed atomic.Bool
	// stallTimeout is the batcher's stall timeout (SetWriteStallTimeout), 0 when off.
	stallTimeout time.Duration
	// readHold, while set (HoldReads), is a channel every read transaction waits on before it begins.
	readHold atomic.Pointer[chan struct{}]
}

// SetWriteStallTimeout turns on the detection of stalled writes (a frozen or failing disk): once the
// oldest write has not committed within d, Probe fails (health goes NOT_SERVING) and writes are
// refused at once with a *store.WriteStalledError (503 with Retry-After) instead of waiting for the
// disk, until the commit completes; then the store serves writes again by itself. Reads go on: bbolt
// reads do not wait for a commit. d <= 0 turns it off. Call it before the store is used.
func (s *Store) SetWriteStallTimeout(d time.Duration) {
	s.stallTimeout = max(d, 0)
	s.batcher.SetStallTimeout(d)
}

// WriteStalledFor returns how long the oldest write has waited to commit while writes are stalled
// (see SetWriteStallTimeout), and 0 when they are not: the secrets.store.write_stalled_seconds gauge.
func (s *Store) WriteStalledFor() time.Duration { return s.batcher.Stalled() }

// WriteQueueDepth returns how many writes wait for the batcher's next commit.
func (s *Store) WriteQueueDepth() int { return s.batcher.Queued() }

// HoldWrites takes bbolt's write lock, as a commit stuck on a frozen disk holds it, until release is
// called: every commit waits meanwhile. It is the fault injection of the stall tests (a frozen
// filesystem needs root and a filesystem of its own); it fails on a read-only or failed store.
func (s *Store) HoldWrites() (release func(), err error) {
	if s.failed.Load() {
		return nil, errBoltFailed
	}
	tx, err := s.db.Begin(true)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = tx.Rollback() }) }, nil
}

// HoldReads makes every read transaction wait before it begins until release is called, as reads wait
// for bbolt's mmap lock while a commit that remaps the growing file is stuck on a frozen disk. It is
// the fault injection of the read stall tests; the health probe's read waits too.
func (s *Store) HoldReads() (release func()) {
	gate := make(chan struct{})
	s.readHold.Store(&gate)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.readHold.CompareAndSwap(&gate, nil)
			close(gate)
		})
	}
}

var _ store.Store = (*Store)(nil)

// Open opens (or creates) the store at path; see boltdb.Open for opts. It fails when the
// file holds another schema version. Failures of the storage itself (not the store.Store errors) are logged
// at error level on logger, used as given (the caller names it, e.g. "secrets.store"), without record
// contents; nil means no logging.
func Open(path string, opts boltdb.Options, logger *zap.Logger) (*Store, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	db, err := boltdb.Open(path, opts, logger)
	if err != nil {
		return nil, err
	}
	panicked := false
	if err := prepareContained(db, &panicked); err != nil {
		if !panicked {
			// After a panic bbolt's locks may still be held: leave the file to the exiting process.
			_ = db.Close()
		}
		return nil, err
	}
	return &Store{db: db, batcher: boltdb.NewBatcher(db), logger: logger}, nil
}

// prepareContained upgrades the schema, checks it and creates the missing buckets, with a panic or
// memory fault of bbolt (a damaged page read on the way, when the consistency check was skipped)
// returned as boltdb.ErrDamaged naming the file instead of ending the process.
func prepareContained(db *bolt.DB, panicked *bool) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			*panicked = true
			err = fmt.Errorf("boltdb: %s: %w: reading it fails: %v", db.Path(), boltdb.ErrDamaged, r)
		}
	}()
	if err := upgradeBoltSchema(db); err != nil {
		return fmt.Errorf("secrets: bolt store %s: %w", db.Path(), err)
	}
	if err := boltdb.EnsureSchema(db, boltMeta, boltSchemaVersion); err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range boltBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("secrets: bolt store %s: %w", db.Path(), err)
	}
	return nil
}

// upgradeBoltSchema brings a version 1 or 2 file to version 3. Both changes are additive: version 2
// added a new, empty bucket, created here before the new version is written (a crash between the two
// leaves a version 1 file with an empty grants bucket, which the next open upgrades the same way);
// version 3 only allows records in the new format, which this build reads beside the old one, so the
// records stay as they are until their next write or gantry check -upgrade. A file of any other
// version is left to EnsureSchema.
func upgradeBoltSchema(db *bolt.DB) error {
	v, err := boltdb.ReadSchemaVersion(db, boltMeta)
	if err != nil || (v != 1 && v != 2) {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltGrants)
		return err
	})
	if err != nil {
		return fmt.Errorf("upgrade to schema version %d: %w", boltSchemaVersion, err)
	}
	return boltdb.WriteSchemaVersion(db, boltMeta, boltSchemaVersion)
}

// Close stops the batcher's writer loop (writes already queued are committed first) and closes the
// database file. A store that failed (a contained panic) leaves the file open: bbolt's locks may be
// held by the transaction that panicked, and the process is about to exit.
func (s *Store) Close() error {
	s.batcher.Close()
	if s.failed.Load() {
		return fmt.Errorf("%w: not closing a bolt store that failed", store.ErrStorage)
	}
	return s.db.Close()
}

// errBoltFailed is returned by every call after bbolt panicked once.
var errBoltFailed = fmt.Errorf("%w: the bolt store stopped after an internal failure (damaged file?); restart gantry, which checks the file", store.ErrStorage)

// view runs a read transaction, containing a bbolt panic. A read waits for nothing but bbolt's mmap
// lock, which a commit holds while it remaps a growing file, so on a frozen disk a read can wait as
// long as the stall; with stall detection on (SetWriteStallTimeout) it does not: a read whose
// transaction has not begun within the stall timeout is refused with a *store.ReadStalledError (503
// with Retry-After), and one whose ctx ends first with ctx's error, so that the caller gets an answer
// within its deadline. fn then never runs (the transaction, begun later, ends at once), so nothing
// the caller reads is written behind its back; a read whose transaction has begun runs to its end.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if s.failed.Load() {
		return errBoltFailed
	}
	hold := s.readHold.Load()
	if hold == nil && (s.stallTimeout <= 0 || s.batcher.CommitWaited() < slowCommit) {
		// The disk answers: the read runs on the caller's goroutine. Watching it from another
		// costs a goroutine, a timer and two channels (about 4.5 µs, a few per cent of a read's
		// CPU), so only reads that begin while a commit is slow pay for it.
		return s.viewNow(fn)
	}
	const (
		waiting int32 = iota
		begun
		abandoned
	)
	var state atomic.Int32
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		if hold != nil {
			<-*hold
		}
		done <- s.viewNow(func(tx *bolt.Tx) error {
			if !state.CompareAndSwap(waiting, begun) {
				return nil // the caller has answered already
			}
			close(started)
			return fn(tx)
		})
	}()
	var timeout <-chan time.Time
	if s.stallTimeout > 0 {
		timer := time.NewTimer(s.stallTimeout)
		defer timer.Stop()
		timeout = timer.C
	}
	queued := time.Now()
	select {
	case err := <-done:
		return err
	case <-started:
		return <-done
	case <-timeout:
		if state.CompareAndSwap(waiting, abandoned) {
			return &store.ReadStalledError{For: time.Since(queued), RetryAfter: s.stallTimeout}
		}
	case <-ctx.Done():
		if state.CompareAndSwap(waiting, abandoned) {
			return ctx.Err()
		}
	}
	return <-done // fn began meanwhile: its outcome is the answer
}

// slowCommit is how long a commit may be on its way before reads are watched for a stall (view): many
// times a commit on a working disk (fdatasync takes milliseconds), far below any stall timeout.
const slowCommit = 100 * time.Millisecond

// viewNow runs a read transaction in this goroutine, containing a bbolt panic.
func (s *Store) viewNow(fn func(*bolt.Tx) error) (err error) {
	defer s.contain(&err)
	// A damaged page id makes bbolt read past its mapping: a memory fault, fatal to the process
	// unless turned into a panic, which contain then stops.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.db.View(fn)
}

// batch runs a write transaction through the batcher (bbolt's Batch, with its commit contained),
// containing a bbolt panic. fn may run more than once (see PutCredential).
func (s *Store) batch(fn func(*bolt.Tx) error) (err error) {
	if s.failed.Load() {
		return errBoltFailed
	}
	defer s.contain(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// A panic of fn inside a shared batch makes the batcher re-run fn alone, in this goroutine, where
	// it panics again and is contained; a panic of the shared commit comes back as a PanicError.
	err = s.batcher.Do(fn)
	var p *boltdb.PanicError
	var stalled *boltdb.StalledError
	if errors.As(err, &stalled) {
		return &store.WriteStalledError{For: stalled.For, RetryAfter: s.stallTimeout}
	}
	if errors.As(err, &p) {
		s.fail(fmt.Sprintf("%v\ncommitting goroutine:\n%s", p.Value, p.Stack))
		return fmt.Errorf("%w: %v", store.ErrStorage, err)
	}
	return err
}

// contain turns a panic of bbolt into store.ErrStorage and marks the store failed.
func (s *Store) contain(err *error) {
	if r := recover(); r != nil {
		s.fail(r)
		*err = fmt.Errorf("%w: bbolt panicked: %v", store.ErrStorage, r)
	}
}

func (s *Store) fail(reason any) {
	if s.failed.CompareAndSwap(false, true) {
		s.logger.Error("THE BOLT STORE FAILED: bbolt panicked, the database file is probably damaged; every request now answers 503 until gantry restarts (run `gantry check`, restore from a backup if it fails)",
			zap.Any("panic", reason), zap.Stack("stack"))
	}
}

// getRecord reads the record at key of bucket for the operation op, decoded; store.ErrNotFound when
// nothing is stored there. Every single-key read of a record is this.
func getRecord[T any](ctx context.Context, s *Store, op string, bucket, key []byte, decode func(bucket, raw []byte) (*T, error)) (*T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *T
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			// A bucket newer than the file holds nothing: a file opened read-only (OpenReadOnly)
			// was never prepared by Open, which creates the missing buckets.
			return store.ErrNotFound
		}
		raw := b.Get(key)
		if raw == nil {
			return store.ErrNotFound
		}
		var err error
		rec, err = decode(bucket, raw)
		return err
	})
	if err != nil {
		return nil, s.result(op, err)
	}
	return rec, nil
}

// GetCredential implements store.Store.
func (s *Store) GetCredential(ctx context.Context, id string) (*store.CredentialRecord, error) {
	return getRecord(ctx, s, "GetCredential", boltCredCurrent, []byte(id), codec.DecodeCred)
}

// GetCredentials implements store.Store, in one read transaction.
func (s *Store) GetCredentials(ctx context.Context, ids []string) ([]*store.CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]*store.CredentialRecord, 0, len(ids))
	err := s.view(ctx, func(tx *bolt.Tx) error {
		current := tx.Bucket(boltCredCurrent)
		for _, id := range ids {
			raw := current.Get([]byte(id))
			if raw == nil {
				continue
			}
			rec, err := codec.DecodeCred(boltCredCurrent, raw)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, s.result("GetCredentials", err)
}

// GetCredentialRevision implements store.Store.
func (s *Store) GetCredentialRevision(ctx context.Context, id string, revision int32) (*store.CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !codec.ValidKeyPart(id) {
		return nil, store.ErrNotFound
	}
	var rec *store.CredentialRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltCredHistory).Get(codec.RevKey(id, revision))
		if raw == nil {
			return store.ErrNotFound
		}
		var err error
		rec, err = codec.DecodeCred(boltCredHistory, raw)
		return err
	})
	return rec, s.result("GetCredentialRevision", err)
}

// ListCredentials implements store.Store.
func (s *Store) ListCredentials(ctx context.Context, page store.Page) ([]*store.CredentialRecord, string, error) {
	return list(ctx, s, page, listing[store.CredentialRecord]{
		op: "ListCredentials", token: codec.TokenCredentials, validKey: codec.ValidNameKey,
		walk: boltCredByName, within: []byte(page.NamePrefix), records: boltCredCurrent, decode: codec.DecodeCred,
	})
}

// ListCredentialRevisions implements store.Store.
func (s *Store) ListCredentialRevisions(ctx context.Context, id string, page store.Page) ([]*store.CredentialRecord, string, error) {
	return listRevisions(ctx, s, id, page, boltCredCurrent, listing[store.CredentialRecord]{
		op: "ListCredentialRevisions", token: codec.TokenCredentialRevisions, walk: boltCredHistory, decode: codec.DecodeCred,
	})
}

// ListAllCredentialRevisions implements store.Store. The index key lower(name)|id|rev ends with the
// history key id|rev.
func (s *Store) ListAllCredentialRevisions(ctx context.Context, page store.Page) ([]*store.CredentialRecord, string, error) {
	return list(ctx, s, page, listing[store.CredentialRecord]{
		op: "ListAllCredentialRevisions", token: codec.TokenAllCredentialRevisions, validKey: codec.ValidRevNameKey,
		walk: boltCredHistoryName, records: boltCredHistory, decode: codec.DecodeCred,
	})
}

// PutCredential implements store.Store.
func (s *Store) PutCredential(ctx context.Context, rec *store.CredentialRecord, prevRevision int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: bolt store: PutCredential: nil record")
	}
	if err := checkKeyParts(rec.ID, rec.Name); err != nil {
		return err
	}
	data, err := codec.EncodeCred(rec)
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutCredential: encode: %w", err)
	}
	id := []byte(rec.ID)
	name := []byte(rec.Name)
	histKey := codec.RevKey(rec.ID, rec.Revision)

	// Batch may run this more than once (in a batch that is then rolled back, then alone): it reads,
	// checks and writes every time and touches nothing outside the transaction.
	err = s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		byName, exact := tx.Bucket(boltCredByName), tx.Bucket(boltCredNameExact)

		var old *codec.CredHead
		if raw := current.Get(id); raw != nil {
			head, err := codec.DecodeCredHead(boltCredCurrent, raw)
			if err != nil {
				return err
			}
			old = &head
		} else if tx.Bucket(boltArchiveCurrent).Get(id) != nil {
			return store.ErrRevisionConflict // archived ids stay archived
		}
		var oldRevision int32
		if old != nil {
			oldRevision = old.Revision
		}
		if err := codec.CheckRevision(oldRevision, prevRevision, rec.Revision); err != nil {
			return err
		}
		if history.Get(histKey) != nil {
			return store.ErrRevisionConflict
		}
		holder := exact.Get(name)
		if holder != nil && !bytes.Equal(holder, id) {
			return &store.NameTakenError{ID: string(holder)}
		}

		puts := []kv{
			{history, histKey, data},
			{current, id, data},
			{tx.Bucket(boltCredHistoryName), codec.RevNameKey(rec.Name, rec.ID, rec.Revision), []byte{}},
		}
		// The name indexes change only with the name. Rewriting an entry with the same bytes still
		// dirties its page, which the commit then writes and syncs: most updates keep the name, and
		// skipping them leaves a commit three pages per update instead of five.
		if old == nil || old.Name != rec.Name || holder == nil {
			if old != nil {
				if err := byName.Delete(codec.NameKey(old.Name, rec.ID)); err != nil {
					return err
				}
				if holder := exact.Get([]byte(old.Name)); bytes.Equal(holder, id) {
					if err := exact.Delete([]byte(old.Name)); err != nil {
						return err
					}
				}
			}
			puts = append(puts, kv{byName, codec.NameKey(rec.Name, rec.ID), []byte{}}, kv{exact, name, id})
		}
		return putAll(puts...)
	})
	return s.result("PutCredential", err)
}

// SetLastDecrypted implements store.Store.
func (s *Store) SetLastDecrypted(ctx context.Context, id string, revision int32, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !codec.ValidKeyPart(id) {
		return store.ErrNotFound
	}
	histKey := codec.RevKey(id, revision)
	err := s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		rawCur, rawHist := current.Get([]byte(id)), history.Get(histKey)
		if rawCur == nil || rawHist == nil {
			return store.ErrNotFound
		}
		cur, err := codec.DecodeCred(boltCredCurrent, rawCur)
		if err != nil {
			return err
		}
		hist, err := codec.DecodeCred(boltCredHistory, rawHist)
		if err != nil {
			return err
		}
		stamp := at
		hist.LastDecryptedDate = &stamp
		data, err := codec.EncodeCred(hist)
		if err != nil {
			return err
		}
		if err := history.Put(histKey, data); err != nil {
			return err
		}
		if cur.Revision != revision {
			return nil
		}
		cur.LastDecryptedDate = &stamp
		if data, err = codec.EncodeCred(cur); err != nil {
			return err
		}
		return current.Put([]byte(id), data)
	})
	return s.result("SetLastDecrypted", err)
}

// RewrapCredential implements store.Store: one write transaction through the batcher, like
// SetLastDecrypted, so the check of oldWrapped and the write cannot be split by another writer.
func (s *Store) RewrapCredential(ctx context.Context, id string, revision int32, oldWrapped, newWrapped []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(oldWrapped) == 0 || len(newWrapped) == 0 {
		return errors.New("secrets: bolt store: RewrapCredential: empty wrapped key")
	}
	if !codec.ValidKeyPart(id) {
		return store.ErrNotFound
	}
	histKey := codec.RevKey(id, revision)
	err := s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		rawCur, rawHist := current.Get([]byte(id)), history.Get(histKey)
		if rawCur == nil || rawHist == nil {
			return store.ErrNotFound
		}
		hist, err := codec.DecodeCred(boltCredHistory, rawHist)
		if err != nil {
			return err
		}
		if !bytes.Equal(hist.WrappedKey, oldWrapped) {
			return store.ErrRevisionConflict
		}
		cur, err := codec.DecodeCred(boltCredCurrent, rawCur)
		if err != nil {
			return err
		}
		hist.WrappedKey = newWrapped // encoding copies it
		data, err := codec.EncodeCred(hist)
		if err != nil {
			return err
		}
		if err := history.Put(histKey, data); err != nil {
			return err
		}
		if cur.Revision != revision || !bytes.Equal(cur.WrappedKey, oldWrapped) {
			return nil
		}
		cur.WrappedKey = newWrapped
		if data, err = codec.EncodeCred(cur); err != nil {
			return err
		}
		return current.Put([]byte(id), data)
	})
	return s.result("RewrapCredential", err)
}

// CredentialServices implements store.Store.
func (s *Store) CredentialServices(ctx context.Context, id string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !codec.ValidKeyPart(id) {
		return nil, nil
	}
	prefix := codec.RevPrefix(id)
	var out []string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(boltCredServices).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			out = append(out, string(k[len(prefix):]))
		}
		return nil
	})
	if err != nil {
		return nil, s.result("CredentialServices", err)
	}
	return out, nil
}

// ArchiveCredential implements store.Store.
func (s *Store) ArchiveCredential(ctx context.Context, id string, prevRevision int32, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !codec.ValidKeyPart(id) {
		return store.ErrNotFound
	}
	key := []byte(id)
	prefix := codec.RevPrefix(id)
	err := s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		exact, historyName := tx.Bucket(boltCredNameExact), tx.Bucket(boltCredHistoryName)
		rawCur := current.Get(key)
		if rawCur == nil {
			return store.ErrNotFound
		}
		cur, err := codec.DecodeCred(boltCredCurrent, rawCur)
		if err != nil {
			return err
		}
		if cur.Revision != prevRevision {
			return store.ErrRevisionConflict
		}
		if k, _ := tx.Bucket(boltCredServices).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
			return store.ErrStillMapped
		}

		data, err := codec.EncodeArchived(at, rawCur)
		if err != nil {
			return err
		}
		if err := tx.Bucket(boltArchiveCurrent).Put(key, data); err != nil {
			return err
		}
		// Move the history, collecting the keys to delete once the cursor is done.
		var histKeys, nameKeys [][]byte
		archive := tx.Bucket(boltArchiveHistory)
		c := history.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			rec, err := codec.DecodeCred(boltCredHistory, v)
			if err != nil {
				return err
			}
			data, err := codec.EncodeArchived(at, v)
			if err != nil {
				return err
			}
			k = boltdb.Copy(k)
			if err := archive.Put(k, data); err != nil {
				return err
			}
			histKeys = append(histKeys, k)
			nameKeys = append(nameKeys, codec.RevNameKey(rec.Name, id, rec.Revision))
		}
		for _, k := range histKeys {
			if err := history.Delete(k); err != nil {
				return err
			}
		}
		for _, k := range nameKeys {
			if err := historyName.Delete(k); err != nil {
				return err
			}
		}
		if err := current.Delete(key); err != nil {
			return err
		}
		if err := tx.Bucket(boltCredByName).Delete(codec.NameKey(cur.Name, id)); err != nil {
			return err
		}
		if holder := exact.Get([]byte(cur.Name)); bytes.Equal(holder, key) {
			return exact.Delete([]byte(cur.Name))
		}
		return nil
	})
	return s.result("ArchiveCredential", err)
}

// GetArchivedCredential implements store.Store.
func (s *Store) GetArchivedCredential(ctx context.Context, id string) (*store.CredentialRecord, error) {
	a, err := getRecord(ctx, s, "GetArchivedCredential", boltArchiveCurrent, []byte(id), codec.DecodeArchived)
	if err != nil {
		return nil, err
	}
	return a.Record, nil
}

// ListArchivedCredentials implements store.Store.
func (s *Store) ListArchivedCredentials(ctx context.Context, page store.Page) ([]*store.ArchivedCredential, string, error) {
	return list(ctx, s, page, listing[store.ArchivedCredential]{
		op: "ListArchivedCredentials", token: codec.TokenArchivedCredentials, walk: boltArchiveCurrent, decode: codec.DecodeArchived,
		validKey: func(k []byte) bool { return codec.ValidKeyPart(string(k)) },
	})
}

// GetService implements store.Store.
func (s *Store) GetService(ctx context.Context, id string) (*store.ServiceRecord, error) {
	return getRecord(ctx, s, "GetService", boltSvcCurrent, []byte(id), codec.DecodeService)
}

// GetServiceRevision implements store.Store.
func (s *Store) GetServiceRevision(ctx context.Context, id string, revision int32) (*store.ServiceRecord, error) {
	if !codec.ValidKeyPart(id) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, store.ErrNotFound
	}
	return getRecord(ctx, s, "GetServiceRevision", boltSvcHistory, codec.RevKey(id, revision), codec.DecodeService)
}

// ListServices implements store.Store.
func (s *Store) ListServices(ctx context.Context, page store.Page) ([]*store.ServiceRecord, string, error) {
	return list(ctx, s, page, listing[store.ServiceRecord]{
		op: "ListServices", token: codec.TokenServices, validKey: codec.ValidNameKey,
		walk: boltSvcByID, records: boltSvcCurrent, decode: codec.DecodeService,
	})
}

// ListServiceRevisions implements store.Store.
func (s *Store) ListServiceRevisions(ctx context.Context, id string, page store.Page) ([]*store.ServiceRecord, string, error) {
	return listRevisions(ctx, s, id, page, boltSvcCurrent, listing[store.ServiceRecord]{
		op: "ListServiceRevisions", token: codec.TokenServiceRevisions, walk: boltSvcHistory, decode: codec.DecodeService,
	})
}

// ListAllServiceRevisions implements store.Store. There is no separate index: it walks svc_by_id and, for
// each service, its history, so a position is lower(id)|id|rev (the shape of cred_history_by_name).
func (s *Store) ListAllServiceRevisions(ctx context.Context, page store.Page) ([]*store.ServiceRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := codec.DecodePageToken(page, codec.TokenAllServiceRevisions, codec.ValidRevNameKey)
	if err != nil {
		return nil, "", err
	}
	var afterIndex, afterHistory []byte // svc_by_id key and svc_history key of the position
	if after != nil {
		afterIndex = after[:len(after)-5]
		afterHistory = after[bytes.IndexByte(after, 0)+1:]
	}
	var out []*store.ServiceRecord
	var next []byte
	err = s.view(ctx, func(tx *bolt.Tx) error {
		index := tx.Bucket(boltSvcByID).Cursor()
		history := tx.Bucket(boltSvcHistory).Cursor()
		var k []byte
		if after == nil {
			k, _ = index.First()
		} else {
			k, _ = index.Seek(afterIndex)
		}
		var last []byte
		for ; k != nil; k, _ = index.Next() {
			prefix := k[bytes.IndexByte(k, 0)+1:]
			prefix = append(prefix[:len(prefix):len(prefix)], 0)
			var hk, hv []byte
			if after != nil && bytes.Equal(k, afterIndex) {
				if hk, hv = history.Seek(afterHistory); bytes.Equal(hk, afterHistory) {
					hk, hv = history.Next()
				}
			} else {
				hk, hv = history.Seek(prefix)
			}
			for ; hk != nil && bytes.HasPrefix(hk, prefix); hk, hv = history.Next() {
				if page.Limit > 0 && len(out) == page.Limit {
					next = last
					return nil
				}
				rec, err := codec.DecodeService(boltSvcHistory, hv)
				if err != nil {
					return err
				}
				out = append(out, rec)
				last = append(append(append(last[:0:0], k...), 0), hk[len(hk)-4:]...)
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", s.result("ListAllServiceRevisions", err)
	}
	return out, codec.EncodePageToken(codec.TokenAllServiceRevisions, next), nil
}

// PutService implements store.Store.
func (s *Store) PutService(ctx context.Context, rec *store.ServiceRecord, prevRevision int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: bolt store: PutService: nil record")
	}
	if err := checkKeyParts(rec.ID, rec.ID); err != nil {
		return err
	}
	data, err := codec.EncodeService(rec)
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutService: encode: %w", err)
	}
	id := []byte(rec.ID)
	histKey := codec.RevKey(rec.ID, rec.Revision)

	// See PutCredential: this may run more than once.
	err = s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltSvcCurrent), tx.Bucket(boltSvcHistory)
		var old *store.ServiceRecord
		if raw := current.Get(id); raw != nil {
			var err error
			if old, err = codec.DecodeService(boltSvcCurrent, raw); err != nil {
				return err
			}
		}
		if err := codec.CheckRevision(codec.ServiceRevision(old), prevRevision, rec.Revision); err != nil {
			return err
		}
		if history.Get(histKey) != nil {
			return store.ErrRevisionConflict
		}
		var before []string
		if old != nil {
			before = old.Credentials
		}
		if err := mapCredentials(tx, rec.ID, before, rec.Credentials); err != nil {
			return err
		}
		return putAll(
			kv{history, histKey, data},
			kv{current, id, data},
			kv{tx.Bucket(boltSvcByID), codec.NameKey(rec.ID, rec.ID), []byte{}},
		)
	})
	return s.result("PutService", err)
}

// ReplaceServiceRevision implements store.Store.
func (s *Store) ReplaceServiceRevision(ctx context.Context, rec, prev *store.ServiceRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := codec.CheckReplacement(rec, prev); err != nil {
		return err
	}
	data, err := codec.EncodeService(rec)
	if err != nil {
		return fmt.Errorf("secrets: bolt store: ReplaceServiceRevision: encode: %w", err)
	}
	id := []byte(rec.ID)
	histKey := codec.RevKey(rec.ID, rec.Revision)
	// See PutCredential: this may run more than once.
	err = s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltSvcCurrent), tx.Bucket(boltSvcHistory)
		rawCur, rawHist := current.Get(id), history.Get(histKey)
		if rawCur == nil || rawHist == nil {
			return store.ErrNotFound
		}
		stored, err := codec.DecodeService(boltSvcHistory, rawHist)
		if err != nil {
			return err
		}
		if !store.SameService(stored, prev) {
			return store.ErrRevisionConflict
		}
		cur, err := codec.DecodeService(boltSvcCurrent, rawCur)
		if err != nil {
			return err
		}
		if cur.Revision != rec.Revision {
			return history.Put(histKey, data) // history only: it may name archived credentials
		}
		if err := mapCredentials(tx, rec.ID, cur.Credentials, rec.Credentials); err != nil {
			return err
		}
		return putAll(kv{history, histKey, data}, kv{current, id, data})
	})
	return s.result("ReplaceServiceRevision", err)
}

// mapCredentials moves the credential→services links of service serviceID from the credentials of
// before (its current record's, nil for none) to those of after, which must all be current
// credentials (else *store.UnknownCredentialsError, and nothing changed): a write of a service's
// current record.
func mapCredentials(tx *bolt.Tx, serviceID string, before, after []string) error {
	links, credentials := tx.Bucket(boltCredServices), tx.Bucket(boltCredCurrent)
	var missing []string
	for _, cred := range after {
		if !codec.ValidKeyPart(cred) || credentials.Get([]byte(cred)) == nil {
			missing = append(missing, cred)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return &store.UnknownCredentialsError{IDs: slices.Compact(missing)}
	}
	for _, cred := range before {
		if err := links.Delete(codec.LinkKey(cred, serviceID)); err != nil {
			return err
		}
	}
	for _, cred := range after {
		if err := links.Put(codec.LinkKey(cred, serviceID), []byte{}); err != nil {
			return err
		}
	}
	return nil
}

// Grants implements store.Store.
func (s *Store) Grants(ctx context.Context, serviceID string) (store.GrantsRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.GrantsRecord{}, err
	}
	if !codec.ValidKeyPart(serviceID) {
		return store.GrantsRecord{}, store.ErrNotFound
	}
	var rec store.GrantsRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltGrants).Get([]byte(serviceID))
		if raw == nil {
			return store.ErrNotFound
		}
		var err error
		rec, err = codec.DecodeGrants(boltGrants, raw)
		return err
	})
	return rec, s.result("Grants", err)
}

// PutGrants implements store.Store.
func (s *Store) PutGrants(ctx context.Context, serviceID string, rec store.GrantsRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkKeyParts(serviceID, serviceID); err != nil {
		return err
	}
	data, err := codec.EncodeGrants(rec)
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutGrants: encode: %w", err)
	}
	err = s.batch(func(tx *bolt.Tx) error {
		return tx.Bucket(boltGrants).Put([]byte(serviceID), data)
	})
	return s.result("PutGrants", err)
}

// ClaimLoginNonce implements store.Store. Expired records are swept by the claims themselves (in
// the same transaction): the bucket holds only the links of the last minutes, so the sweep is short.
func (s *Store) ClaimLoginNonce(ctx context.Context, nonce string, expires time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !codec.ValidKeyPart(nonce) || len(nonce) > bolt.MaxKeySize {
		return false, errors.New("secrets: bolt store: a login nonce must be non-empty, short and free of 0x00")
	}
	expiry := binary.BigEndian.AppendUint64(nil, uint64(expires.UnixMilli()))
	var claimed bool
	err := s.batch(func(tx *bolt.Tx) error {
		claimed = false // the batcher may run fn again
		// Created here too: a file opened read-only never got the bucket, and writes need none of Open.
		b, err := tx.CreateBucketIfNotExists(boltLoginNonces)
		if err != nil {
			return err
		}
		now := uint64(time.Now().UnixMilli())
		var expired [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			if len(v) != 8 || binary.BigEndian.Uint64(v) <= now {
				expired = append(expired, bytes.Clone(k))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range expired {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		if b.Get([]byte(nonce)) != nil {
			return nil
		}
		claimed = true
		return b.Put([]byte(nonce), expiry)
	})
	return claimed, s.result("ClaimLoginNonce", err)
}

// LoginNonceClaimed implements store.Store: a read transaction; a record past its expiry that no
// claim has swept yet counts as gone.
func (s *Store) LoginNonceClaimed(ctx context.Context, nonce string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !codec.ValidKeyPart(nonce) || len(nonce) > bolt.MaxKeySize {
		return false, errors.New("secrets: bolt store: a login nonce must be non-empty, short and free of 0x00")
	}
	var claimed bool
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltLoginNonces)
		if b == nil {
			return nil
		}
		v := b.Get([]byte(nonce))
		claimed = len(v) == 8 && binary.BigEndian.Uint64(v) > uint64(time.Now().UnixMilli())
		return nil
	})
	return claimed, s.result("LoginNonceClaimed", err)
}

// GetChangeRequest implements store.Store.
func (s *Store) GetChangeRequest(ctx context.Context, id string) (*store.ChangeRequestRecord, error) {
	return getRecord(ctx, s, "GetChangeRequest", boltChangeRequests, []byte(id), codec.DecodeChangeRequest)
}

// PutChangeRequest implements store.Store: the stored version is read and checked in the write
// transaction itself, so of two approvers deciding at once one wins.
func (s *Store) PutChangeRequest(ctx context.Context, rec *store.ChangeRequestRecord, prevVersion int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: bolt store: PutChangeRequest: nil record")
	}
	if !codec.ValidKeyPart(rec.ID) || len(rec.ID) > bolt.MaxKeySize {
		return errors.New("secrets: bolt store: a change request id must be non-empty, short and free of 0x00")
	}
	data, err := codec.EncodeChangeRequest(rec)
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutChangeRequest: encode: %w", err)
	}
	id := []byte(rec.ID)
	// See PutCredential: this may run more than once; it reads and checks every time and changes
	// nothing outside the transaction.
	err = s.batch(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltChangeRequests)
		var stored int32
		if raw := b.Get(id); raw != nil {
			old, err := codec.DecodeChangeRequest(boltChangeRequests, raw)
			if err != nil {
				return err
			}
			if prevVersion == 0 {
				return store.ErrRevisionConflict // a create finds the id taken
			}
			stored = old.Version
		}
		if err := codec.CheckRevision(stored, prevVersion, rec.Version); err != nil {
			return err
		}
		return b.Put(id, data)
	})
	return s.result("PutChangeRequest", err)
}

// ListChangeRequests implements store.Store: the bucket's keys are the ids, so its order is the
// listing's.
func (s *Store) ListChangeRequests(ctx context.Context, page store.Page) ([]*store.ChangeRequestRecord, string, error) {
	return list(ctx, s, page, listing[store.ChangeRequestRecord]{
		op: "ListChangeRequests", token: codec.TokenChangeRequests, walk: boltChangeRequests, decode: codec.DecodeChangeRequest,
		validKey: func(k []byte) bool { return codec.ValidKeyPart(string(k)) },
	})
}

// result passes nil and the store.Store's own errors through; anything else is a failure of the storage
// (I/O, a closed database, corrupt data): it is logged — the operation and error, never record
// contents — and returned wrapped.
func (s *Store) result(op string, err error) error {
	var nameTaken *store.NameTakenError
	var unknown *store.UnknownCredentialsError
	var stalled *store.WriteStalledError
	var readStalled *store.ReadStalledError
	switch {
	case err == nil,
		errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrRevisionConflict), errors.Is(err, store.ErrBadPageToken),
		errors.Is(err, store.ErrStillMapped), errors.As(err, &nameTaken), errors.As(err, &unknown),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &stalled), errors.As(err, &readStalled):
		// Refused at once, one per call while the disk is stalled: the health probe logs the stall.
		return err
	case errors.Is(err, store.ErrStorage):
		s.logger.Error("bolt store failure", zap.String("op", op), zap.Error(err))
		return err
	}
	s.logger.Error("bolt store failure", zap.String("op", op), zap.Error(err))
	// err stays in the chain (a full disk's ENOSPC: store.IsDiskFull).
	return fmt.Errorf("%w: bolt store: %s: %w", store.ErrStorage, op, err)
}

// boltKeyCheck is the meta key of the key-check value.
var boltKeyCheck = []byte("key_check")

// KeyCheck implements store.Store.
func (s *Store) KeyCheck(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var v []byte
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v = boltdb.Copy(tx.Bucket(boltMeta).Get(boltKeyCheck))
		return nil
	})
	if err == nil && v == nil {
		return nil, store.ErrNotFound
	}
	return v, s.result("KeyCheck", err)
}

// InitKeyCheck implements store.Store.
func (s *Store) InitKeyCheck(ctx context.Context, value []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(value) == 0 {
		return nil, errors.New("secrets: bolt store: empty key-check value")
	}
	var held []byte
	err := s.batch(func(tx *bolt.Tx) error {
		meta := tx.Bucket(boltMeta)
		if v := meta.Get(boltKeyCheck); v != nil {
			held = boltdb.Copy(v)
			return nil
		}
		held = boltdb.Copy(value)
		return meta.Put(boltKeyCheck, held)
	})
	return held, s.result("InitKeyCheck", err)
}

// ReplaceKeyCheck implements store.Store.
func (s *Store) ReplaceKeyCheck(ctx context.Context, prev, next []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(prev) == 0 || len(next) == 0 {
		return errors.New("secrets: bolt store: empty key-check value")
	}
	value := boltdb.Copy(next)
	err := s.batch(func(tx *bolt.Tx) error {
		meta := tx.Bucket(boltMeta)
		switch v := meta.Get(boltKeyCheck); {
		case v == nil:
			return store.ErrNotFound
		case !bytes.Equal(v, prev):
			return store.ErrRevisionConflict
		}
		return meta.Put(boltKeyCheck, value)
	})
	return s.result("ReplaceKeyCheck", err)
}

// HasData implements store.Store.
func (s *Store) HasData(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	found := false
	err := s.view(ctx, func(tx *bolt.Tx) error {
		for _, name := range [][]byte{boltCredHistory, boltArchiveCurrent, boltSvcHistory} {
			if k, _ := tx.Bucket(name).Cursor().First(); k != nil {
				found = true
			}
		}
		return nil
	})
	return found, s.result("HasData", err)
}

// Probe implements Store: a read of the schema version, through the same containment as every call.
func (s *Store) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if waited := s.batcher.Stalled(); waited > 0 {
		return &store.WriteStalledError{For: waited, RetryAfter: s.stallTimeout}
	}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if tx.Bucket(boltMeta).Get([]byte(boltdb.SchemaVersionKey)) == nil {
			return errors.New("schema version missing")
		}
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrStorage) {
		err = fmt.Errorf("%w: bolt store probe: %v", store.ErrStorage, err)
	}
	return err
}

type kv struct {
	bucket     *bolt.Bucket
	key, value []byte
}

func putAll(puts ...kv) error {
	for _, p := range puts {
		if err := p.bucket.Put(p.key, p.value); err != nil {
			return err
		}
	}
	return nil
}

// checkKeyParts validates the id and name (for services: the id twice) of a record to write, including
// the bbolt key size limit for the longest key built from them.
func checkKeyParts(id, name string) error {
	if !codec.ValidKeyPart(id) {
		return errors.New("secrets: bolt store: id must be non-empty and must not contain 0x00")
	}
	if !codec.ValidKeyPart(name) {
		return errors.New("secrets: bolt store: name must be non-empty and must not contain 0x00")
	}
	if len(strings.ToLower(name))+2*len(id)+16 > bolt.MaxKeySize {
		return errors.New("secrets: bolt store: id and name too long")
	}
	return nil
}
