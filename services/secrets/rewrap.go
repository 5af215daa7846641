package secrets

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// A rewrap pass walks every revision of every current credential in batches and wraps each data key
// again under the master key's active version, so that older key versions can be retired. Only the
// wrapped data key of a record changes: the sealed pairs, the revision numbers and every other field
// stay, and no revision is created. Each record is swapped with a compare-and-set on its old wrapped
// key, so replicas keep reading and writing during a pass, and two passes never undo each other.
const (
	// DefaultRewrapBatch is the number of revisions one rewrap call handles by default.
	DefaultRewrapBatch = 200
	// MaxRewrapBatch bounds one call, so a single call never holds a replica's KMS for long.
	MaxRewrapBatch = 2000
	// maxUndecryptableListed bounds the ids a rewrap result lists (it counts them all).
	maxUndecryptableListed = 50
)

// RewrapOptions select one batch of a rewrap pass.
type RewrapOptions struct {
	// PageToken continues a pass where the previous batch stopped; "" starts a pass, and the first
	// batch also rewraps the store's key-check value.
	PageToken string
	// Limit is the number of revisions in this batch: 1..MaxRewrapBatch, 0 for DefaultRewrapBatch.
	Limit int
	// DryRun counts what a rewrap would change, and changes nothing.
	DryRun bool
}

// RewrapResult is what one batch found and did.
type RewrapResult struct {
	// Scanned is the number of revisions the batch looked at.
	Scanned int
	// Rewrapped were wrapped under the active version by this batch (DryRun: would be).
	Rewrapped int
	// Current were under the active version already.
	Current int
	// Changed were changed by someone else during the batch (another replica's rewrap, an archive):
	// left as they are; a later pass sees them again.
	Changed int
	// Undecryptable counts revisions whose data key the configured keys cannot unwrap (a retired
	// version, a damaged record); they are left as they are. UndecryptableIDs names the first ones
	// ("id revision N").
	Undecryptable    int
	UndecryptableIDs []string
	// ByKeyVersion counts the batch's revisions by the key version that wraps them after the batch
	// ("<key id> v<N>"; with AWS KMS, the key ARN). Summed over a whole pass: what each version still
	// wraps.
	ByKeyVersion map[string]int
	// Active is the version data keys are wrapped under now.
	Active string
	// KeyCheck is what the first batch did with the key-check value: "rewrapped", "current", "none"
	// (the store has none yet); "" in later batches.
	KeyCheck string
	// NextPageToken continues the pass; "" when this batch was the last.
	NextPageToken string
}

// Rewrap runs one batch of a rewrap pass (see RewrapOptions). An invalid option is
// ErrInvalidArgument; a KMS or store that fails stops the batch with its error, and the same
// PageToken can be given again: a rewrap is idempotent.
func (s *Service) Rewrap(ctx context.Context, opts RewrapOptions) (RewrapResult, error) {
	if opts.Limit == 0 {
		opts.Limit = DefaultRewrapBatch
	}
	if opts.Limit < 1 || opts.Limit > MaxRewrapBatch {
		return RewrapResult{}, invalid("batch size must be between 1 and %d", MaxRewrapBatch)
	}
	active, err := s.activeKey(ctx)
	if err != nil {
		return RewrapResult{}, err
	}
	res := RewrapResult{Active: active, ByKeyVersion: map[string]int{}}
	if opts.PageToken == "" {
		if res.KeyCheck, err = s.rewrapKeyCheck(ctx, active, opts.DryRun); err != nil {
			return RewrapResult{}, err
		}
	}
	recs, next, err := s.store.ListAllCredentialRevisions(ctx, store.Page{Limit: opts.Limit, Token: opts.PageToken})
	if errors.Is(err, store.ErrBadPageToken) {
		return RewrapResult{}, invalid("the page token was not issued by this store: start the pass again without one")
	}
	if err != nil {
		return RewrapResult{}, err
	}
	for _, rec := range recs {
		if err := s.rewrapRevision(ctx, rec, active, opts.DryRun, &res); err != nil {
			return RewrapResult{}, err
		}
	}
	res.NextPageToken = next
	return res, nil
}

