package confidant

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Confidant's data_type values: one table holds every kind; a current record has the bare id, every
// revision (the current one too) an archive record "<id>-<revision>".
const (
	typeCredential             = "credential"
	typeArchiveCredential      = "archive-credential"
	typeBlindCredential        = "blind-credential"
	typeArchiveBlindCredential = "archive-blind-credential"
	typeService                = "service"
	typeArchiveService         = "archive-service"
)

// item is one DynamoDB item as the SDK decodes it.
type item = map[string]types.AttributeValue

// header is what every credential and service item carries.
type header struct {
	// ID is the record's id, without the "-<revision>" of an archive item.
	ID           string
	Revision     int32
	ModifiedDate time.Time
	ModifiedBy   string
}

func (h *header) head() *header { return h }

// credentialRevision is one item of Confidant's Credential model (confidant/models/credential.py).
type credentialRevision struct {
	header
	Name    string
	Enabled bool
	// Documentation is nil when the item has none.
	Documentation     *string
	Metadata          map[string]string
	Tags              []string
	LastRotationDate  *time.Time
	LastDecryptedDate *time.Time
	// ArchiveDate is set on the archive table's items (CredentialArchive.archive_date).
	ArchiveDate *time.Time
	// PairsToken is the Fernet token of the pairs' JSON; DataKey the KMS ciphertext of the Fernet key.
	PairsToken    string
	DataKey       []byte
	CipherVersion int
	// missing says why this revision is a placeholder for a damaged one (-skip-damaged): it has no
	// pairs to decrypt.
	missing string
}

// serviceRevision is one item of Confidant's Service model (confidant/models/service.py).
type serviceRevision struct {
	header
	Enabled          bool
	Account          *string
	Credentials      []string
	BlindCredentials []string
}

// blindCredential is what the report says of a blind credential (confidant/models/blind_credential.py):
// its pairs are encrypted on the client side, with keys Confidant never had, so nobody can re-seal
// them; they are not imported.
type blindCredential struct {
	ID       string
	Revision int32
	Name     string
}

// archiveID splits "<id>-<revision>" given the item's revision attribute. Service ids may contain
// "-", so the revision attribute, not the first "-", says where the id ends.
func archiveID(itemID string, revision int32) (string, bool) {
	suffix := "-" + strconv.Itoa(int(revision))
	id, ok := strings.CutSuffix(itemID, suffix)
	return id, ok && id != ""
}

func str(it item, name string) (string, bool) {
	v, ok := it[name].(*types.AttributeValueMemberS)
	if !ok {
		return "", false
	}
	return v.Value, true
}

// optStr is a nullable string attribute: absent, NULL, or S.
func optStr(it item, name string) (*string, error) {
	switch v := it[name].(type) {
	case nil, *types.AttributeValueMemberNULL:
		return nil, nil
	case *types.AttributeValueMemberS:
		s := v.Value
		return &s, nil
	}
	return nil, fmt.Errorf("attribute %s is not a string", name)
}

