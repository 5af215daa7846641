package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/b64url"
	"github.com/gantry-dev/gantry/pkg/boltdb"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// bbolt layout, schema version 2 (version 1 lacked the grants bucket; OpenBoltStore upgrades it in
// place). In the key shapes below "|" is a 0x00 byte and rev is a revision as 4 big-endian bytes;
// lower() is strings.ToLower. Ids and names cannot contain 0x00, so every key splits unambiguously
// and sorts by its first part, then the next. Records are JSON (boltCred, boltService,
// boltGrantsRecord); index values are empty unless stated.
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

	boltArchiveCurrent = []byte("archive_current") // credential id → boltArchived of the last revision
	boltArchiveHistory = []byte("archive_history") // credential id|rev → boltArchived of that revision

	boltGrants = []byte("grants") // service id → boltGrantsRecord (schema version 2)
)

// boltBuckets is every bucket of the layout; OpenBoltStore creates the missing ones.
var boltBuckets = [][]byte{
	boltMeta,
	boltCredCurrent, boltCredHistory, boltCredByName, boltCredNameExact, boltCredHistoryName, boltCredServices,
	boltSvcCurrent, boltSvcHistory, boltSvcByID,
	boltArchiveCurrent, boltArchiveHistory,
	boltGrants,
}

// boltSchemaVersion is the layout version this code reads and writes. Version 2 added the grants
// bucket; it is refused by builds that read version 1, which would ignore the grants it holds (and
// so refuse services granted since).
const boltSchemaVersion = 2

// Page token kinds: a token is base64url (no padding) of one kind byte followed by the index key of
// the last item returned, so a token handed to a listing other than the one that issued it is
// rejected even where two indexes share a key shape.
const (
	tokenCredentials byte = 0xc1 + iota
	tokenCredentialRevisions
	tokenAllCredentialRevisions
	tokenServices
	tokenServiceRevisions
	tokenAllServiceRevisions
)

// BoltStore is the Store adapter for an embedded bbolt file (see pkg/boltdb). Every write is one
// transaction, run through a boltdb.Batcher (group commit without a fixed delay, its commit's panics
// contained): a lone writer commits at once, and writers arriving while a commit syncs share the
// next one. Reads are View transactions whose results are decoded into fresh memory.
//
// Empty collections: a returned record has nil — never empty non-nil — Metadata, Tags, Keys,
// SealedPairs, WrappedKey, Credentials and BlindCredentials when there is nothing in them (whatever was
// put), and listings and CredentialServices return a nil slice when there are no items.
//
// Besides the Store contract: ids, names and the credential ids of a service mapping must be non-empty
// and free of 0x00 bytes (writes with such values fail, reads find nothing); a credential id that was
// archived cannot be created again (ErrRevisionConflict); SetLastDecrypted returns ErrNotFound for a
// history revision that does not exist.
//
// A panic inside bbolt (which damaged pages can cause) is contained: the call returns ErrStorage,
// the store marks itself failed and refuses every later call with ErrStorage, and Probe fails, so
// health goes NOT_SERVING while the rest of the process (gateway, chat) keeps running. Only a restart,
// which checks the file again (CheckBoltFile), clears the state.
type BoltStore struct {
	db *bolt.DB
	// batcher groups concurrent writes into one commit and recovers a panic of bbolt's commit, which
	// runs on the batcher's writer loop, a goroutine nothing else could recover it on.
	batcher *boltdb.Batcher
	logger  *zap.Logger
	// failed is set once bbolt panicked: its in-memory state can no longer be trusted.
	failed atomic.Bool
}

var _ Store = (*BoltStore)(nil)

// OpenBoltStore opens (or creates) the store at path; see boltdb.Open for opts. It fails when the
// file holds another schema version. Failures of the storage itself (not the Store errors) are logged
// at error level on logger, used as given (the caller names it, e.g. "secrets.store"), without record
// contents; nil means no logging.
func OpenBoltStore(path string, opts boltdb.Options, logger *zap.Logger) (*BoltStore, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	db, err := boltdb.Open(path, opts, logger)
	if err != nil {
		return nil, err
	}
	if err := upgradeBoltSchema(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("secrets: bolt store %s: %w", path, err)
	}
	if err := boltdb.EnsureSchema(db, boltMeta, boltSchemaVersion); err != nil {
		_ = db.Close()
		return nil, err
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
		_ = db.Close()
		return nil, fmt.Errorf("secrets: bolt store %s: %w", path, err)
	}
	return &BoltStore{db: db, batcher: boltdb.NewBatcher(db), logger: logger}, nil
}