// rewrapRevision rewraps one history record, tallying the outcome in res.
func (s *Service) rewrapRevision(ctx context.Context, rec *store.CredentialRecord, active string, dryRun bool, res *RewrapResult) error {
	res.Scanned++
	undecryptable := func() {
		res.Undecryptable++
		if len(res.UndecryptableIDs) < maxUndecryptableListed {
			res.UndecryptableIDs = append(res.UndecryptableIDs, rec.ID+" revision "+strconv.Itoa(int(rec.Revision)))
		}
	}
	version, err := s.wrappingKey(ctx, rec.ID, rec.WrappedKey, encryptionContext(rec.ID))
	if errors.Is(err, errUndecryptable) {
		undecryptable()
		return nil
	}
	if err != nil {
		return err
	}
	if version == active {
		res.Current++
		res.ByKeyVersion[version]++
		return nil
	}
	if dryRun {
		res.Rewrapped++
		res.ByKeyVersion[active]++
		return nil
	}
	next, err := s.barrier.rewrap(ctx, rec.ID, rec.WrappedKey)
	if errors.Is(err, errUndecryptable) {
		undecryptable()
		return nil
	}
	if err != nil {
		return err
	}
	switch err := s.store.RewrapCredential(ctx, rec.ID, rec.Revision, rec.WrappedKey, next); {
	case errors.Is(err, store.ErrRevisionConflict), errors.Is(err, store.ErrNotFound):
		res.Changed++
	case err != nil:
		return err
	default:
		res.Rewrapped++
		res.ByKeyVersion[active]++
	}
	return nil
}

// rewrapKeyCheck wraps the key-check value under the active version, so retiring the old version
// does not make the store look like it belongs to other keys at the next start.
func (s *Service) rewrapKeyCheck(ctx context.Context, active string, dryRun bool) (string, error) {
	held, err := s.store.KeyCheck(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return "none", nil
	}
	if err != nil {
		return "", err
	}
	version, err := s.wrappingKey(ctx, "", held, keyCheckContext)
	if err != nil {
		return "", fmt.Errorf("the key-check value: %w", err)
	}
	if version == active {
		return "current", nil
	}
	if dryRun {
		return "rewrapped", nil
	}
	plain, _, err := s.kms.Decrypt(ctx, held, keyCheckContext)
	if err != nil {
		return "", kmsError(ctx, "decrypt the key-check value", err)
	}
	next, err := s.kms.Encrypt(ctx, s.cfg.KMSMasterKey, plain, keyCheckContext)
	if err != nil {
		return "", kmsError(ctx, "wrap the key-check value", err)
	}
	if err := s.store.ReplaceKeyCheck(ctx, held, next); errors.Is(err, store.ErrRevisionConflict) {
		return "current", nil // another replica's pass replaced it first
	} else if err != nil {
		return "", err
	}
	return "rewrapped", nil
}

// activeKey names the key version new data keys are wrapped under: "<key id> v<N>" with the
// keyring, the key's canonical id (ARN) with a provider without visible versions.
func (s *Service) activeKey(ctx context.Context) (string, error) {
	if s.versions != nil {
		v, err := s.versions.ActiveKeyVersion(ctx, s.cfg.KMSMasterKey)
		if err != nil {
			return "", kmsError(ctx, "resolve the master key", err)
		}
		return v.String(), nil
	}
	id, err := s.kms.ResolveKeyID(ctx, s.cfg.KMSMasterKey)
	if err != nil {
		return "", kmsError(ctx, "resolve the master key", err)
	}
	return id, nil
}

// wrappingKey names the key version that wrapped a ciphertext, in activeKey's terms: read from its
// header with the keyring; with AWS KMS, the key that decrypts it.
func (s *Service) wrappingKey(ctx context.Context, credentialID string, wrapped []byte, ec map[string]string) (string, error) {
	if s.versions != nil {
		v, err := s.versions.CiphertextKeyVersion(wrapped)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errUndecryptable, err)
		}
		return v.String(), nil
	}
	_, id, err := s.kms.Decrypt(ctx, wrapped, ec)
	if err != nil {
		return "", kmsError(ctx, "decrypt data key of credential "+credentialID, err)
	}
	return id, nil
}

// Sealed-revision statistics: secrets.sealed.<key id>.v<N>.revisions, the revisions each version of the
// master key wraps, and secrets.sealed.not_active, those under any version but the active one (what a
// rewrap still has to do before an old version can be retired). Only with a provider whose versions
// are visible (the local keyring).
const statSealedNotActive = "secrets.sealed.not_active"

// sealedGauges remembers which per-version gauges a scan set, so a version gone from the store (or
// retired) drops to 0 instead of keeping its last value.
type sealedGauges struct {
	mu   sync.Mutex
	seen map[string]bool
}

