package e2e

import (
	"encoding/binary"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
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
	// cred_history id|0x00|revision (4 bytes big-endian) → record, both JSON.
	db, err := bolt.Open(filepath.Join(s.cfg.DataDir, "secrets.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		historyKey := append([]byte(id+"\x00"), binary.BigEndian.AppendUint32(nil, 1)...)
		var old, cur map[string]any
		if err := json.Unmarshal(tx.Bucket([]byte("cred_history")).Get(historyKey), &old); err != nil {
			return err
		}
		current := tx.Bucket([]byte("cred_current"))
		if err := json.Unmarshal(current.Get([]byte(id)), &cur); err != nil {
			return err
		}
		if cur["revision"] != 2.0 || old["revision"] != 1.0 {
			t.Fatalf("current revision %v, history revision %v; want 2 and 1", cur["revision"], old["revision"])
		}
		cur["sealed_pairs"], cur["wrapped_key"] = old["sealed_pairs"], old["wrapped_key"]
		raw, err := json.Marshal(cur)
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