func number(it item, name string) (int64, error) {
	v, ok := it[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("attribute %s is missing or not a number", name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("attribute %s is not an integer", name)
	}
	return n, nil
}

func revisionOf(it item) (int32, error) {
	n, err := number(it, "revision")
	if err != nil {
		return 0, err
	}
	if n < 1 || n > 1<<31-1 {
		return 0, fmt.Errorf("revision %d is out of range", n)
	}
	return int32(n), nil
}

// boolean is a BooleanAttribute with a default (absent or NULL: def).
func boolean(it item, name string, def bool) (bool, error) {
	switch v := it[name].(type) {
	case nil, *types.AttributeValueMemberNULL:
		return def, nil
	case *types.AttributeValueMemberBOOL:
		return v.Value, nil
	case *types.AttributeValueMemberN: // PynamoDB before 3.0 stored booleans as 0/1
		return v.Value != "0", nil
	}
	return false, fmt.Errorf("attribute %s is not a boolean", name)
}

// pynamoDates are the layouts of PynamoDB's UTCDateTimeAttribute ("%Y-%m-%dT%H:%M:%S.%f%z").
var pynamoDates = []string{"2006-01-02T15:04:05.000000-0700", "2006-01-02T15:04:05.000000Z07:00", time.RFC3339Nano}

func date(it item, name string) (*time.Time, error) {
	s, err := optStr(it, name)
	if err != nil || s == nil {
		return nil, err
	}
	for _, layout := range pynamoDates {
		if t, err := time.Parse(layout, *s); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("attribute %s is not a date: %q", name, *s)
}

// stringSet is a UnicodeSetAttribute (SS; absent when empty, as DynamoDB stores no empty set), or a
// ListAttribute of strings (L). The result is sorted, so records compare whatever the order.
func stringSet(it item, name string) ([]string, error) {
	out := []string{}
	switch v := it[name].(type) {
	case nil, *types.AttributeValueMemberNULL:
	case *types.AttributeValueMemberSS:
		out = append(out, v.Value...)
	case *types.AttributeValueMemberL:
		for _, e := range v.Value {
			s, ok := e.(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("attribute %s holds a value that is not a string", name)
			}
			out = append(out, s.Value)
		}
	default:
		return nil, fmt.Errorf("attribute %s is not a set or list of strings", name)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// scalarString turns a JSON scalar into the string gantry stores (as the API does with a number or
// boolean given for a string).
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}

// metadata is a JSONAttribute (S holding JSON) of a dict of strings; absent or null is empty.
func metadata(it item) (map[string]string, error) {
	out := map[string]string{}
	s, err := optStr(it, "metadata")
	if err != nil || s == nil || *s == "null" {
		return out, err
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(*s), &raw); err != nil {
		return nil, fmt.Errorf("metadata is not a JSON object")
	}
	for k, v := range raw {
		str, ok := scalarString(v)
		if !ok {
			return nil, fmt.Errorf("metadata %q is not a string", k)
		}
		out[k] = str
	}
	return out, nil
}

// binaryValue is a BinaryAttribute's bytes. PynamoDB before 6 (Confidant 7 pins 5.5.1) base64-encodes
// the bytes itself and the JSON protocol encodes them again, so DynamoDB holds the base64 text of the
// value (testdata/README.md); PynamoDB 6's BinaryAttribute(legacy_encoding=False) stores the bytes.
// A KMS ciphertext is binary, never base64 text, so text that decodes is the legacy encoding.
func binaryValue(b []byte) []byte {
	if dec, err := base64.StdEncoding.Strict().DecodeString(string(b)); err == nil && len(dec) > 0 {
		return dec
	}
	return b
}

// parseHeader reads an item's id (an archive item's "<id>-<revision>" split by its revision),
// revision, modified_date and modified_by.
func parseHeader(it item, archived bool) (header, error) {
	id, _ := str(it, "id")
	rev, err := revisionOf(it)
	if err != nil {
		return header{}, err
	}
	h := header{ID: id, Revision: rev}
	if archived {
		var ok bool
		if h.ID, ok = archiveID(id, rev); !ok {
			return header{}, fmt.Errorf("archive id %q does not end in -%d (its revision)", id, rev)
		}
	}
	modified, err := date(it, "modified_date")
	if err != nil {
		return header{}, err
	}
	if modified == nil {
		return header{}, fmt.Errorf("attribute modified_date is missing")
	}
	h.ModifiedDate = *modified
	h.ModifiedBy, _ = str(it, "modified_by")
	return h, nil
}

func parseCredential(it item, archived bool) (*credentialRevision, error) {
	h, err := parseHeader(it, archived)
	if err != nil {
		return nil, err
	}
	c := &credentialRevision{header: h}
	var ok bool
	if c.Name, ok = str(it, "name"); !ok {
		return nil, fmt.Errorf("attribute name is missing")
	}
	if c.PairsToken, ok = str(it, "credential_pairs"); !ok {
		return nil, fmt.Errorf("attribute credential_pairs is missing")
	}
	key, ok := it["data_key"].(*types.AttributeValueMemberB)
	if !ok {
		return nil, fmt.Errorf("attribute data_key is missing or not binary")
	}
	c.DataKey = binaryValue(key.Value)
	c.CipherVersion = 2 // CipherManager's default when cipher_version is null
	if _, present := it["cipher_version"].(*types.AttributeValueMemberN); present {
		n, err := number(it, "cipher_version")
		if err != nil {
			return nil, err
		}
		c.CipherVersion = int(n)
	}
	if c.Enabled, err = boolean(it, "enabled", true); err != nil {
		return nil, err
	}
	if c.Documentation, err = optStr(it, "documentation"); err != nil {
		return nil, err
	}
	if c.Metadata, err = metadata(it); err != nil {
		return nil, err
	}
	if c.Tags, err = stringSet(it, "tags"); err != nil {
		return nil, err
	}
	if c.LastRotationDate, err = date(it, "last_rotation_date"); err != nil {
		return nil, err
	}
	if c.LastDecryptedDate, err = date(it, "last_decrypted_date"); err != nil {
		return nil, err
	}
	if c.ArchiveDate, err = date(it, "archive_date"); err != nil {
		return nil, err
	}
	return c, nil
}

func parseService(it item, archived bool) (*serviceRevision, error) {
	h, err := parseHeader(it, archived)
	if err != nil {
		return nil, err
	}
	s := &serviceRevision{header: h}
	if s.Enabled, err = boolean(it, "enabled", true); err != nil {
		return nil, err
	}
	if s.Account, err = optStr(it, "account"); err != nil {
		return nil, err
	}
	if s.Credentials, err = stringSet(it, "credentials"); err != nil {
		return nil, err
	}
	if s.BlindCredentials, err = stringSet(it, "blind_credentials"); err != nil {
		return nil, err
	}
	return s, nil
}
