package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// StoreGrants records grants for the local keyring. There is no IAM to enforce them, so gantry keeps
// the record itself and the authenticator asks Allowed before accepting a service token.
//
// The record lives in the secrets Store, not in a file of one process: every replica sharing the
// store (several secrets replicas on one etcd) sees a grant the moment another replica has recorded
// it, and reports the same grants. Nothing is cached, so a replica can never refuse a service with a
// stale copy of the record; each service-token check is one point read (the token itself is
// validated once and then cached by the kmsauth validator, which caches only valid tokens, never a
// refusal, and the grant check runs after it on every request).
//
// The auth key argument is ignored: the keyring is a single trust domain, so a grant is per
// service, not per key.
type StoreGrants struct {
	store  store.Store
	logger *zap.Logger
	now    func() time.Time
}

var _ kms.GrantManager = (*StoreGrants)(nil)

// NewStoreGrants returns the grant manager over store; nil logger means no logging.
func NewStoreGrants(st store.Store, logger *zap.Logger) *StoreGrants {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &StoreGrants{store: st, logger: logger, now: time.Now}
}

// EnsureGrants records both grants for serviceID, keeping the original creation time if it had any.
// Two replicas granting the same service at once both write both grants, so the race is harmless.
func (g *StoreGrants) EnsureGrants(ctx context.Context, _ string, serviceID string) (kms.GrantState, error) {
	if serviceID == "" {
		return kms.GrantState{}, errors.New("secrets: grants: empty service id")
	}
	old, err := g.store.Grants(ctx, serviceID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return kms.GrantState{}, err
	case old.Encrypt && old.Decrypt:
		return kms.GrantState{Encrypt: true, Decrypt: true}, nil
	}
	created := old.Created
	if created.IsZero() {
		created = g.now().UTC()
	}
	if err := g.store.PutGrants(ctx, serviceID, store.GrantsRecord{Encrypt: true, Decrypt: true, Created: created}); err != nil {
		return kms.GrantState{}, err
	}
	g.logger.Info("recorded local grants", zap.String("service", serviceID))
	return kms.GrantState{Encrypt: true, Decrypt: true}, nil
}

// Grants reports the grants recorded for serviceID; none recorded is no grants, not an error.
func (g *StoreGrants) Grants(ctx context.Context, _ string, serviceID string) (kms.GrantState, error) {
	rec, err := g.store.Grants(ctx, serviceID)
	if errors.Is(err, store.ErrNotFound) {
		return kms.GrantState{}, nil
	}
	if err != nil {
		return kms.GrantState{}, err
	}
	return kms.GrantState{Encrypt: rec.Encrypt, Decrypt: rec.Decrypt}, nil
}

// Allowed reports whether serviceID may authenticate with service tokens: with AWS that takes the
// encrypt grant (without it the service cannot make a token), so the local check asks the same. An
// error (the store unreachable) is no answer: the caller must refuse the request, not the service.
func (g *StoreGrants) Allowed(ctx context.Context, serviceID string) (bool, error) {
	rec, err := g.store.Grants(ctx, serviceID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return rec.Encrypt, nil
}

// The grants file holds only service names, so it is small; the cap stops a wrong path (a log, a
// device) from being read into memory whole.
const maxGrantsFileLen = 16 << 20

// ImportFile merges the grants of the grants.json file that versions before the store-backed
// grants kept in each process's data folder into the store, and returns how many services it
// wrote. A missing file imports nothing. Importing only ever adds (a grant already in the store
// stays, the earlier creation time wins), so it is idempotent and runs on every start: replicas that
// each kept their own file contribute all of their grants.
func (g *StoreGrants) ImportFile(ctx context.Context, path string) (int, error) {
	file, err := readGrantsFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	written := 0
	for _, id := range slices.Sorted(maps.Keys(file)) {
		in := file[id]
		if !in.Encrypt && !in.Decrypt {
			continue
		}
		old, err := g.store.Grants(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return written, fmt.Errorf("import grants of %q from %s: %w", id, path, err)
		}
		merged := store.GrantsRecord{Encrypt: old.Encrypt || in.Encrypt, Decrypt: old.Decrypt || in.Decrypt, Created: old.Created}
		if created := in.Created.UTC(); !in.Created.IsZero() && (merged.Created.IsZero() || created.Before(merged.Created)) {
			merged.Created = created
		}
		if err == nil && merged.Encrypt == old.Encrypt && merged.Decrypt == old.Decrypt && merged.Created.Equal(old.Created) {
			continue
		}
		if err := g.store.PutGrants(ctx, id, merged); err != nil {
			return written, fmt.Errorf("import grants of %q from %s: %w", id, path, err)
		}
		written++
	}
	if written > 0 {
		g.logger.Info("imported local grants into the store", zap.String("file", path), zap.Int("services", written))
	}
	return written, nil
}

// grantsFileEntry is an entry of the grants.json file of earlier versions. Its JSON is that of the
// stores' JSON grants record (package store/codec), but it is the file's own format, frozen with it.
type grantsFileEntry struct {
	Encrypt bool      `json:"encrypt"`
	Decrypt bool      `json:"decrypt"`
	Created time.Time `json:"created"`
}

// readGrantsFile reads a grants.json file: service id → {"encrypt", "decrypt", "created"}.
func readGrantsFile(path string) (map[string]grantsFileEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("grants file: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("grants file %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("grants file %s is not a regular file", path)
	}
	// Whoever can write the file can authorise any service, so a file others may write is refused.
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("grants file %s has mode %04o, which lets group or others grant access; run chmod 600 %s",
			path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxGrantsFileLen+1))
	if err != nil {
		return nil, fmt.Errorf("read grants file %s: %w", path, err)
	}
	if len(data) > maxGrantsFileLen {
		return nil, fmt.Errorf("grants file %s is larger than %d bytes", path, maxGrantsFileLen)
	}
	var grants map[string]grantsFileEntry
	if err := json.Unmarshal(data, &grants); err != nil {
		return nil, fmt.Errorf("grants file %s is not valid JSON: %w", path, err)
	}
	return grants, nil
}