// upgradeBoltSchema brings a version 1 file to version 2. The change is additive (a new, empty
// bucket): create it, then write the new version. A crash between the two leaves a version 1 file
// with an empty grants bucket, which the next open upgrades the same way. A file of any other
// version is left to EnsureSchema.
func upgradeBoltSchema(db *bolt.DB) error {
	v, err := boltdb.ReadSchemaVersion(db, boltMeta)
	if err != nil || v != 1 {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltGrants)
		return err
	})
	if err != nil {
		return fmt.Errorf("upgrade to schema version 2: %w", err)
	}
	return boltdb.WriteSchemaVersion(db, boltMeta, 2)
}

// Close stops the batcher's writer loop (writes already queued are committed first) and closes the
// database file. A store that failed (a contained panic) leaves the file open: bbolt's locks may be
// held by the transaction that panicked, and the process is about to exit.
func (s *BoltStore) Close() error {
	s.batcher.Close()
	if s.failed.Load() {
		return fmt.Errorf("%w: not closing a bolt store that failed", ErrStorage)
	}
	return s.db.Close()
}

// errBoltFailed is returned by every call after bbolt panicked once.
var errBoltFailed = fmt.Errorf("%w: the bolt store stopped after an internal failure (damaged file?); restart gantry, which checks the file", ErrStorage)

// view runs a read transaction, containing a bbolt panic.
func (s *BoltStore) view(fn func(*bolt.Tx) error) (err error) {
	if s.failed.Load() {
		return errBoltFailed
	}
	defer s.contain(&err)
	// A damaged page id makes bbolt read past its mapping: a memory fault, fatal to the process
	// unless turned into a panic, which contain then stops.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return s.db.View(fn)
}

// batch runs a write transaction through the batcher (bbolt's Batch, with its commit contained),
// containing a bbolt panic. fn may run more than once (see PutCredential).
func (s *BoltStore) batch(fn func(*bolt.Tx) error) (err error) {
	if s.failed.Load() {
		return errBoltFailed
	}
	defer s.contain(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// A panic of fn inside a shared batch makes the batcher re-run fn alone, in this goroutine, where
	// it panics again and is contained; a panic of the shared commit comes back as a PanicError.
	err = s.batcher.Do(fn)
	var p *boltdb.PanicError
	if errors.As(err, &p) {
		s.fail(fmt.Sprintf("%v\ncommitting goroutine:\n%s", p.Value, p.Stack))
		return fmt.Errorf("%w: %v", ErrStorage, err)
	}
	return err
}

// contain turns a panic of bbolt into ErrStorage and marks the store failed.
func (s *BoltStore) contain(err *error) {
	if r := recover(); r != nil {
		s.fail(r)
		*err = fmt.Errorf("%w: bbolt panicked: %v", ErrStorage, r)
	}
}

func (s *BoltStore) fail(reason any) {
	if s.failed.CompareAndSwap(false, true) {
		s.logger.Error("THE BOLT STORE FAILED: bbolt panicked, the database file is probably damaged; every request now answers 503 until gantry restarts (run `gantry check`, restore from a backup if it fails)",
			zap.Any("panic", reason), zap.Stack("stack"))
	}
}

// GetCredential implements Store.
func (s *BoltStore) GetCredential(ctx context.Context, id string) (*CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *CredentialRecord
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltCredCurrent).Get([]byte(id))
		if raw == nil {
			return ErrNotFound
		}
		var err error
		rec, err = decodeCred(boltCredCurrent, raw)
		return err
	})
	return rec, s.result("GetCredential", err)
}

// GetCredentials implements Store, in one read transaction.
func (s *BoltStore) GetCredentials(ctx context.Context, ids []string) ([]*CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]*CredentialRecord, 0, len(ids))
	err := s.view(func(tx *bolt.Tx) error {
		current := tx.Bucket(boltCredCurrent)
		for _, id := range ids {
			raw := current.Get([]byte(id))
			if raw == nil {
				continue
			}
			rec, err := decodeCred(boltCredCurrent, raw)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, s.result("GetCredentials", err)
}

// GetCredentialRevision implements Store.
func (s *BoltStore) GetCredentialRevision(ctx context.Context, id string, revision int32) (*CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !validKeyPart(id) {
		return nil, ErrNotFound
	}
	var rec *CredentialRecord
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltCredHistory).Get(revKey(id, revision))
		if raw == nil {
			return ErrNotFound
		}
		var err error
		rec, err = decodeCred(boltCredHistory, raw)
		return err
	})
	return rec, s.result("GetCredentialRevision", err)
}

