package secrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Importer writes records carried over from another secrets manager (Confidant, see package
// services/secrets/confidant) with the ids, revisions, names and dates they had there. It is the
// domain's one way to store a record whose id and revision the caller chooses: the API always makes
// new ids, so a re-created credential would break every mapping and client that names it.
//
// It keeps the barrier's rules: pairs are sealed under a fresh data key with the credential id and the
// revision in the additional data, exactly as a write through the API seals them, and revisions are
// written one after the other with compare-and-set, so an import never overwrites a revision that
// exists (a second run, or another writer, gets ErrRevisionConflict instead).
type Importer struct {
	store   store.Store
	barrier *barrier
	logger  *zap.Logger
	// grants, when set, records the KMS grants of imported services (see SetGrants).
	grants  kms.GrantManager
	authKey string
}

// SetGrants makes the importer give every imported service its grants on authKey, as creating the
// service in Confidant did: with the local keyring gantry enforces its own grant records, and a
// service without one could not authenticate. EnsureGrants writes nothing when both grants exist.
func (im *Importer) SetGrants(grants kms.GrantManager, authKey string) {
	im.grants, im.authKey = grants, authKey
}

// EnsureServiceGrants gives an imported service its grants (nothing without SetGrants).
func (im *Importer) EnsureServiceGrants(ctx context.Context, serviceID string) error {
	if im.grants == nil {
		return nil
	}
	_, err := im.grants.EnsureGrants(ctx, im.authKey, serviceID)
	return err
}

// NewImporter returns an importer writing into store, sealing under masterKey of provider (the
// KMS_MASTER_KEY the server runs with). cacheSize bounds the data keys kept for reading back.
func NewImporter(st store.Store, provider kms.Provider, masterKey string, cacheSize int, logger *zap.Logger) *Importer {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Importer{store: st, barrier: newBarrier(provider, masterKey, max(cacheSize, 1)), logger: logger}
}

// PutCredentialRevision seals pairs for revision rec.Revision of credential rec.ID and stores it as
// the next revision: the credential's current revision must be rec.Revision-1 (0: none yet), else
// ErrRevisionConflict. rec's SealedPairs, WrappedKey and Keys are set here; every other field is kept
// as given. A name another current credential holds is *NameTakenError, as for any write.
func (im *Importer) PutCredentialRevision(ctx context.Context, rec *store.CredentialRecord, pairs credpair.Map) error {
	if err := checkID("credential", rec.ID); err != nil {
		return err
	}
	if err := checkName(rec.Name); err != nil {
		return err
	}
	if rec.Revision < 1 {
		return invalid("revision must be at least 1")
	}
	for k := range pairs {
		if k == "" {
			return invalid("credential key must not be empty")
		}
	}
	sealed, wrapped, err := im.barrier.seal(ctx, rec.ID, rec.Revision, pairs)
	if err != nil {
		return err
	}
	out := *rec
	out.SealedPairs, out.WrappedKey, out.Keys = sealed, wrapped, sortedKeys(pairs)
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	return im.store.PutCredential(ctx, &out, rec.Revision-1)
}

// PutServiceRevision stores rec as the next revision of service rec.ID (the current revision must
// be rec.Revision-1). Mapped credentials must be current (*UnknownCredentialsError otherwise), so
// credentials are imported before the services that map them. Blind credential ids are kept as
// given: they are history, and gantry serves no blind credential.
func (im *Importer) PutServiceRevision(ctx context.Context, rec *store.ServiceRecord) error {
	if err := checkID("service", rec.ID); err != nil {
		return err
	}
	if rec.Revision < 1 {
		return invalid("revision must be at least 1")
	}
	out := *rec
	if out.Credentials == nil {
		out.Credentials = []string{}
	}
	if out.BlindCredentials == nil {
		out.BlindCredentials = []string{}
	}
	return im.store.PutService(ctx, &out, rec.Revision-1)
}

// ReplaceServiceRevision rewrites an imported service revision that the import wrote without a
// mapping it can now carry over (store.ReplaceServiceRevision: only where gantry's revision is still
// prev, and the current revision maps current credentials only).
func (im *Importer) ReplaceServiceRevision(ctx context.Context, rec, prev *store.ServiceRecord) error {
	if err := checkID("service", rec.ID); err != nil {
		return err
	}
	out := *rec
	if out.Credentials == nil {
		out.Credentials = []string{}
	}
	if out.BlindCredentials == nil {
		out.BlindCredentials = []string{}
	}
	return im.store.ReplaceServiceRevision(ctx, &out, prev)
}

// CurrentCredentialRevision is the current revision of a credential, 0 when it has none (never
// imported, or archived in gantry since).
func (im *Importer) CurrentCredentialRevision(ctx context.Context, id string) (int32, error) {
	rec, err := im.store.GetCredential(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		return 0, err
	}
	return rec.Revision, nil
}

// CurrentServiceRevision is the current revision of a service, 0 when it has none.
func (im *Importer) CurrentServiceRevision(ctx context.Context, id string) (int32, error) {
	rec, err := im.store.GetService(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil
		}
		return 0, err
	}
	return rec.Revision, nil
}

// CredentialRevision reads one stored revision back and opens its pairs through the barrier, as a
// reader of the API would get them: the importer's verification compares them with the source.
func (im *Importer) CredentialRevision(ctx context.Context, id string, revision int32) (*store.CredentialRecord, credpair.Map, error) {
	rec, err := im.store.GetCredentialRevision(ctx, id, revision)
	if err != nil {
		return nil, nil, err
	}
	pairs, err := im.barrier.open(ctx, id, revision, rec.SealedPairs, rec.WrappedKey)
	if err != nil {
		return nil, nil, fmt.Errorf("credential %s revision %d: %w", id, revision, err)
	}
	return rec, pairs, nil
}

// ServiceRevision reads one stored service revision back.
func (im *Importer) ServiceRevision(ctx context.Context, id string, revision int32) (*store.ServiceRecord, error) {
	return im.store.GetServiceRevision(ctx, id, revision)
}

// ArchiveCredential moves an imported credential, whose current revision is revision, into the
// archive area stamped with at (the date the source archived it): the store's ArchiveCredential,
// with its rules (ErrStillMapped when a current service maps it).
func (im *Importer) ArchiveCredential(ctx context.Context, id string, revision int32, at time.Time) error {
	if err := checkID("credential", id); err != nil {
		return err
	}
	return im.store.ArchiveCredential(ctx, id, revision, at)
}

// ArchivedCredential reads an archived credential's last revision back with its pairs opened, or
// ErrNotFound when the credential is not archived.
func (im *Importer) ArchivedCredential(ctx context.Context, id string) (*store.CredentialRecord, credpair.Map, error) {
	rec, err := im.store.GetArchivedCredential(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	pairs, err := im.barrier.open(ctx, id, rec.Revision, rec.SealedPairs, rec.WrappedKey)
	if err != nil {
		return nil, nil, fmt.Errorf("archived credential %s revision %d: %w", id, rec.Revision, err)
	}
	return rec, pairs, nil
}
