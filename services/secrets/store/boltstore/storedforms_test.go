package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/pkg/boltdb"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
	"github.com/gantry-dev/gantry/services/secrets/store/codec"
	"github.com/gantry-dev/gantry/services/secrets/store/storetest"
)

// boltRaw is storetest.Raw on the bbolt file itself.
type boltRaw struct{ s *Store }

func (r boltRaw) Records(t *testing.T) []storetest.StoredRecord {
	t.Helper()
	var out []storetest.StoredRecord
	err := r.s.db.View(func(tx *bolt.Tx) error {
		for _, area := range boltRecordBuckets {
			err := tx.Bucket(area.bucket).ForEach(func(k, v []byte) error {
				out = append(out, storetest.StoredRecord{Area: string(area.bucket), Key: boltdb.Copy(k), Kind: area.kind, Value: boltdb.Copy(v)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (r boltRaw) Replace(t *testing.T, rec storetest.StoredRecord, value []byte) {
	t.Helper()
	err := r.s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(rec.Area))
		if b.Get(rec.Key) == nil {
			t.Errorf("Replace: no record %q in %s", rec.Key, rec.Area)
		}
		return b.Put(rec.Key, value)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (r boltRaw) Upgrade(ctx context.Context) (codec.Upgraded, error) { return r.s.UpgradeRecords(ctx) }

// TestStoredForms runs the stored-format part of the conformance suite on the bbolt adapter: records
// in the JSON format of schema version 2 written straight into the file.
func TestStoredForms(t *testing.T) {
	storetest.RunStoredForms(t, func(t *testing.T) (store.Store, storetest.Raw) {
		s := newBoltTestStore(t)
		return s, boltRaw{s}
	})
}

// TestOlderBuildRefusesVersion3: what a build of schema version 2 does at its start (EnsureSchema
// with its own version) on a file this build opened: it refuses it as written by a newer gantry
// instead of meeting protobuf records it cannot read.
func TestOlderBuildRefusesVersion3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.db")
	s, err := Open(path, boltdb.Options{NoSync: true}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := boltdb.Open(path, boltdb.Options{NoSync: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := boltdb.EnsureSchema(db, boltMeta, 2); !errors.Is(err, boltdb.ErrNewerSchema) || !strings.Contains(err.Error(), "schema version 3") {
		t.Errorf("a version 2 build's check = %v, want boltdb.ErrNewerSchema naming version 3", err)
	}
}
