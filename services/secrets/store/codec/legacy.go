package codec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// The JSON format (FormatJSON) is what schema versions 1 and 2 stored, and what records not yet
// rewritten still hold: the types below are its exact shape, never to change. They are read by the
// Decode functions and written only by EncodeJSON (the upgrade tests need records in the old form).

// Cred is the JSON form of a store.CredentialRecord. It has exactly the fields of
// CredentialRecord, so the two convert into each other (and adding a field to one without the other
// does not compile). omitempty turns empty collections into absent ones: they decode as nil.
type Cred struct {
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

// Service is the JSON form of a store.ServiceRecord (see Cred).
type Service struct {
	ID               string    `json:"id"`
	Revision         int32     `json:"revision"`
	Enabled          bool      `json:"enabled"`
	Account          *string   `json:"account,omitempty"`
	Credentials      []string  `json:"credentials,omitempty"`
	BlindCredentials []string  `json:"blind_credentials,omitempty"`
	ModifiedDate     time.Time `json:"modified_date"`
	ModifiedBy       string    `json:"modified_by"`
}

// Grants is the JSON form of a store.GrantsRecord (the shape of an entry of the grants.json file
// that earlier versions kept, too).
type Grants struct {
	Encrypt bool      `json:"encrypt"`
	Decrypt bool      `json:"decrypt"`
	Created time.Time `json:"created"`
}

// Archived wraps an archived credential record (its Cred JSON, unchanged).
type Archived struct {
	ArchivedAt time.Time       `json:"archived_at"`
	Record     json.RawMessage `json:"record"`
}

// CredHead is what a write needs of the record it replaces: the revision its compare-and-set checks
// and the name its indexes are kept under.
type CredHead struct {
	Revision int32  `json:"revision"`
	Name     string `json:"name"`
}

func corrupt(area []byte, err error) error {
	return fmt.Errorf("corrupt record in %s: %w", area, err)
}

func decodeCredJSON(area, raw []byte) (*store.CredentialRecord, error) {
	var c Cred
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, corrupt(area, err)
	}
	rec := store.CredentialRecord(c)
	return &rec, nil
}

func decodeServiceJSON(area, raw []byte) (*store.ServiceRecord, error) {
	var c Service
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, corrupt(area, err)
	}
	rec := store.ServiceRecord(c)
	return &rec, nil
}

func decodeGrantsJSON(area, raw []byte) (store.GrantsRecord, error) {
	var g Grants
	if err := json.Unmarshal(raw, &g); err != nil {
		return store.GrantsRecord{}, corrupt(area, err)
	}
	return store.GrantsRecord(g), nil
}

func decodeArchivedJSON(area, raw []byte) (*store.ArchivedCredential, error) {
	var a Archived
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, corrupt(area, err)
	}
	rec, err := DecodeCred(area, a.Record)
	if err != nil {
		return nil, err
	}
	return &store.ArchivedCredential{Record: rec, ArchivedAt: a.ArchivedAt}, nil
}

func decodeCredHeadJSON(area, raw []byte) (CredHead, error) {
	var h CredHead
	if err := json.Unmarshal(raw, &h); err != nil {
		return CredHead{}, corrupt(area, err)
	}
	return h, nil
}

// EncodeJSON returns a stored record of kind (in either format) in the JSON format of schema
// version 2, as earlier versions wrote it. Nothing in production writes it: it is how tests put a
// store in the state an upgrade finds.
func EncodeJSON(kind Kind, area, raw []byte) ([]byte, error) {
	switch kind {
	case KindCred:
		rec, err := DecodeCred(area, raw)
		if err != nil {
			return nil, err
		}
		return json.Marshal(Cred(*rec))
	case KindService:
		rec, err := DecodeService(area, raw)
		if err != nil {
			return nil, err
		}
		return json.Marshal(Service(*rec))
	case KindGrants:
		rec, err := DecodeGrants(area, raw)
		if err != nil {
			return nil, err
		}
		return json.Marshal(Grants(rec))
	case KindArchived:
		a, err := DecodeArchived(area, raw)
		if err != nil {
			return nil, err
		}
		rec, err := json.Marshal(Cred(*a.Record))
		if err != nil {
			return nil, err
		}
		return json.Marshal(Archived{ArchivedAt: a.ArchivedAt, Record: rec})
	}
	return nil, fmt.Errorf("codec: unknown record kind %d", kind)
}

// jsonMarshalCred is how schema version 2 encoded a credential record (the encoding benchmark's
// baseline).
func jsonMarshalCred(rec *store.CredentialRecord) ([]byte, error) { return json.Marshal(Cred(*rec)) }
