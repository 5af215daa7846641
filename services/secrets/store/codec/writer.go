package codec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Writer encodes records in one format. A store writes FormatJSON while records in FormatProto
// would break a process still running an older build on the same store: the etcd adapter at schema
// version 2, whose replicas are upgraded one by one, until gantry check -upgrade moves it to 3. The
// zero Writer writes the current format, FormatProto, as the package's Encode functions do.
//
// Both formats refuse a string that is not UTF-8 (see EncodeCred), so a write is accepted or
// refused the same way whichever format the store writes at the time.
type Writer struct {
	// Format is FormatProto (or 0, the same) or FormatJSON.
	Format Format
}

// json reports whether w writes the JSON format of schema version 2.
func (w Writer) json() bool { return w.Format == FormatJSON }

// check refuses a Format that is neither, a programming error.
func (w Writer) check() error {
	switch w.Format {
	case 0, FormatProto, FormatJSON:
		return nil
	}
	return fmt.Errorf("codec: unknown record format 0x%02x to write", byte(w.Format))
}

// EncodeCred is EncodeCred in w's format.
func (w Writer) EncodeCred(rec *store.CredentialRecord) ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	if !w.json() {
		return EncodeCred(rec)
	}
	if err := checkCredUTF8(rec); err != nil {
		return nil, err
	}
	return json.Marshal(Cred(*rec))
}

// EncodeService is EncodeService in w's format.
func (w Writer) EncodeService(rec *store.ServiceRecord) ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	if !w.json() {
		return EncodeService(rec)
	}
	if err := checkServiceUTF8(rec); err != nil {
		return nil, err
	}
	return json.Marshal(Service(*rec))
}

// EncodeGrants is EncodeGrants in w's format.
func (w Writer) EncodeGrants(rec store.GrantsRecord) ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	if !w.json() {
		return EncodeGrants(rec)
	}
	return json.Marshal(Grants(rec))
}

// EncodeArchived is EncodeArchived in w's format: the stored credential record (in either format)
// archived at `at`, the record inside in w's format too. A JSON record is wrapped unchanged, as
// schema version 2 did.
func (w Writer) EncodeArchived(at time.Time, record []byte) ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	if !w.json() {
		return EncodeArchived(at, record)
	}
	f, err := FormatOf([]byte("the record to archive"), record)
	if err != nil {
		return nil, err
	}
	if f != FormatJSON {
		rec, err := DecodeCred([]byte("the record to archive"), record)
		if err != nil {
			return nil, err
		}
		if record, err = w.EncodeCred(rec); err != nil {
			return nil, err
		}
	}
	return json.Marshal(Archived{ArchivedAt: at, Record: record})
}

// EncodeChangeRequest is EncodeChangeRequest, in FormatProto whatever w's format: change requests
// have no JSON form, as no build that reads only JSON knows them (see changes.go). A store writing
// FormatJSON for the replicas of an older build sharing it writes them in protobuf all the same;
// those replicas never read them.
func (w Writer) EncodeChangeRequest(rec *store.ChangeRequestRecord) ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	return EncodeChangeRequest(rec)
}