// ListCredentials implements Store.
func (s *BoltStore) ListCredentials(ctx context.Context, page Page) ([]*CredentialRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := decodePageToken(page, tokenCredentials, validNameKey)
	if err != nil {
		return nil, "", err
	}
	var out []*CredentialRecord
	var next []byte
	err = s.view(func(tx *bolt.Tx) error {
		current := tx.Bucket(boltCredCurrent)
		var err error
		next, err = scanPage(tx.Bucket(boltCredByName), nil, after, page.Limit, func(k, _ []byte) error {
			id := k[bytes.IndexByte(k, 0)+1:]
			raw := current.Get(id)
			if raw == nil {
				return fmt.Errorf("index %s points to a missing record", boltCredByName)
			}
			rec, err := decodeCred(boltCredCurrent, raw)
			out = append(out, rec)
			return err
		})
		return err
	})
	if err != nil {
		return nil, "", s.result("ListCredentials", err)
	}
	return out, encodePageToken(tokenCredentials, next), nil
}

// ListCredentialRevisions implements Store.
func (s *BoltStore) ListCredentialRevisions(ctx context.Context, id string, page Page) ([]*CredentialRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if !validKeyPart(id) {
		return nil, "", ErrNotFound
	}
	prefix := revPrefix(id)
	after, err := decodePageToken(page, tokenCredentialRevisions, func(k []byte) bool {
		return len(k) == len(prefix)+4 && bytes.HasPrefix(k, prefix)
	})
	if err != nil {
		return nil, "", err
	}
	var out []*CredentialRecord
	var next []byte
	err = s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(boltCredCurrent).Get([]byte(id)) == nil {
			return ErrNotFound
		}
		var err error
		next, err = scanPage(tx.Bucket(boltCredHistory), prefix, after, page.Limit, func(_, v []byte) error {
			rec, err := decodeCred(boltCredHistory, v)
			out = append(out, rec)
			return err
		})
		return err
	})
	if err != nil {
		return nil, "", s.result("ListCredentialRevisions", err)
	}
	return out, encodePageToken(tokenCredentialRevisions, next), nil
}

// ListAllCredentialRevisions implements Store.
func (s *BoltStore) ListAllCredentialRevisions(ctx context.Context, page Page) ([]*CredentialRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := decodePageToken(page, tokenAllCredentialRevisions, validRevNameKey)
	if err != nil {
		return nil, "", err
	}
	var out []*CredentialRecord
	var next []byte
	err = s.view(func(tx *bolt.Tx) error {
		history := tx.Bucket(boltCredHistory)
		var err error
		next, err = scanPage(tx.Bucket(boltCredHistoryName), nil, after, page.Limit, func(k, _ []byte) error {
			// lower(name)|id|rev → the history key id|rev is everything after the first separator.
			raw := history.Get(k[bytes.IndexByte(k, 0)+1:])
			if raw == nil {
				return fmt.Errorf("index %s points to a missing record", boltCredHistoryName)
			}
			rec, err := decodeCred(boltCredHistory, raw)
			out = append(out, rec)
			return err
		})
		return err
	})
	if err != nil {
		return nil, "", s.result("ListAllCredentialRevisions", err)
	}
	return out, encodePageToken(tokenAllCredentialRevisions, next), nil
}

