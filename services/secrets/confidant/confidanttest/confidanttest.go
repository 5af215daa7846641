// Package confidanttest writes a Confidant table the way Confidant 7 does, into the DynamoDB fake
// (pkg/dynamotest): the same items, attribute types, encodings and ids as its PynamoDB models and
// routes (confidant/routes/credentials.py, services.py, blind_credentials.py) leave, with each
// revision's pairs encrypted by real Fernet under a data key that a KMS wrapped with the encryption
// context {"id": <credential id>}. TestGeneratorWritesWhatConfidantWrites holds it to the items the
// real Confidant wrote (../testdata, which LoadCaptured replays). The importer's tests, its
// end-to-end test and its benchmark read what it writes.
package confidanttest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/fernet"
	"github.com/gantry-dev/gantry/pkg/kms"
)

// Index is Confidant's global secondary index (PynamoDB names it after the model attribute).
const Index = "data_type_date_index"

// pynamoDate is PynamoDB's UTCDateTimeAttribute format, '%Y-%m-%dT%H:%M:%S.%f%z'.
const pynamoDate = "2006-01-02T15:04:05.000000-0700"

// Credential is one revision of a credential as a test wrote it.
type Credential struct {
	ID       string
	Revision int
	Name     string
	Pairs    map[string]string
	// TypedPairs are values of the other JSON types Confidant accepts (numbers, booleans, null), each
	// as the JSON text Python's json.dumps writes ("5432", "1.5", "true", "null"); they join Pairs.
	TypedPairs    map[string]string
	Metadata      map[string]string
	Tags          []string
	Enabled       bool
	Documentation *string
	ModifiedBy    string
	// ModifiedDate is the revision's archive item's; CurrentModifiedDate the current item's while
	// this revision was current: Confidant builds the current item after saving the archive one, so
	// its date is a little later, and it is the date clients read.
	ModifiedDate        time.Time
	CurrentModifiedDate time.Time
	// LastRotationDate, when nil, is set as Confidant sets it: at creation, and by an update that
	// changes the pairs.
	LastRotationDate *time.Time
}

// Service is one revision of a service.
type Service struct {
	ID                  string
	Revision            int
	Enabled             bool
	Account             *string
	Credentials         []string
	BlindCredentials    []string
	ModifiedBy          string
	ModifiedDate        time.Time
	CurrentModifiedDate time.Time
}

// Table writes Confidant items into a table of the fake.
type Table struct {
	Srv  *dynamotest.Server
	Name string
	// KMS wraps the data keys under MasterKey, as Confidant's keymanager.create_datakey does.
	KMS       kms.Provider
	MasterKey string
	// Now stamps modified_date; it moves one second per write, so dates differ and order.
	Now time.Time

	Credentials map[string][]Credential // every revision, by id
	Services    map[string][]Service
	// ArchiveTable is Confidant's DYNAMODB_TABLE_ARCHIVE once ArchiveCredentials made it; Archived
	// the archive_date of each credential moved there (its current item's).
	ArchiveTable string
	Archived     map[string]time.Time
}

// NewTable creates Confidant's table in srv (hash key id, the data_type_date_index GSI).
func NewTable(srv *dynamotest.Server, name string, provider kms.Provider, masterKey string) *Table {
	srv.CreateTable(name, "id", map[string]dynamotest.Index{Index: {Hash: "data_type", Range: "modified_date"}})
	return &Table{Srv: srv, Name: name, KMS: provider, MasterKey: masterKey,
		Now:         time.Date(2024, 3, 1, 12, 0, 0, 123456000, time.UTC),
		Credentials: map[string][]Credential{}, Services: map[string][]Service{}}
}

func (t *Table) tick() time.Time {
	t.Now = t.Now.Add(time.Second)
	return t.Now
}

// currentLag is how much later than its archive twin Confidant dates a current item (it builds it
// after saving the archive item; the captured run shows a few milliseconds).
const currentLag = 2345 * time.Microsecond

// pythonJSON is json.dumps(v) with Python's defaults, as Confidant serialises metadata and pairs:
// ", " and ": " separators, non-ASCII as \uXXXX (keys sorted here; Python keeps insertion order).
// typed are values written as their JSON text (numbers, booleans, null); a key in both is typed's.
func pythonJSON(m map[string]string, typed ...map[string]string) string {
	texts := map[string]string{}
	for k, v := range m {
		texts[k] = pyString(v)
	}
	for _, t := range typed {
		maps.Copy(texts, t)
	}
	var b strings.Builder
	b.WriteString("{")
	for i, k := range slices.Sorted(maps.Keys(texts)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyString(k))
		b.WriteString(": ")
		b.WriteString(texts[k])
	}
	b.WriteString("}")
	return b.String()
}