// ScanSealed counts every revision of every current credential by the key version that wraps it
// (CountKeyVersions: from the wrapped keys' headers, no KMS call), and publishes the counts as
// statistics. It needs a provider whose versions are visible; others report nothing.
func (s *Service) ScanSealed(ctx context.Context) (map[string]int, error) {
	if s.versions == nil {
		return nil, nil
	}
	counts, err := CountKeyVersions(ctx, s.store, s.versions)
	if err != nil {
		return nil, err
	}
	s.publishSealed(counts.Revisions, "")
	return counts.Revisions, nil
}

// publishSealed sets the sealed-revision gauges from counts; active "" asks the keyring for it.
func (s *Service) publishSealed(counts map[string]int, active string) {
	if s.stats == nil {
		return
	}
	if active == "" {
		var err error
		if active, err = s.activeKey(context.Background()); err != nil {
			return
		}
	}
	s.sealed.mu.Lock()
	defer s.sealed.mu.Unlock()
	if s.sealed.seen == nil {
		s.sealed.seen = map[string]bool{}
	}
	notActive := 0
	now := map[string]bool{}
	for version, n := range counts {
		if version != active {
			notActive += n
		}
		name := sealedStatName(version)
		now[name] = true
		s.stats.Gauge(name).Set(int64(n))
	}
	for name := range s.sealed.seen {
		if !now[name] {
			s.stats.Gauge(name).Set(0)
		}
	}
	s.sealed.seen = now
	s.stats.Gauge(statSealedNotActive).Set(int64(notActive))
}

// sealedStatName is the gauge of one key version: "arn:gantry:kms:local:key/<id> v<N>" becomes
// secrets.sealed.<id>.v<N>.revisions.
func sealedStatName(version string) string {
	id, n, ok := strings.Cut(strings.TrimPrefix(version, kms.KeyringKeyIDPrefix), " v")
	if !ok {
		return "secrets.sealed.unreadable.v0.revisions"
	}
	return "secrets.sealed." + id + ".v" + n + ".revisions"
}

// RunSealedScan scans the sealed revisions every interval until ctx ends (interval 0: never). The
// first scan runs at once, so the statistics exist from the start.
func (s *Service) RunSealedScan(ctx context.Context, interval time.Duration) {
	if interval <= 0 || s.versions == nil {
		return
	}
	for {
		if _, err := s.ScanSealed(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("counting sealed revisions by key version failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// keyReloader is a provider whose keys can be re-read in place: the local keyring.
type keyReloader interface {
	Reload(check func(kms.Provider) error) (bool, error)
}

// ReloadKeys re-reads the local keyring (a version staged, activated or retired elsewhere) and
// reports whether it changed; false with a provider that has nothing to reload (AWS KMS). A keyring
// whose master key does not resolve, or that no longer opens the store's key-check value, is refused
// and the keys in use stay: a reload never makes the store unreadable here.
func (s *Service) ReloadKeys(ctx context.Context) (bool, error) {
	r, ok := s.reloader.(keyReloader)
	if !ok {
		return false, nil
	}
	changed, err := r.Reload(func(next kms.Provider) error {
		if _, err := next.ResolveKeyID(ctx, s.cfg.KMSMasterKey); err != nil {
			return fmt.Errorf("the master key %s: %w", s.cfg.KMSMasterKey, err)
		}
		held, err := s.store.KeyCheck(ctx)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the key-check value: %w", err)
		}
		return decryptKeyCheck(ctx, next, held)
	})
	if changed {
		active, _ := s.activeKey(ctx)
		s.logger.Info("keyring reloaded", zap.String("active_master_key", active))
		// At once, not at the next refresh: a retire must not see this replica on its old version
		// after the operator's SIGHUP returned, nor on its new one before.
		if err := s.publishKeys(ctx); err != nil {
			s.logger.Warn("publishing this replica's key versions after the reload failed", zap.Error(err))
		}
	}
	return changed, err
}

// RunKeyReload re-reads the keyring every interval until ctx ends (interval 0: never).
func (s *Service) RunKeyReload(ctx context.Context, interval time.Duration) {
	if _, ok := s.reloader.(keyReloader); !ok || interval <= 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		if _, err := s.ReloadKeys(ctx); err != nil && ctx.Err() == nil {
			s.logger.Error("keyring reload refused", zap.Error(err))
		}
	}
}