// PutCredential implements Store.
func (s *BoltStore) PutCredential(ctx context.Context, rec *CredentialRecord, prevRevision int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: bolt store: PutCredential: nil record")
	}
	if err := checkKeyParts(rec.ID, rec.Name); err != nil {
		return err
	}
	data, err := json.Marshal(boltCred(*rec))
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutCredential: encode: %w", err)
	}
	id := []byte(rec.ID)
	name := []byte(rec.Name)
	histKey := revKey(rec.ID, rec.Revision)

	// Batch may run this more than once (in a batch that is then rolled back, then alone): it reads,
	// checks and writes every time and touches nothing outside the transaction.
	err = s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		byName, exact := tx.Bucket(boltCredByName), tx.Bucket(boltCredNameExact)

		var old *CredentialRecord
		if raw := current.Get(id); raw != nil {
			var err error
			if old, err = decodeCred(boltCredCurrent, raw); err != nil {
				return err
			}
		} else if tx.Bucket(boltArchiveCurrent).Get(id) != nil {
			return ErrRevisionConflict // archived ids stay archived
		}
		if err := checkRevision(credRevision(old), prevRevision, rec.Revision); err != nil {
			return err
		}
		if history.Get(histKey) != nil {
			return ErrRevisionConflict
		}
		if holder := exact.Get(name); holder != nil && !bytes.Equal(holder, id) {
			return &NameTakenError{ID: string(holder)}
		}

		if old != nil {
			if err := byName.Delete(nameKey(old.Name, rec.ID)); err != nil {
				return err
			}
			if holder := exact.Get([]byte(old.Name)); bytes.Equal(holder, id) {
				if err := exact.Delete([]byte(old.Name)); err != nil {
					return err
				}
			}
		}
		return putAll(
			kv{history, histKey, data},
			kv{current, id, data},
			kv{byName, nameKey(rec.Name, rec.ID), []byte{}},
			kv{exact, name, id},
			kv{tx.Bucket(boltCredHistoryName), revNameKey(rec.Name, rec.ID, rec.Revision), []byte{}},
		)
	})
	return s.result("PutCredential", err)
}

// SetLastDecrypted implements Store.
func (s *BoltStore) SetLastDecrypted(ctx context.Context, id string, revision int32, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !validKeyPart(id) {
		return ErrNotFound
	}
	histKey := revKey(id, revision)
	err := s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		rawCur, rawHist := current.Get([]byte(id)), history.Get(histKey)
		if rawCur == nil || rawHist == nil {
			return ErrNotFound
		}
		cur, err := decodeCred(boltCredCurrent, rawCur)
		if err != nil {
			return err
		}
		hist, err := decodeCred(boltCredHistory, rawHist)
		if err != nil {
			return err
		}
		stamp := at
		hist.LastDecryptedDate = &stamp
		data, err := json.Marshal(boltCred(*hist))
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
		if data, err = json.Marshal(boltCred(*cur)); err != nil {
			return err
		}
		return current.Put([]byte(id), data)
	})
	return s.result("SetLastDecrypted", err)
}

// CredentialServices implements Store.
func (s *BoltStore) CredentialServices(ctx context.Context, id string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !validKeyPart(id) {
		return nil, nil
	}
	prefix := revPrefix(id)
	var out []string
	err := s.view(func(tx *bolt.Tx) error {
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

// ArchiveCredential implements Store.
func (s *BoltStore) ArchiveCredential(ctx context.Context, id string, prevRevision int32, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !validKeyPart(id) {
		return ErrNotFound
	}
	key := []byte(id)
	prefix := revPrefix(id)
	err := s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltCredCurrent), tx.Bucket(boltCredHistory)
		exact, historyName := tx.Bucket(boltCredNameExact), tx.Bucket(boltCredHistoryName)
		rawCur := current.Get(key)
		if rawCur == nil {
			return ErrNotFound
		}
		cur, err := decodeCred(boltCredCurrent, rawCur)
		if err != nil {
			return err
		}
		if cur.Revision != prevRevision {
			return ErrRevisionConflict
		}
		if k, _ := tx.Bucket(boltCredServices).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
			return ErrStillMapped
		}

		data, err := encodeArchived(at, rawCur)
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
			rec, err := decodeCred(boltCredHistory, v)
			if err != nil {
				return err
			}
			data, err := encodeArchived(at, v)
			if err != nil {
				return err
			}
			k = boltdb.Copy(k)
			if err := archive.Put(k, data); err != nil {
				return err
			}
			histKeys = append(histKeys, k)
			nameKeys = append(nameKeys, revNameKey(rec.Name, id, rec.Revision))
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
		if err := tx.Bucket(boltCredByName).Delete(nameKey(cur.Name, id)); err != nil {
			return err
		}
		if holder := exact.Get([]byte(cur.Name)); bytes.Equal(holder, key) {
			return exact.Delete([]byte(cur.Name))
		}
		return nil
	})
	return s.result("ArchiveCredential", err)
}