func pyString(s string) string {
	data, _ := json.Marshal(s) // escapes ", \, controls; Go also escapes <, >, & as \u003c: Python does not
	out := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(data))
	var b strings.Builder
	for _, r := range out {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// NewID is a credential id as Confidant makes one: uuid4 hex without dashes.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// CreateCredential writes revision 1 of a new credential (archive item "<id>-1" and the current item)
// and returns its id.
func (t *Table) CreateCredential(ctx context.Context, c Credential) (string, error) {
	if c.ID == "" {
		c.ID = NewID()
	}
	c.Revision = 1
	return c.ID, t.writeCredential(ctx, c, c.LastRotationDate == nil)
}

// UpdateCredential writes the next revision of a credential: mutate changes a copy of the last one.
// Like Confidant's update route it makes a new data key for the new revision.
func (t *Table) UpdateCredential(ctx context.Context, id string, mutate func(*Credential)) error {
	revs := t.Credentials[id]
	prev := revs[len(revs)-1]
	c := prev
	c.Pairs, c.TypedPairs, c.Metadata, c.Tags = maps.Clone(c.Pairs), maps.Clone(c.TypedPairs), maps.Clone(c.Metadata), slices.Clone(c.Tags)
	mutate(&c)
	c.Revision++
	// update_credential: new pairs are a rotation, unless the caller set the date itself.
	rotated := (!maps.Equal(c.Pairs, prev.Pairs) || !maps.Equal(c.TypedPairs, prev.TypedPairs)) && c.LastRotationDate == prev.LastRotationDate
	return t.writeCredential(ctx, c, rotated)
}

func (t *Table) writeCredential(ctx context.Context, c Credential, rotated bool) error {
	c.ModifiedDate = t.tick()
	c.CurrentModifiedDate = c.ModifiedDate.Add(currentLag)
	if rotated {
		d := c.ModifiedDate
		c.LastRotationDate = &d
	}
	if c.ModifiedBy == "" {
		c.ModifiedBy = "alice@example.com"
	}
	// keymanager.create_datakey: a Fernet key (urlsafe base64 of 32 random bytes) encrypted by KMS.
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	fernetKey := base64.URLEncoding.EncodeToString(raw)
	wrapped, err := t.KMS.Encrypt(ctx, t.MasterKey, []byte(fernetKey), map[string]string{"id": c.ID})
	if err != nil {
		return err
	}
	key, err := fernet.ParseKey(fernetKey)
	if err != nil {
		return err
	}
	token, err := key.Encrypt([]byte(pythonJSON(c.Pairs, c.TypedPairs)), c.ModifiedDate)
	if err != nil {
		return err
	}
	item := dynamotest.Item{
		"revision":         {"N": strconv.Itoa(c.Revision)},
		"name":             {"S": c.Name},
		"credential_pairs": {"S": token},
		"enabled":          {"BOOL": c.Enabled},
		// PynamoDB 5's BinaryAttribute base64-encodes the bytes, and the wire encodes them again.
		"data_key":       {"B": base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString(wrapped)))},
		"cipher_version": {"N": "2"},
		"modified_date":  {"S": c.ModifiedDate.Format(pynamoDate)},
		"modified_by":    {"S": c.ModifiedBy},
		"tags":           {"L": stringList(c.Tags)},
	}
	if c.Metadata != nil { // a create that names no metadata leaves the attribute out
		item["metadata"] = map[string]any{"S": pythonJSON(c.Metadata)}
	}
	if c.Documentation != nil {
		item["documentation"] = map[string]any{"S": *c.Documentation}
	}
	if c.LastRotationDate != nil {
		item["last_rotation_date"] = map[string]any{"S": c.LastRotationDate.Format(pynamoDate)}
	}
	// Confidant saves the archive item first, then the current one (same attributes).
	archive := maps.Clone(item)
	archive["id"] = map[string]any{"S": fmt.Sprintf("%s-%d", c.ID, c.Revision)}
	archive["data_type"] = map[string]any{"S": "archive-credential"}
	t.Srv.Put(t.Name, archive)
	item["id"] = map[string]any{"S": c.ID}
	item["data_type"] = map[string]any{"S": "credential"}
	item["modified_date"] = map[string]any{"S": c.CurrentModifiedDate.Format(pynamoDate)}
	t.Srv.Put(t.Name, item)
	t.Credentials[c.ID] = append(t.Credentials[c.ID], c)
	return nil
}

func stringList(s []string) []any {
	out := []any{}
	for _, v := range s {
		out = append(out, map[string]any{"S": v})
	}
	return out
}

