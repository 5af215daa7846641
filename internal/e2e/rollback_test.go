package e2e

import (
	"encoding/binary"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gantry-dev/gantry/services/secrets/store/codec"
)

// TestCredentialRollbackInDatabaseIsRefused plays a database-level attacker who rolls a secret back:
// with the stack stopped, the sealed pairs and wrapped key of revision 1 are copied over the current
// record (revision 2) in the bbolt file. After a restart the read must fail as undecryptable (503),
// never serve revision 1's value.
func TestCredentialRollbackInDatabaseIsRefused(t *testing.T) {
	s := startStack(t, nil)
	id := s.createCredential("rolled-back", map[string]any{"password": "revision-1-value"})
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "revision-2-value"}}).must(t, 200)
	s.stop()

	// The bbolt layout of services/secrets/store/boltstore: cred_current holds id → record and
	// cred_history id|0x00|revision (4 bytes big-endian) → record, both in codec's stored form.
	db, err := bolt.Open(filepath.Join(s.cfg.DataDir, "secrets.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		historyKey := append([]byte(id+"\x00"), binary.BigEndian.AppendUint32(nil, 1)...)
		old, err := codec.DecodeCred([]byte("cred_history"), tx.Bucket([]byte("cred_history")).Get(historyKey))
		if err != nil {
			return err
		}
		current := tx.Bucket([]byte("cred_current"))
		cur, err := codec.DecodeCred([]byte("cred_current"), current.Get([]byte(id)))
		if err != nil {
			return err
		}
		if cur.Revision != 2 || old.Revision != 1 {
			t.Fatalf("current revision %v, history revision %v; want 2 and 1", cur.Revision, old.Revision)
		}
		cur.SealedPairs, cur.WrappedKey = old.SealedPairs, old.WrappedKey
		raw, err := codec.EncodeCred(cur)
		if err != nil {
			return err
		}
		return current.Put([]byte(id), raw)
	})
	if closeErr := db.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		t.Fatal(err)
	}

	s = s.restart()
	r := s.get("/v1/credentials/" + id)
	if strings.Contains(string(r.body), "revision-1-value") {
		t.Fatalf("the rolled-back ciphertext was served: %d %s", r.code, r.body)
	}
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "cannot be decrypted") {
		t.Fatalf("read after rollback: %d %s, want 503 naming a credential that cannot be decrypted", r.code, r.body)
	}
	// Metadata stays readable: only the values are refused.
	s.get("/v1/credentials/"+id+"?metadata_only=true").must(t, 200)
}