// GetArchivedCredential implements Store.
func (s *BoltStore) GetArchivedCredential(ctx context.Context, id string) (*CredentialRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *CredentialRecord
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltArchiveCurrent).Get([]byte(id))
		if raw == nil {
			return ErrNotFound
		}
		var a boltArchived
		if err := json.Unmarshal(raw, &a); err != nil {
			return fmt.Errorf("corrupt record in %s: %w", boltArchiveCurrent, err)
		}
		var err error
		rec, err = decodeCred(boltArchiveCurrent, a.Record)
		return err
	})
	return rec, s.result("GetArchivedCredential", err)
}

// GetService implements Store.
func (s *BoltStore) GetService(ctx context.Context, id string) (*ServiceRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec *ServiceRecord
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltSvcCurrent).Get([]byte(id))
		if raw == nil {
			return ErrNotFound
		}
		var err error
		rec, err = decodeService(boltSvcCurrent, raw)
		return err
	})
	return rec, s.result("GetService", err)
}

// GetServiceRevision implements Store.
func (s *BoltStore) GetServiceRevision(ctx context.Context, id string, revision int32) (*ServiceRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !validKeyPart(id) {
		return nil, ErrNotFound
	}
	var rec *ServiceRecord
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltSvcHistory).Get(revKey(id, revision))
		if raw == nil {
			return ErrNotFound
		}
		var err error
		rec, err = decodeService(boltSvcHistory, raw)
		return err
	})
	return rec, s.result("GetServiceRevision", err)
}

// ListServices implements Store.
func (s *BoltStore) ListServices(ctx context.Context, page Page) ([]*ServiceRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := decodePageToken(page, tokenServices, validNameKey)
	if err != nil {
		return nil, "", err
	}
	var out []*ServiceRecord
	var next []byte
	err = s.view(func(tx *bolt.Tx) error {
		current := tx.Bucket(boltSvcCurrent)
		var err error
		next, err = scanPage(tx.Bucket(boltSvcByID), nil, after, page.Limit, func(k, _ []byte) error {
			raw := current.Get(k[bytes.IndexByte(k, 0)+1:])
			if raw == nil {
				return fmt.Errorf("index %s points to a missing record", boltSvcByID)
			}
			rec, err := decodeService(boltSvcCurrent, raw)
			out = append(out, rec)
			return err
		})
		return err
	})
	if err != nil {
		return nil, "", s.result("ListServices", err)
	}
	return out, encodePageToken(tokenServices, next), nil
}

// ListServiceRevisions implements Store.
func (s *BoltStore) ListServiceRevisions(ctx context.Context, id string, page Page) ([]*ServiceRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if !validKeyPart(id) {
		return nil, "", ErrNotFound
	}
	prefix := revPrefix(id)
	after, err := decodePageToken(page, tokenServiceRevisions, func(k []byte) bool {
		return len(k) == len(prefix)+4 && bytes.HasPrefix(k, prefix)
	})
	if err != nil {
		return nil, "", err
	}
	var out []*ServiceRecord
	var next []byte
	err = s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(boltSvcCurrent).Get([]byte(id)) == nil {
			return ErrNotFound
		}
		var err error
		next, err = scanPage(tx.Bucket(boltSvcHistory), prefix, after, page.Limit, func(_, v []byte) error {
			rec, err := decodeService(boltSvcHistory, v)
			out = append(out, rec)
			return err
		})
		return err
	})
	if err != nil {
		return nil, "", s.result("ListServiceRevisions", err)
	}
	return out, encodePageToken(tokenServiceRevisions, next), nil
}

