package confidanttest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
)

// The tables of the captured run (services/secrets/confidant/testdata/README.md).
const (
	CapturedTable        = "confidant-production"
	CapturedArchiveTable = "confidant-production-archive"
)

// Captured is what the real Confidant's run left (testdata/expected.json): what its own models read
// back, to compare gantry's copy with.
type Captured struct {
	Credentials map[string]CapturedCredential `json:"credentials"`
	Services    map[string]CapturedService    `json:"services"`
	// BlindCredentials are the blind credentials' ids.
	BlindCredentials []string `json:"blind_credentials"`
	// MasterKey is the alias Confidant named (KMS_MASTER_KEY).
	MasterKey string `json:"-"`
}

// CapturedCredential is a credential as Confidant read it back.
type CapturedCredential struct {
	Name     string `json:"name"`
	Revision int    `json:"revision"`
	// Archived credentials were moved to the archive table; ArchiveDate is the current record's.
	Archived    bool                        `json:"archived"`
	ArchiveDate string                      `json:"archive_date"`
	Revisions   map[string]CapturedRevision `json:"revisions"`
}

// CapturedRevision is one revision; Pairs are as Credential.decrypted_credential_pairs returned
// them (a JSON number stays a number).
type CapturedRevision struct {
	Name       string         `json:"name"`
	Enabled    bool           `json:"enabled"`
	ModifiedBy string         `json:"modified_by"`
	Pairs      map[string]any `json:"pairs"`
	// The other fields as the model read them (dates in Python's isoformat, RFC 3339).
	ModifiedDate     time.Time         `json:"modified_date"`
	Metadata         map[string]string `json:"metadata"`
	Tags             []string          `json:"tags"`
	Documentation    *string           `json:"documentation"`
	LastRotationDate *time.Time        `json:"last_rotation_date"`
}

// CapturedService is a service's current revision.
type CapturedService struct {
	Revision         int      `json:"revision"`
	Enabled          bool     `json:"enabled"`
	Account          *string  `json:"account"`
	Credentials      []string `json:"credentials"`
	BlindCredentials []string `json:"blind_credentials"`
}

// TestdataDir is services/secrets/confidant/testdata, found from this file, so a test in any package
// reads the captured items.
func TestdataDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// LoadCaptured creates Confidant's two tables in dynamo and replays into them every write the real
// Confidant sent (testdata/writes.json: PutItem, and BatchWriteItem's puts and deletes), and gives
// the KMS fake the key that wrapped the data keys (testdata/kms.json).
func LoadCaptured(dynamo *dynamotest.Server, kmsFake *kmstest.Server) (*Captured, error) {
	dir := TestdataDir()
	var writes []struct {
		Operation string
		Request   struct {
			TableName    string
			Item         dynamotest.Item
			RequestItems map[string][]struct {
				PutRequest    *struct{ Item dynamotest.Item }
				DeleteRequest *struct{ Key dynamotest.Item }
			}
		}
	}
	var key struct {
		KeyID       string `json:"key_id"`
		KeyMaterial string `json:"key_material"`
		Alias       string `json:"alias"`
	}
	var out Captured
	for name, v := range map[string]any{"writes.json": &writes, "kms.json": &key, "expected.json": &out} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	material, err := base64.StdEncoding.DecodeString(key.KeyMaterial)
	if err != nil {
		return nil, fmt.Errorf("kms.json: %w", err)
	}
	kmsFake.CreateKeyWithMaterial(key.Alias, key.KeyID, material)
	out.MasterKey = key.Alias
	indexes := map[string]dynamotest.Index{Index: {Hash: "data_type", Range: "modified_date"}}
	dynamo.CreateTable(CapturedTable, "id", indexes)
	dynamo.CreateTable(CapturedArchiveTable, "id", indexes)
	for _, w := range writes {
		switch w.Operation {
		case "PutItem":
			dynamo.Put(w.Request.TableName, w.Request.Item)
		case "BatchWriteItem":
			for table, reqs := range w.Request.RequestItems {
				for _, r := range reqs {
					switch {
					case r.PutRequest != nil:
						dynamo.Put(table, r.PutRequest.Item)
					case r.DeleteRequest != nil:
						id, _ := r.DeleteRequest.Key["id"]["S"].(string)
						dynamo.Delete(table, id)
					}
				}
			}
		default:
			return nil, fmt.Errorf("writes.json: operation %s", w.Operation)
		}
	}
	return &out, nil
}