// PutService writes the next revision of a service (revision 1 when new), as PUT /v1/services/<id>
// does: an archive item "<id>-<revision>" and the current item. Empty sets are left out, as
// DynamoDB stores no empty set.
func (t *Table) PutService(id string, credentials, blind []string, account *string) {
	revs := t.Services[id]
	s := Service{ID: id, Revision: len(revs) + 1, Enabled: true, Account: account,
		Credentials: slices.Clone(credentials), BlindCredentials: slices.Clone(blind),
		ModifiedBy: "bob@example.com", ModifiedDate: t.tick()}
	s.CurrentModifiedDate = s.ModifiedDate.Add(currentLag)
	item := dynamotest.Item{
		"revision":      {"N": strconv.Itoa(s.Revision)},
		"enabled":       {"BOOL": s.Enabled},
		"modified_date": {"S": s.ModifiedDate.Format(pynamoDate)},
		"modified_by":   {"S": s.ModifiedBy},
	}
	if len(credentials) > 0 {
		item["credentials"] = map[string]any{"SS": toAny(credentials)}
	}
	if len(blind) > 0 {
		item["blind_credentials"] = map[string]any{"SS": toAny(blind)}
	}
	if account != nil {
		item["account"] = map[string]any{"S": *account}
	}
	archive := maps.Clone(item)
	archive["id"] = map[string]any{"S": fmt.Sprintf("%s-%d", id, s.Revision)}
	archive["data_type"] = map[string]any{"S": "archive-service"}
	t.Srv.Put(t.Name, archive)
	item["id"] = map[string]any{"S": id}
	item["data_type"] = map[string]any{"S": "service"}
	item["modified_date"] = map[string]any{"S": s.CurrentModifiedDate.Format(pynamoDate)}
	t.Srv.Put(t.Name, item)
	t.Services[id] = append(revs, s)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// CreateBlindCredential writes a blind credential as Confidant 5 did (revision 1): pairs and data
// keys are JSON maps of region → ciphertext made by its clients, opaque to Confidant.
func (t *Table) CreateBlindCredential(name string) string {
	id := NewID()
	date := t.tick().Format(pynamoDate)
	item := dynamotest.Item{
		"revision":         {"N": "1"},
		"name":             {"S": name},
		"credential_pairs": {"S": `{"us-east-1": "Y2xpZW50LXNpZGUgY2lwaGVydGV4dA=="}`},
		"credential_keys":  {"SS": []any{"api_key"}},
		"enabled":          {"BOOL": true},
		"data_key":         {"S": `{"us-east-1": "a21zLWNpcGhlcnRleHQ="}`},
		"cipher_version":   {"N": "2"},
		"cipher_type":      {"S": "fernet"},
		"modified_date":    {"S": date},
		"modified_by":      {"S": "carol@example.com"},
		"documentation":    {"S": "blind"},
		"data_type":        {"S": "archive-blind-credential"},
		"id":               {"S": id + "-1"},
	}
	t.Srv.Put(t.Name, item)
	current := maps.Clone(item)
	current["id"] = map[string]any{"S": id}
	current["data_type"] = map[string]any{"S": "blind-credential"}
	current["modified_date"] = map[string]any{"S": t.Now.Add(currentLag).Format(pynamoDate)}
	t.Srv.Put(t.Name, current)
	return id
}

// ArchiveCredentials does what Confidant's credentialmanager.archive_credentials(force=True) does
// (its archive script, POST /v1/credentials/<id>/archive): it copies each credential's current item
// and every revision's item into archiveTable (created on first use, with the same index), each
// with its own archive_date, then deletes them from the table. It does not check, as Confidant
// does, that the credential is disabled and unmapped: tests that want that arrange it.
func (t *Table) ArchiveCredentials(archiveTable string, ids ...string) {
	if t.ArchiveTable != archiveTable {
		t.Srv.CreateTable(archiveTable, "id", map[string]dynamotest.Index{Index: {Hash: "data_type", Range: "modified_date"}})
		t.ArchiveTable = archiveTable
	}
	if t.Archived == nil {
		t.Archived = map[string]time.Time{}
	}
	for _, id := range ids {
		at := t.tick()
		t.Archived[id] = at
		keys := []string{id}
		for k := range t.Credentials[id] {
			keys = append(keys, fmt.Sprintf("%s-%d", id, k+1))
		}
		for i, key := range keys {
			it := t.Srv.Get(t.Name, key)
			it["archive_date"] = map[string]any{"S": at.Add(time.Duration(i) * 5 * time.Millisecond).Format(pynamoDate)}
			t.Srv.Put(archiveTable, it)
		}
		for _, key := range keys {
			t.Srv.Delete(t.Name, key)
		}
	}
}