// ListAllServiceRevisions implements Store. There is no separate index: it walks svc_by_id and, for
// each service, its history, so a position is lower(id)|id|rev (the shape of cred_history_by_name).
func (s *BoltStore) ListAllServiceRevisions(ctx context.Context, page Page) ([]*ServiceRecord, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	after, err := decodePageToken(page, tokenAllServiceRevisions, validRevNameKey)
	if err != nil {
		return nil, "", err
	}
	var afterIndex, afterHistory []byte // svc_by_id key and svc_history key of the position
	if after != nil {
		afterIndex = after[:len(after)-5]
		afterHistory = after[bytes.IndexByte(after, 0)+1:]
	}
	var out []*ServiceRecord
	var next []byte
	err = s.view(func(tx *bolt.Tx) error {
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
				rec, err := decodeService(boltSvcHistory, hv)
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
	return out, encodePageToken(tokenAllServiceRevisions, next), nil
}

// PutService implements Store.
func (s *BoltStore) PutService(ctx context.Context, rec *ServiceRecord, prevRevision int32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rec == nil {
		return errors.New("secrets: bolt store: PutService: nil record")
	}
	if err := checkKeyParts(rec.ID, rec.ID); err != nil {
		return err
	}
	data, err := json.Marshal(boltService(*rec))
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutService: encode: %w", err)
	}
	id := []byte(rec.ID)
	histKey := revKey(rec.ID, rec.Revision)

	// See PutCredential: this may run more than once.
	err = s.batch(func(tx *bolt.Tx) error {
		current, history := tx.Bucket(boltSvcCurrent), tx.Bucket(boltSvcHistory)
		links, credentials := tx.Bucket(boltCredServices), tx.Bucket(boltCredCurrent)

		var old *ServiceRecord
		if raw := current.Get(id); raw != nil {
			var err error
			if old, err = decodeService(boltSvcCurrent, raw); err != nil {
				return err
			}
		}
		if err := checkRevision(serviceRevision(old), prevRevision, rec.Revision); err != nil {
			return err
		}
		if history.Get(histKey) != nil {
			return ErrRevisionConflict
		}
		var missing []string
		for _, cred := range rec.Credentials {
			if !validKeyPart(cred) || credentials.Get([]byte(cred)) == nil {
				missing = append(missing, cred)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return &UnknownCredentialsError{IDs: slices.Compact(missing)}
		}

		if old != nil {
			for _, cred := range old.Credentials {
				if err := links.Delete(linkKey(cred, rec.ID)); err != nil {
					return err
				}
			}
		}
		for _, cred := range rec.Credentials {
			if err := links.Put(linkKey(cred, rec.ID), []byte{}); err != nil {
				return err
			}
		}
		return putAll(
			kv{history, histKey, data},
			kv{current, id, data},
			kv{tx.Bucket(boltSvcByID), nameKey(rec.ID, rec.ID), []byte{}},
		)
	})
	return s.result("PutService", err)
}

// Grants implements Store.
func (s *BoltStore) Grants(ctx context.Context, serviceID string) (GrantsRecord, error) {
	if err := ctx.Err(); err != nil {
		return GrantsRecord{}, err
	}
	if !validKeyPart(serviceID) {
		return GrantsRecord{}, ErrNotFound
	}
	var rec GrantsRecord
	err := s.view(func(tx *bolt.Tx) error {
		raw := tx.Bucket(boltGrants).Get([]byte(serviceID))
		if raw == nil {
			return ErrNotFound
		}
		var err error
		rec, err = decodeGrants(boltGrants, raw)
		return err
	})
	return rec, s.result("Grants", err)
}

// PutGrants implements Store.
func (s *BoltStore) PutGrants(ctx context.Context, serviceID string, rec GrantsRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkKeyParts(serviceID, serviceID); err != nil {
		return err
	}
	data, err := json.Marshal(boltGrantsRecord(rec))
	if err != nil {
		return fmt.Errorf("secrets: bolt store: PutGrants: encode: %w", err)
	}
	err = s.batch(func(tx *bolt.Tx) error {
		return tx.Bucket(boltGrants).Put([]byte(serviceID), data)
	})
	return s.result("PutGrants", err)
}

// result passes nil and the Store's own errors through; anything else is a failure of the storage
// (I/O, a closed database, corrupt data): it is logged — the operation and error, never record
// contents — and returned wrapped.
func (s *BoltStore) result(op string, err error) error {
	var nameTaken *NameTakenError
	var unknown *UnknownCredentialsError
	switch {
	case err == nil,
		errors.Is(err, ErrNotFound), errors.Is(err, ErrRevisionConflict), errors.Is(err, ErrBadPageToken),
		errors.Is(err, ErrStillMapped), errors.As(err, &nameTaken), errors.As(err, &unknown),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, ErrStorage):
		s.logger.Error("bolt store failure", zap.String("op", op), zap.Error(err))
		return err
	}
	s.logger.Error("bolt store failure", zap.String("op", op), zap.Error(err))
	return fmt.Errorf("%w: bolt store: %s: %v", ErrStorage, op, err)
}

// boltKeyCheck is the meta key of the key-check value.
var boltKeyCheck = []byte("key_check")

// KeyCheck implements Store.
func (s *BoltStore) KeyCheck(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var v []byte
	err := s.view(func(tx *bolt.Tx) error {
		v = boltdb.Copy(tx.Bucket(boltMeta).Get(boltKeyCheck))
		return nil
	})
	if err == nil && v == nil {
		return nil, ErrNotFound
	}
	return v, s.result("KeyCheck", err)
}

// InitKeyCheck implements Store.
func (s *BoltStore) InitKeyCheck(ctx context.Context, value []byte) ([]byte, error) {
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

// HasData implements Store.
func (s *BoltStore) HasData(ctx context.Context) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	found := false
	err := s.view(func(tx *bolt.Tx) error {
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
func (s *BoltStore) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(boltMeta).Get([]byte(boltdb.SchemaVersionKey)) == nil {
			return errors.New("schema version missing")
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrStorage) {
		err = fmt.Errorf("%w: bolt store probe: %v", ErrStorage, err)
	}
	return err
}

// checkRevision is the compare-and-set rule: the stored revision (0: none) must be prevRevision and
// the new one its successor.
func checkRevision(stored, prevRevision, revision int32) error {
	if prevRevision < 0 || stored != prevRevision || int64(revision) != int64(prevRevision)+1 {
		return ErrRevisionConflict
	}
	return nil
}

// credRevision is the revision of a stored record, 0 for none.
func credRevision(r *CredentialRecord) int32 {
	if r == nil {
		return 0
	}
	return r.Revision
}

func serviceRevision(r *ServiceRecord) int32 {
	if r == nil {
		return 0
	}
	return r.Revision
}

// boltCred is the JSON form of a CredentialRecord. It has exactly the fields of CredentialRecord, so
// the two convert into each other (and adding a field to one without the other does not compile).
// omitempty turns empty collections into absent ones: they decode as nil.
type boltCred struct {
	ID                string            `json:"id"`
	Revision          int32             `json:"revision"`
	Name              string            `json:"name"`
	Enabled           bool              `json:"enabled"`
	Documentation     *string           `json:"documentation,omitempty"`
	Metadata          map[string]string `json:"metadata,omitempty"`
	Tags              []string          `json:"tags,omitempty"`
	Keys              []string          `json:"keys,omitempty"`
	SealedPairs       []byte            `json:"sealed_pairs,omitempty"`
	WrappedKey        []byte            `json:"wrapped_key,omitempty"`
	ModifiedDate      time.Time         `json:"modified_date"`
	ModifiedBy        string            `json:"modified_by"`
	LastRotationDate  *time.Time        `json:"last_rotation_date,omitempty"`
	LastDecryptedDate *time.Time        `json:"last_decrypted_date,omitempty"`
}

// boltService is the JSON form of a ServiceRecord (see boltCred).
type boltService struct {
	ID               string    `json:"id"`
	Revision         int32     `json:"revision"`
	Enabled          bool      `json:"enabled"`
	Account          *string   `json:"account,omitempty"`
	Credentials      []string  `json:"credentials,omitempty"`
	BlindCredentials []string  `json:"blind_credentials,omitempty"`
	ModifiedDate     time.Time `json:"modified_date"`
	ModifiedBy       string    `json:"modified_by"`
}

// boltGrantsRecord is the JSON form of a GrantsRecord, the shape of an entry of the grants.json file
// that earlier versions kept.
type boltGrantsRecord struct {
	Encrypt bool      `json:"encrypt"`
	Decrypt bool      `json:"decrypt"`
	Created time.Time `json:"created"`
}

func decodeGrants(bucket, raw []byte) (GrantsRecord, error) {
	var g boltGrantsRecord
	if err := json.Unmarshal(raw, &g); err != nil {
		return GrantsRecord{}, fmt.Errorf("corrupt record in %s: %w", bucket, err)
	}
	return GrantsRecord(g), nil
}

// boltArchived wraps an archived credential record (its boltCred JSON, unchanged).
type boltArchived struct {
	ArchivedAt time.Time       `json:"archived_at"`
	Record     json.RawMessage `json:"record"`
}

// decodeCred decodes a record into fresh memory, so the result outlives the transaction.
func decodeCred(bucket, raw []byte) (*CredentialRecord, error) {
	var c boltCred
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("corrupt record in %s: %w", bucket, err)
	}
	rec := CredentialRecord(c)
	return &rec, nil
}

func decodeService(bucket, raw []byte) (*ServiceRecord, error) {
	var c boltService
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("corrupt record in %s: %w", bucket, err)
	}
	rec := ServiceRecord(c)
	return &rec, nil
}

func encodeArchived(at time.Time, record []byte) ([]byte, error) {
	return json.Marshal(boltArchived{ArchivedAt: at, Record: record})
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

// Key building. revKey is also the prefix-plus-suffix shape of cred_services (credential id|service id).

func revPrefix(id string) []byte {
	return append([]byte(id), 0)
}

func revKey(id string, revision int32) []byte {
	return binary.BigEndian.AppendUint32(revPrefix(id), uint32(revision))
}

func nameKey(name, id string) []byte {
	k := append([]byte(strings.ToLower(name)), 0)
	return append(k, id...)
}

func revNameKey(name, id string, revision int32) []byte {
	return binary.BigEndian.AppendUint32(append(nameKey(name, id), 0), uint32(revision))
}

func linkKey(credentialID, serviceID string) []byte {
	return append(revPrefix(credentialID), serviceID...)
}

// validKeyPart reports whether s can be part of a key: non-empty, without the 0x00 separator.
func validKeyPart(s string) bool {
	return s != "" && strings.IndexByte(s, 0) < 0
}

// checkKeyParts validates the id and name (for services: the id twice) of a record to write, including
// the bbolt key size limit for the longest key built from them.
func checkKeyParts(id, name string) error {
	if !validKeyPart(id) {
		return errors.New("secrets: bolt store: id must be non-empty and must not contain 0x00")
	}
	if !validKeyPart(name) {
		return errors.New("secrets: bolt store: name must be non-empty and must not contain 0x00")
	}
	if len(strings.ToLower(name))+2*len(id)+16 > bolt.MaxKeySize {
		return errors.New("secrets: bolt store: id and name too long")
	}
	return nil
}

// validNameKey reports whether k has the shape a|b with a and b non-empty and without 0x00.
func validNameKey(k []byte) bool {
	i := bytes.IndexByte(k, 0)
	return i > 0 && i < len(k)-1 && bytes.IndexByte(k[i+1:], 0) < 0
}

// validRevNameKey reports whether k has the shape a|b|rev (validNameKey plus a revision).
func validRevNameKey(k []byte) bool {
	n := len(k)
	return n >= 8 && k[n-5] == 0 && validNameKey(k[:n-5])
}

// scanPage visits the keys of b that start with prefix, from the first one after `after` (nil: from
// the start), until it has visited limit keys (0: no limit). It returns the last visited key when at
// least one more key follows, else nil. It never looks at more than limit+1 keys.
func scanPage(b *bolt.Bucket, prefix, after []byte, limit int, visit func(k, v []byte) error) ([]byte, error) {
	c := b.Cursor()
	var k, v []byte
	switch {
	case after != nil:
		if k, v = c.Seek(after); bytes.Equal(k, after) {
			k, v = c.Next()
		}
	case len(prefix) > 0:
		k, v = c.Seek(prefix)
	default:
		k, v = c.First()
	}
	var last []byte
	for n := 0; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if limit > 0 && n == limit {
			return boltdb.Copy(last), nil
		}
		if err := visit(k, v); err != nil {
			return nil, err
		}
		last = k
		n++
	}
	return nil, nil
}

func encodePageToken(kind byte, key []byte) string {
	if key == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(append([]byte{kind}, key...))
}

// decodePageToken returns the index key a page token stands for, nil for the first page, or
// ErrBadPageToken for a token of another kind or whose key fails valid. It also rejects a negative
// limit.
func decodePageToken(page Page, kind byte, valid func([]byte) bool) ([]byte, error) {
	if page.Limit < 0 {
		return nil, fmt.Errorf("secrets: bolt store: negative page limit %d", page.Limit)
	}
	if page.Token == "" {
		return nil, nil
	}
	raw, err := b64url.Decode(page.Token)
	if err != nil || len(raw) < 2 || raw[0] != kind || !valid(raw[1:]) {
		return nil, ErrBadPageToken
	}
	return raw[1:], nil
}
