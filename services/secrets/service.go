package secrets

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mathrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/iamroles"
	"github.com/gantry-dev/gantry/pkg/jwtkeys"
	"github.com/gantry-dev/gantry/pkg/kms"
)

// GeneratedValueLength is the length of a value from GenerateValue, as in Confidant.
const GeneratedValueLength = 50

// writeAttempts bounds the reload-and-retry loop of a write that loses a compare-and-set race.
const writeAttempts = 8

// conflictPause waits before the next attempt of a write that lost a compare-and-set race: a random
// pause, growing with the attempt (full jitter, 1 ms doubling, at most 64 ms), so writers racing on
// one record, on one replica or several sharing etcd, fall out of step instead of colliding again.
func conflictPause(ctx context.Context, attempt int) error {
	limit := time.Millisecond << min(attempt, 6)
	t := time.NewTimer(mathrand.N(limit))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// maxPageLimit caps a client's limit so one request cannot ask for an unbounded page.
const maxPageLimit = 10000

// Deps are the collaborators of a Service.
type Deps struct {
	Store  Store
	KMS    kms.Provider
	ACL    ACL
	Logger *zap.Logger
	// JWTKeys signs JSON Web Tokens per environment; nil disables the JWT routes.
	JWTKeys *jwtkeys.Store
	// Grants manages the KMS grants of services; nil disables the grant routes.
	Grants kms.GrantManager
	// Roles lists the roles of the cloud account for GET /v1/roles.
	Roles iamroles.Lister
	// ServiceAllowed, when set, must approve every service that authenticates with kmsauth (with
	// the local keyring, gantry enforces its own grant records this way). An error refuses the
	// request without deciding about the service.
	ServiceAllowed func(ctx context.Context, service string) (bool, error)
	// CAs are the certificate authorities by name (cfg.Certs names them and holds their settings);
	// nil means none.
	CAs map[string]ca.Authority
}

// Service holds the secrets domain logic: validation, revisions, envelope encryption, access control,
// conflicts, events. It knows neither gRPC nor the storage engine.
type Service struct {
	login   loginModules
	grants  kms.GrantManager
	roles   iamroles.Lister
	auth    *authenticator
	jwt     *jwtkeys.Store
	certs   *certificates
	cfg     Config
	store   Store
	kms     kms.Provider
	barrier *barrier
	acl     ACL
	hooks   *webhooks
	logger  *zap.Logger
	audit   *zap.Logger
	now     func() time.Time
}

// NewService returns a service over deps, resolving the authentication keys through the KMS. Call
// Close to flush pending webhooks.
func NewService(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	logger := deps.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	certs, err := newCertificates(cfg.Certs, deps.CAs)
	if err != nil {
		return nil, err
	}
	acl := deps.ACL
	if acl == nil {
		switch cfg.ACLModule {
		case "policy":
			credentialName := func(ctx context.Context, id string) (string, bool) {
				rec, err := deps.Store.GetCredential(ctx, id)
				if err != nil {
					return "", false
				}
				return rec.Name, true
			}
			policy, err := LoadPolicyACL(cfg.ACLPolicyFile, credentialName)
			if err != nil {
				return nil, err
			}
			acl = policy
		default:
			acl = DefaultACL{CertificateAllowed: certs.serviceMayGet}
		}
	}
	auth, err := newAuthenticator(ctx, cfg, deps.KMS)
	if err != nil {
		return nil, err
	}
	auth.serviceAllowed = deps.ServiceAllowed
	login, err := newLoginModules(ctx, cfg.Auth, logger)
	if err != nil {
		return nil, err
	}
	return &Service{
		login:   login,
		grants:  deps.Grants,
		roles:   deps.Roles,
		auth:    auth,
		jwt:     deps.JWTKeys,
		certs:   certs,
		cfg:     cfg,
		store:   deps.Store,
		kms:     deps.KMS,
		barrier: newBarrier(deps.KMS, cfg.KMSMasterKey, cfg.DataKeyCacheSize),
		acl:     acl,
		hooks: newWebhooks(webhookConfig{URL: cfg.WebhookURL, Username: cfg.WebhookUsername, Password: cfg.WebhookPassword},
			logger.Named("webhook")),
		logger: logger,
		audit:  logger.Named("audit"),
		now:    func() time.Time { return time.Now().UTC() },
	}, nil
}

// Close stops the webhook worker after the queued events were attempted.
func (s *Service) Close() { s.hooks.close() }

// CredentialInput is a create or update request; nil fields are absent.
type CredentialInput struct {
	Name          *string
	Pairs         map[string]any
	Metadata      map[string]any
	Enabled       *bool
	Documentation *string
	Tags          []string
	TagsSet       bool
	// Restoring is set by the web UI when it restores a revision; it waives ENFORCE_DOCUMENTATION.
	Restoring bool
}

// CredentialView is a credential as a response shows it.
type CredentialView struct {
	Record *CredentialRecord
	// Pairs are the decrypted values, nil when not returned.
	Pairs        map[string]string
	Permissions  map[string]bool
	NextRotation *time.Time
}

// ServiceInput is the body of a service write.
type ServiceInput struct {
	Credentials      []string
	BlindCredentials []string
	Enabled          *bool
	Account          *string
}

// ServiceView is a service as a response shows it.
type ServiceView struct {
	Record      *ServiceRecord
	Credentials []*CredentialView
	Permissions map[string]bool
}

// FieldDiff is a changed scalar: Added is the newer value, Removed the older.
type FieldDiff struct{ Added, Removed any }

// KeysDiff is a changed collection: keys or ids added and removed.
type KeysDiff struct{ Added, Removed []string }

// CredentialDiff is the difference between two credential revisions; nil fields did not change.
type CredentialDiff struct {
	Name, Enabled, Documentation, LastRotationDate, ModifiedBy, ModifiedDate *FieldDiff
	Pairs, Metadata, Tags                                                    *KeysDiff
}

// ServiceDiff is the difference between two service revisions; nil fields did not change.
type ServiceDiff struct {
	Enabled, Account, ModifiedBy, ModifiedDate *FieldDiff
	Credentials, BlindCredentials              *KeysDiff
}

// ---- shared rules ---------------------------------------------------------------------------

func (s *Service) allowed(ctx context.Context, resourceType, action, id string, extra map[string]any) bool {
	return s.acl.Allowed(ctx, PrincipalFrom(ctx), resourceType, action, id, extra)
}

// checkWritable refuses writes in maintenance mode: the flag, or the touch file existing now.
func (s *Service) checkWritable() error {
	if s.maintenance() {
		return errMaintenance
	}
	return nil
}

func (s *Service) maintenance() bool {
	if s.cfg.MaintenanceMode {
		return true
	}
	if s.cfg.MaintenanceModeTouchFile != "" {
		if _, err := os.Stat(s.cfg.MaintenanceModeTouchFile); err == nil {
			return true
		}
	}
	return false
}

// newID returns a Confidant-style id: a random UUID4 as 32 lower-case hex characters.
func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:]), nil
}

// scalarString turns a JSON scalar into the string Confidant would store; objects, arrays and null
// are refused.
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

// normalizePairs lower-cases the keys and checks every pair.
func normalizePairs(in map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(in))
	for k, v := range in {
		key := strings.ToLower(k)
		if key == "" {
			return nil, invalid("credential key must not be empty")
		}
		if strings.ContainsFunc(key, unicode.IsSpace) {
			return nil, invalid("credential key must not contain whitespace")
		}
		if _, dup := out[key]; dup {
			return nil, invalid("credential key %q is given twice (keys are case-insensitive)", key)
		}
		s, ok := scalarString(v)
		if !ok {
			return nil, invalid("credential pairs must be key: value")
		}
		out[key] = s
	}
	return out, nil
}

func normalizeMetadata(in map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(in))
	for k, v := range in {
		s, ok := scalarString(v)
		if !ok {
			return nil, invalid("metadata must be a dict of strings")
		}
		out[k] = s
	}
	return out, nil
}

func normalizeTags(in []string) ([]string, error) {
	out := []string{}
	for _, t := range in {
		if strings.TrimSpace(t) == "" {
			return nil, invalid("tags must not be empty strings")
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func checkName(name string) error {
	if strings.TrimSpace(name) == "" {
		return invalid("name is a required field")
	}
	if len(name) > 1024 || !utf8.ValidString(name) {
		return invalid("name must be valid text of at most 1024 bytes")
	}
	return nil
}

// checkID rejects ids no record could have, before they reach the store.
func checkID(kind, id string) error {
	if id == "" || len(id) > 512 || !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl) {
		return invalid("%s id must be 1 to 512 printable characters", kind)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.Sort(keys)
	return keys
}

func (s *Service) page(limit *int32, token string, defaultLimit int) (Page, error) {
	p := Page{Token: token, Limit: defaultLimit}
	if limit != nil {
		if *limit < 1 {
			return Page{}, invalid("limit must be a positive integer")
		}
		p.Limit = min(int(*limit), maxPageLimit)
	}
	return p, nil
}

// nextRotation computes next_rotation_date (never stored): null when a tag excludes rotation or the
// feature is off (MAXIMUM_ROTATION_DAYS 0 and no ROTATION_DAYS_CONFIG tag applies); "now" for records
// without a rotation date; the last decryption when someone saw the values after the last rotation;
// else the last rotation plus the smallest applicable number of days.
func (s *Service) nextRotation(rec *CredentialRecord) *time.Time {
	for _, t := range rec.Tags {
		if slices.Contains(s.cfg.TagsExcludingRotation, t) {
			return nil
		}
	}
	days := s.cfg.MaximumRotationDays
	for _, t := range rec.Tags {
		if d, ok := s.cfg.RotationDaysConfig[t]; ok && d > 0 && (days == 0 || d < days) {
			days = d
		}
	}
	if days == 0 {
		return nil
	}
	if rec.LastRotationDate == nil {
		now := s.now()
		return &now
	}
	if rec.LastDecryptedDate != nil && rec.LastDecryptedDate.After(*rec.LastRotationDate) {
		t := *rec.LastDecryptedDate
		return &t
	}
	t := rec.LastRotationDate.AddDate(0, 0, days)
	return &t
}

func (s *Service) view(rec *CredentialRecord, pairs map[string]string, perms map[string]bool) *CredentialView {
	if perms == nil {
		perms = map[string]bool{}
	}
	return &CredentialView{Record: rec, Pairs: pairs, Permissions: perms, NextRotation: s.nextRotation(rec)}
}

func allPermissions(actions ...string) map[string]bool {
	m := map[string]bool{}
	for _, a := range actions {
		m[a] = true
	}
	return m
}

func (s *Service) auditLog(ctx context.Context, action, resource, id string, revision int32) {
	p := PrincipalFrom(ctx)
	s.audit.Info("audit", zap.String("principal", p.Name), zap.String("principal_type", p.Type),
		zap.String("action", action), zap.String("resource", resource), zap.String("id", id), zap.Int32("revision", revision))
}

// ---- credentials --------------------------------------------------------------------------------

// CreateCredential stores a new credential at revision 1.
func (s *Service) CreateCredential(ctx context.Context, in CredentialInput) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceCredential, ActionCreate, "", nil) {
		return nil, &deniedError{msg: p.Name + " does not have access to create credentials"}
	}
	if in.Name == nil {
		return nil, invalid("name is a required field")
	}
	if err := checkName(*in.Name); err != nil {
		return nil, err
	}
	if len(in.Pairs) == 0 {
		return nil, invalid("credential_pairs is a required field")
	}
	pairs, err := normalizePairs(in.Pairs)
	if err != nil {
		return nil, err
	}
	metadata, err := normalizeMetadata(in.Metadata)
	if err != nil {
		return nil, err
	}
	if in.Documentation == nil || strings.TrimSpace(*in.Documentation) == "" {
		return nil, invalid("documentation is a required field")
	}
	tags, err := normalizeTags(in.Tags)
	if err != nil {
		return nil, err
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	sealed, wrapped, err := s.barrier.seal(ctx, id, pairs)
	if err != nil {
		return nil, err
	}
	now := s.now()
	doc := *in.Documentation
	rec := &CredentialRecord{
		ID: id, Revision: 1, Name: *in.Name, Enabled: in.Enabled == nil || *in.Enabled,
		Documentation: &doc, Metadata: metadata, Tags: tags, Keys: sortedKeys(pairs),
		SealedPairs: sealed, WrappedKey: wrapped, ModifiedDate: now, ModifiedBy: p.Name, LastRotationDate: &now,
	}
	if err := s.store.PutCredential(ctx, rec, 0); err != nil {
		return nil, err
	}
	s.auditLog(ctx, "create", ResourceCredential, id, 1)
	return s.view(rec, pairs, allPermissions(ActionMetadata, ActionGet, ActionUpdate)), nil
}

func (s *Service) currentCredential(ctx context.Context, id string) (*CredentialRecord, error) {
	if err := checkID("credential", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetCredential(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, &notFoundError{msg: "Credential not found."}
	}
	return rec, err
}

func (s *Service) credentialRevision(ctx context.Context, id string, revision int32) (*CredentialRecord, error) {
	rec, err := s.store.GetCredentialRevision(ctx, id, revision)
	if errors.Is(err, ErrNotFound) {
		return nil, &notFoundError{msg: fmt.Sprintf("Revision %d of credential %s not found.", revision, id)}
	}
	return rec, err
}

// GetCredential returns one credential, with its decrypted pairs when allowed and asked for.
func (s *Service) GetCredential(ctx context.Context, id string, metadataOnly bool) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionMetadata, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s", p.Name, id), reference: id}
	}
	rec, err := s.currentCredential(ctx, id)
	if err != nil {
		return nil, err
	}
	perms := map[string]bool{
		ActionMetadata: true,
		ActionGet:      s.allowed(ctx, ResourceCredential, ActionGet, id, nil),
		ActionUpdate:   s.allowed(ctx, ResourceCredential, ActionUpdate, id, nil),
	}
	var pairs map[string]string
	if !metadataOnly && perms[ActionGet] {
		if pairs, err = s.barrier.open(ctx, rec.ID, rec.SealedPairs, rec.WrappedKey); err != nil {
			return nil, err
		}
		s.auditLog(ctx, "get", ResourceCredential, id, rec.Revision)
		if s.cfg.EnableSaveLastDecryptionTime {
			now := s.now()
			// Best effort, and allowed in maintenance mode as in Confidant: a failure to record the
			// read must not refuse the read.
			if err := s.store.SetLastDecrypted(ctx, id, rec.Revision, now); err != nil {
				s.logger.Warn("could not record last decryption time", zap.String("credential_id", id), zap.Error(err))
			} else {
				rec.LastDecryptedDate = &now
			}
		}
	}
	return s.view(rec, pairs, perms), nil
}

// ListCredentials lists current credentials without values.
func (s *Service) ListCredentials(ctx context.Context, limit *int32, token string) ([]*CredentialView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionList, "", nil) {
		return nil, "", &deniedError{msg: p.Name + " does not have access to list credentials"}
	}
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListCredentials(ctx, page)
	return s.views(recs), next, err
}

func (s *Service) views(recs []*CredentialRecord) []*CredentialView {
	out := make([]*CredentialView, len(recs))
	for i, r := range recs {
		out[i] = s.view(r, nil, nil)
	}
	return out
}

// UpdateCredential writes a new revision with the given fields changed.
func (s *Service) UpdateCredential(ctx context.Context, id string, in CredentialInput) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceCredential, ActionUpdate, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to update credential %s", p.Name, id), reference: id}
	}
	var newPairs map[string]string
	if in.Pairs != nil {
		if len(in.Pairs) == 0 {
			return nil, invalid("Credential Pairs cannot be empty.")
		}
		var err error
		if newPairs, err = normalizePairs(in.Pairs); err != nil {
			return nil, err
		}
	}
	var metadata map[string]string
	if in.Metadata != nil {
		var err error
		if metadata, err = normalizeMetadata(in.Metadata); err != nil {
			return nil, err
		}
	}
	if in.Name != nil {
		if err := checkName(*in.Name); err != nil {
			return nil, err
		}
	}
	var tags []string
	if in.TagsSet {
		var err error
		if tags, err = normalizeTags(in.Tags); err != nil {
			return nil, err
		}
	}
	for attempt := range writeAttempts {
		cur, err := s.currentCredential(ctx, id)
		if err != nil {
			return nil, err
		}
		oldPairs, err := s.barrier.open(ctx, cur.ID, cur.SealedPairs, cur.WrappedKey)
		if err != nil {
			return nil, err
		}
		next := *cur
		pairs := oldPairs
		if newPairs != nil {
			pairs = newPairs
		}
		if in.Name != nil {
			next.Name = *in.Name
		}
		if metadata != nil {
			next.Metadata = metadata
		}
		if in.Enabled != nil {
			next.Enabled = *in.Enabled
		}
		if in.Documentation != nil {
			doc := *in.Documentation
			next.Documentation = &doc
		}
		if in.TagsSet {
			next.Tags = tags
		}
		if s.cfg.EnforceDocumentation && !in.Restoring && (next.Documentation == nil || strings.TrimSpace(*next.Documentation) == "") {
			return nil, invalid("documentation is a required field")
		}
		now := s.now()
		if !maps.Equal(pairs, oldPairs) {
			next.LastRotationDate = &now
		}
		next.Keys = sortedKeys(pairs)
		if err := s.checkCredentialConflicts(ctx, id, next.Keys); err != nil {
			return nil, err
		}
		if next.SealedPairs, next.WrappedKey, err = s.barrier.seal(ctx, id, pairs); err != nil {
			return nil, err
		}
		next.Revision, next.ModifiedDate, next.ModifiedBy = cur.Revision+1, now, p.Name
		err = s.store.PutCredential(ctx, &next, cur.Revision)
		if errors.Is(err, ErrRevisionConflict) {
			if err := conflictPause(ctx, attempt); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		s.auditLog(ctx, "update", ResourceCredential, id, next.Revision)
		s.notifyCredential(ctx, id)
		return s.view(&next, pairs, allPermissions(ActionMetadata, ActionGet, ActionUpdate)), nil
	}
	return nil, errBusy
}

// RevertCredential writes a new revision with the content of revision toRevision.
func (s *Service) RevertCredential(ctx context.Context, id string, toRevision int32) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceCredential, ActionRevert, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to revert credential %s", p.Name, id), reference: id}
	}
	for attempt := range writeAttempts {
		cur, err := s.currentCredential(ctx, id)
		if err != nil {
			return nil, err
		}
		target, err := s.credentialRevision(ctx, id, toRevision)
		if err != nil {
			return nil, err
		}
		curPairs, err := s.barrier.open(ctx, id, cur.SealedPairs, cur.WrappedKey)
		if err != nil {
			return nil, err
		}
		targetPairs, err := s.barrier.open(ctx, id, target.SealedPairs, target.WrappedKey)
		if err != nil {
			return nil, err
		}
		if sameCredentialContent(cur, target) && maps.Equal(curPairs, targetPairs) {
			return nil, invalid("No difference between old and new credential.")
		}
		if err := s.checkCredentialConflicts(ctx, id, target.Keys); err != nil {
			return nil, err
		}
		next := *target
		if next.SealedPairs, next.WrappedKey, err = s.barrier.seal(ctx, id, targetPairs); err != nil {
			return nil, err
		}
		next.Revision, next.ModifiedDate, next.ModifiedBy = cur.Revision+1, s.now(), p.Name
		next.LastDecryptedDate = cur.LastDecryptedDate
		err = s.store.PutCredential(ctx, &next, cur.Revision)
		if errors.Is(err, ErrRevisionConflict) {
			if err := conflictPause(ctx, attempt); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		s.auditLog(ctx, "revert", ResourceCredential, id, next.Revision)
		s.notifyCredential(ctx, id)
		return s.view(&next, nil, nil), nil
	}
	return nil, errBusy
}

func sameCredentialContent(a, b *CredentialRecord) bool {
	return a.Name == b.Name && a.Enabled == b.Enabled && maps.Equal(a.Metadata, b.Metadata) &&
		ptrEqual(a.Documentation, b.Documentation) && sameSet(a.Tags, b.Tags)
}

func ptrEqual[T comparable](a, b *T) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// DiffCredential compares two revisions; values are compared but never disclosed.
func (s *Service) DiffCredential(ctx context.Context, id string, oldRevision, newRevision int32) (*CredentialDiff, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionMetadata, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s", p.Name, id), reference: id}
	}
	if err := checkID("credential", id); err != nil {
		return nil, err
	}
	if oldRevision > newRevision {
		oldRevision, newRevision = newRevision, oldRevision
	}
	older, err := s.credentialRevision(ctx, id, oldRevision)
	if err != nil {
		return nil, err
	}
	newer, err := s.credentialRevision(ctx, id, newRevision)
	if err != nil {
		return nil, err
	}
	d := &CredentialDiff{}
	if oldRevision == newRevision {
		return d, nil
	}
	oldPairs, err := s.barrier.open(ctx, id, older.SealedPairs, older.WrappedKey)
	if err != nil {
		return nil, err
	}
	newPairs, err := s.barrier.open(ctx, id, newer.SealedPairs, newer.WrappedKey)
	if err != nil {
		return nil, err
	}
	if older.Name != newer.Name {
		d.Name = &FieldDiff{Added: newer.Name, Removed: older.Name}
	}
	if older.Enabled != newer.Enabled {
		d.Enabled = &FieldDiff{Added: newer.Enabled, Removed: older.Enabled}
	}
	if !ptrEqual(older.Documentation, newer.Documentation) {
		d.Documentation = &FieldDiff{Added: strOrNil(newer.Documentation), Removed: strOrNil(older.Documentation)}
	}
	if !timePtrEqual(older.LastRotationDate, newer.LastRotationDate) {
		d.LastRotationDate = &FieldDiff{Added: timeOrNil(newer.LastRotationDate), Removed: timeOrNil(older.LastRotationDate)}
	}
	d.Pairs = keyDiff(oldPairs, newPairs)
	d.Metadata = keyDiff(older.Metadata, newer.Metadata)
	if !sameSet(older.Tags, newer.Tags) {
		d.Tags = setDiff(older.Tags, newer.Tags)
	}
	d.ModifiedBy = &FieldDiff{Added: newer.ModifiedBy, Removed: older.ModifiedBy}
	d.ModifiedDate = &FieldDiff{Added: FormatTime(newer.ModifiedDate), Removed: FormatTime(older.ModifiedDate)}
	return d, nil
}

func strOrNil(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func timeOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return FormatTime(*t)
}

func timePtrEqual(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}

// keyDiff lists keys added, removed, and changed (in both lists), as Confidant's diff does; nil when
// nothing differs.
func keyDiff(older, newer map[string]string) *KeysDiff {
	d := &KeysDiff{Added: []string{}, Removed: []string{}}
	for k, v := range newer {
		if ov, ok := older[k]; !ok {
			d.Added = append(d.Added, k)
		} else if ov != v {
			d.Added = append(d.Added, k)
			d.Removed = append(d.Removed, k)
		}
	}
	for k := range older {
		if _, ok := newer[k]; !ok {
			d.Removed = append(d.Removed, k)
		}
	}
	if len(d.Added) == 0 && len(d.Removed) == 0 {
		return nil
	}
	slices.Sort(d.Added)
	slices.Sort(d.Removed)
	return d
}

// setDiff lists the members only in newer (added) and only in older (removed).
func setDiff(older, newer []string) *KeysDiff {
	d := &KeysDiff{Added: []string{}, Removed: []string{}}
	for _, v := range newer {
		if !slices.Contains(older, v) && !slices.Contains(d.Added, v) {
			d.Added = append(d.Added, v)
		}
	}
	for _, v := range older {
		if !slices.Contains(newer, v) && !slices.Contains(d.Removed, v) {
			d.Removed = append(d.Removed, v)
		}
	}
	slices.Sort(d.Added)
	slices.Sort(d.Removed)
	return d
}

// CredentialServices lists the ids of the services mapping a credential.
func (s *Service) CredentialServices(ctx context.Context, id string) ([]string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionMetadata, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s", p.Name, id), reference: id}
	}
	if err := checkID("credential", id); err != nil {
		return nil, err
	}
	return s.store.CredentialServices(ctx, id)
}

// ArchiveCredential moves a disabled, unmapped credential to the archive; a dry run unless force.
func (s *Service) ArchiveCredential(ctx context.Context, id string, force bool) (string, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return "", err
	}
	if !s.allowed(ctx, ResourceCredential, ActionArchive, id, nil) {
		return "", &deniedError{msg: fmt.Sprintf("%s does not have access to archive credential %s", p.Name, id), reference: id}
	}
	for attempt := range writeAttempts {
		cur, err := s.currentCredential(ctx, id)
		if err != nil {
			return "", err
		}
		if cur.Enabled {
			return "", invalid("Credential still enabled")
		}
		services, err := s.store.CredentialServices(ctx, id)
		if err != nil {
			return "", err
		}
		if len(services) > 0 {
			return "", invalid("Credential has mapped services")
		}
		if !force {
			s.auditLog(ctx, "archive-dry-run", ResourceCredential, id, cur.Revision)
			return "dry-run success", nil
		}
		err = s.store.ArchiveCredential(ctx, id, cur.Revision, s.now())
		switch {
		case errors.Is(err, ErrRevisionConflict):
			if err := conflictPause(ctx, attempt); err != nil {
				return "", err
			}
			continue
		case errors.Is(err, ErrStillMapped):
			return "", invalid("Credential has mapped services")
		case err != nil:
			return "", err
		}
		s.auditLog(ctx, "archive", ResourceCredential, id, cur.Revision)
		return "success", nil
	}
	return "", errBusy
}

// ListArchivedCredentials lists every history revision of every credential.
func (s *Service) ListArchivedCredentials(ctx context.Context, limit *int32, token string) ([]*CredentialView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionList, "", nil) {
		return nil, "", &deniedError{msg: p.Name + " does not have access to list credentials"}
	}
	page, err := s.page(limit, token, s.cfg.HistoryPageLimit)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListAllCredentialRevisions(ctx, page)
	return s.views(recs), next, err
}

// ListCredentialRevisions lists the revisions of one credential, oldest first.
func (s *Service) ListCredentialRevisions(ctx context.Context, id string, limit *int32, token string) ([]*CredentialView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionMetadata, id, nil) {
		return nil, "", &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s revisions", p.Name, id)}
	}
	if err := checkID("credential", id); err != nil {
		return nil, "", err
	}
	page, err := s.page(limit, token, s.cfg.HistoryPageLimit)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListCredentialRevisions(ctx, id, page)
	if errors.Is(err, ErrNotFound) {
		return nil, "", &notFoundError{msg: "Credential not found."}
	}
	return s.views(recs), next, err
}

// checkCredentialConflicts refuses keys that another credential mapped to the same service also has.
func (s *Service) checkCredentialConflicts(ctx context.Context, id string, keys []string) error {
	if s.cfg.IgnoreConflicts {
		return nil
	}
	services, err := s.store.CredentialServices(ctx, id)
	if err != nil {
		return err
	}
	conflicts := map[string]map[string][]string{}
	others := map[string]*CredentialRecord{}
	for _, svcID := range services {
		svc, err := s.store.GetService(ctx, svcID)
		if errors.Is(err, ErrNotFound) {
			continue
		} else if err != nil {
			return err
		}
		for _, otherID := range svc.Credentials {
			if otherID == id {
				continue
			}
			other, ok := others[otherID]
			if !ok {
				if other, err = s.store.GetCredential(ctx, otherID); errors.Is(err, ErrNotFound) {
					continue
				} else if err != nil {
					return err
				}
				others[otherID] = other
			}
			for _, k := range keys {
				if slices.Contains(other.Keys, k) {
					c := conflicts[k]
					if c == nil {
						c = map[string][]string{"credentials": {}, "services": {}}
						conflicts[k] = c
					}
					c["credentials"] = appendUnique(c["credentials"], otherID)
					c["services"] = appendUnique(c["services"], svcID)
				}
			}
		}
	}
	if len(conflicts) > 0 {
		return &conflictError{conflicts: conflicts}
	}
	return nil
}

func appendUnique(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	list = append(list, v)
	slices.Sort(list)
	return list
}

func (s *Service) notifyCredential(ctx context.Context, id string) {
	services, err := s.store.CredentialServices(ctx, id)
	if err != nil || len(services) == 0 {
		return
	}
	s.hooks.send(webhookEvent{EventType: eventCredentialUpdate, Services: services, Credentials: []string{id}})
}

// ---- services -------------------------------------------------------------------------------------

func (s *Service) currentService(ctx context.Context, id string) (*ServiceRecord, error) {
	if err := checkID("service", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetService(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, &notFoundError{msg: "Service not found."}
	}
	return rec, err
}

// GetService returns a service with its mapped credentials expanded; their pairs unless metadataOnly.
func (s *Service) GetService(ctx context.Context, id string, metadataOnly bool) (*ServiceView, error) {
	p := PrincipalFrom(ctx)
	action := ActionGet
	if metadataOnly {
		action = ActionMetadata
	}
	if !s.allowed(ctx, ResourceService, action, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to get service %s", p.Name, id), reference: id}
	}
	rec, err := s.currentService(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.Account != nil && p.AuthType == "kms" && p.Account != *rec.Account {
		return nil, errAccountMismatch
	}
	view := &ServiceView{Record: rec, Permissions: map[string]bool{
		ActionMetadata: s.allowed(ctx, ResourceService, ActionMetadata, id, nil),
		ActionGet:      s.allowed(ctx, ResourceService, ActionGet, id, nil),
		ActionUpdate:   s.allowed(ctx, ResourceService, ActionUpdate, id, map[string]any{"credential_ids": rec.Credentials}),
	}}
	if view.Credentials, err = s.expandCredentials(ctx, rec.Credentials, !metadataOnly); err != nil {
		return nil, err
	}
	if !metadataOnly {
		s.auditLog(ctx, "get", ResourceService, id, rec.Revision)
	}
	return view, nil
}

// expandCredentials loads mapped credentials (disabled ones included, vanished ones skipped), with
// decrypted pairs when decrypt is set.
func (s *Service) expandCredentials(ctx context.Context, ids []string, decrypt bool) ([]*CredentialView, error) {
	out := []*CredentialView{}
	for _, id := range ids {
		rec, err := s.store.GetCredential(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		} else if err != nil {
			return nil, err
		}
		var pairs map[string]string
		if decrypt {
			if pairs, err = s.barrier.open(ctx, rec.ID, rec.SealedPairs, rec.WrappedKey); err != nil {
				return nil, err
			}
		}
		out = append(out, s.view(rec, pairs, nil))
	}
	return out, nil
}

// ListServices lists current services.
func (s *Service) ListServices(ctx context.Context, limit *int32, token string) ([]*ServiceView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionList, "", nil) {
		return nil, "", &deniedError{msg: p.Name + " does not have access to list services"}
	}
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListServices(ctx, page)
	return serviceViews(recs), next, err
}

func serviceViews(recs []*ServiceRecord) []*ServiceView {
	out := make([]*ServiceView, len(recs))
	for i, r := range recs {
		out[i] = &ServiceView{Record: r, Credentials: []*CredentialView{}, Permissions: map[string]bool{}}
	}
	return out
}

func dedupe(ids []string) []string {
	out := []string{}
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// PutService creates a service or writes a new revision of its mapping.
func (s *Service) PutService(ctx context.Context, id string, in ServiceInput) (*ServiceView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if err := checkID("service", id); err != nil {
		return nil, err
	}
	credentialIDs, blindIDs := dedupe(in.Credentials), dedupe(in.BlindCredentials)
	for _, c := range append(slices.Clone(credentialIDs), blindIDs...) {
		if err := checkID("credential", c); err != nil {
			return nil, err
		}
	}
	var account *string
	if in.Account != nil && *in.Account != "" {
		if !slices.Contains(slices.Collect(maps.Values(s.cfg.ScopedAuthKeys)), *in.Account) {
			return nil, invalid("%s is not a valid account.", *in.Account)
		}
		a := *in.Account
		account = &a
	}
	for attempt := range writeAttempts {
		cur, err := s.store.GetService(ctx, id)
		isNew := errors.Is(err, ErrNotFound)
		if err != nil && !isNew {
			return nil, err
		}
		if isNew && !s.allowed(ctx, ResourceService, ActionCreate, id, nil) {
			return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to create service %s", p.Name, id), reference: id}
		}
		var previous []string
		var prevRevision int32
		if !isNew {
			previous, prevRevision = cur.Credentials, cur.Revision
		}
		added := []string{}
		for _, c := range credentialIDs {
			if !slices.Contains(previous, c) {
				added = append(added, c)
			}
		}
		if !s.allowed(ctx, ResourceService, ActionUpdate, id, map[string]any{"credential_ids": credentialIDs, "new_credential_ids": added}) {
			return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to map the credentials because they do not own the credentials being added", p.Name), reference: id}
		}
		creds, err := s.loadCredentials(ctx, credentialIDs)
		if err != nil {
			return nil, err
		}
		if err := s.checkServiceConflicts(creds); err != nil {
			return nil, err
		}
		rec := &ServiceRecord{
			ID: id, Revision: prevRevision + 1, Enabled: in.Enabled == nil || *in.Enabled, Account: account,
			Credentials: credentialIDs, BlindCredentials: blindIDs, ModifiedDate: s.now(), ModifiedBy: p.Name,
		}
		err = s.store.PutService(ctx, rec, prevRevision)
		if errors.Is(err, ErrRevisionConflict) {
			if err := conflictPause(ctx, attempt); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		s.auditLog(ctx, "update", ResourceService, id, rec.Revision)
		if isNew {
			s.grantNewService(ctx, id)
		}
		s.hooks.send(webhookEvent{EventType: eventServiceUpdate, Services: []string{id}, Credentials: credentialIDs})
		views := make([]*CredentialView, len(creds))
		for i, c := range creds {
			views[i] = s.view(c, nil, nil)
		}
		return &ServiceView{Record: rec, Credentials: views, Permissions: allPermissions(ActionCreate, ActionMetadata, ActionGet, ActionUpdate)}, nil
	}
	return nil, errBusy
}

// loadCredentials returns the current records of ids, or an error naming every unknown id.
func (s *Service) loadCredentials(ctx context.Context, ids []string) ([]*CredentialRecord, error) {
	out := make([]*CredentialRecord, 0, len(ids))
	var unknown []string
	for _, id := range ids {
		rec, err := s.store.GetCredential(ctx, id)
		if errors.Is(err, ErrNotFound) {
			unknown = append(unknown, id)
			continue
		} else if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, &UnknownCredentialsError{IDs: unknown}
	}
	return out, nil
}

// checkServiceConflicts refuses a mapping in which two credentials expose the same key.
func (s *Service) checkServiceConflicts(creds []*CredentialRecord) error {
	if s.cfg.IgnoreConflicts {
		return nil
	}
	owners := map[string][]string{}
	for _, c := range creds {
		for _, k := range c.Keys {
			owners[k] = append(owners[k], c.ID)
		}
	}
	conflicts := map[string]map[string][]string{}
	for k, ids := range owners {
		if len(ids) > 1 {
			slices.Sort(ids)
			conflicts[k] = map[string][]string{"credentials": ids, "blind_credentials": {}}
		}
	}
	if len(conflicts) > 0 {
		return &conflictError{conflicts: conflicts}
	}
	return nil
}

// RevertService writes a new revision with the mapping of revision toRevision.
func (s *Service) RevertService(ctx context.Context, id string, toRevision int32) (*ServiceView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceService, ActionRevert, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to revert service %s", p.Name, id), reference: id}
	}
	for attempt := range writeAttempts {
		cur, err := s.currentService(ctx, id)
		if err != nil {
			return nil, err
		}
		target, err := s.store.GetServiceRevision(ctx, id, toRevision)
		if errors.Is(err, ErrNotFound) {
			return nil, &notFoundError{msg: fmt.Sprintf("Revision %d of service %s not found.", toRevision, id)}
		} else if err != nil {
			return nil, err
		}
		// Credentials archived since that revision cannot come back; keep the ones that still exist.
		var creds []*CredentialRecord
		var ids []string
		for _, cid := range target.Credentials {
			rec, err := s.store.GetCredential(ctx, cid)
			if errors.Is(err, ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
			creds, ids = append(creds, rec), append(ids, cid)
		}
		if sameSet(ids, cur.Credentials) && sameSet(target.BlindCredentials, cur.BlindCredentials) &&
			ptrEqual(target.Account, cur.Account) && target.Enabled == cur.Enabled {
			return nil, invalid("No difference between old and new service.")
		}
		if err := s.checkServiceConflicts(creds); err != nil {
			return nil, err
		}
		rec := &ServiceRecord{
			ID: id, Revision: cur.Revision + 1, Enabled: target.Enabled, Account: target.Account,
			Credentials: ids, BlindCredentials: slices.Clone(target.BlindCredentials), ModifiedDate: s.now(), ModifiedBy: p.Name,
		}
		err = s.store.PutService(ctx, rec, cur.Revision)
		if errors.Is(err, ErrRevisionConflict) {
			if err := conflictPause(ctx, attempt); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		s.auditLog(ctx, "revert", ResourceService, id, rec.Revision)
		s.hooks.send(webhookEvent{EventType: eventServiceUpdate, Services: []string{id}, Credentials: ids})
		views := make([]*CredentialView, len(creds))
		for i, c := range creds {
			views[i] = s.view(c, nil, nil)
		}
		return &ServiceView{Record: rec, Credentials: views, Permissions: map[string]bool{}}, nil
	}
	return nil, errBusy
}

// DiffService compares two revisions of a service.
func (s *Service) DiffService(ctx context.Context, id string, oldRevision, newRevision int32) (*ServiceDiff, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionMetadata, id, nil) {
		return nil, &deniedError{msg: fmt.Sprintf("%s does not have access to service %s", p.Name, id), reference: id}
	}
	if err := checkID("service", id); err != nil {
		return nil, err
	}
	if oldRevision > newRevision {
		oldRevision, newRevision = newRevision, oldRevision
	}
	get := func(rev int32) (*ServiceRecord, error) {
		rec, err := s.store.GetServiceRevision(ctx, id, rev)
		if errors.Is(err, ErrNotFound) {
			return nil, &notFoundError{msg: fmt.Sprintf("Revision %d of service %s not found.", rev, id)}
		}
		return rec, err
	}
	older, err := get(oldRevision)
	if err != nil {
		return nil, err
	}
	newer, err := get(newRevision)
	if err != nil {
		return nil, err
	}
	d := &ServiceDiff{}
	if oldRevision == newRevision {
		return d, nil
	}
	if older.Enabled != newer.Enabled {
		d.Enabled = &FieldDiff{Added: newer.Enabled, Removed: older.Enabled}
	}
	if !ptrEqual(older.Account, newer.Account) {
		d.Account = &FieldDiff{Added: strOrNil(newer.Account), Removed: strOrNil(older.Account)}
	}
	if !sameSet(older.Credentials, newer.Credentials) {
		d.Credentials = setDiff(older.Credentials, newer.Credentials)
	}
	if !sameSet(older.BlindCredentials, newer.BlindCredentials) {
		d.BlindCredentials = setDiff(older.BlindCredentials, newer.BlindCredentials)
	}
	d.ModifiedBy = &FieldDiff{Added: newer.ModifiedBy, Removed: older.ModifiedBy}
	d.ModifiedDate = &FieldDiff{Added: FormatTime(newer.ModifiedDate), Removed: FormatTime(older.ModifiedDate)}
	return d, nil
}

// ListArchivedServices lists every history revision of every service.
func (s *Service) ListArchivedServices(ctx context.Context, limit *int32, token string) ([]*ServiceView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionList, "", nil) {
		return nil, "", &deniedError{msg: p.Name + " does not have access to list services"}
	}
	page, err := s.page(limit, token, s.cfg.HistoryPageLimit)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListAllServiceRevisions(ctx, page)
	return serviceViews(recs), next, err
}

// ListServiceRevisions lists the revisions of one service, oldest first.
func (s *Service) ListServiceRevisions(ctx context.Context, id string, limit *int32, token string) ([]*ServiceView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionMetadata, id, nil) {
		return nil, "", &deniedError{msg: fmt.Sprintf("%s does not have access to service %s revisions", p.Name, id)}
	}
	if err := checkID("service", id); err != nil {
		return nil, "", err
	}
	page, err := s.page(limit, token, s.cfg.HistoryPageLimit)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListServiceRevisions(ctx, id, page)
	if errors.Is(err, ErrNotFound) {
		return nil, "", &notFoundError{msg: "Service not found."}
	}
	return serviceViews(recs), next, err
}

// ---- misc -------------------------------------------------------------------------------------------

// ClientConfig is what GET /v1/client_config reports.
type ClientConfig struct {
	Defined             map[string]any
	KMSAuthManageGrants bool
	Accounts            []string
	XSRFCookieName      string
	MaintenanceMode     bool
	HistoryPageLimit    int
	DefinedTags         []string
	CredentialsList     bool
	CredentialsCreate   bool
	ServicesList        bool
	ServicesCreate      bool
}

// GetClientConfig returns the client bootstrap configuration for the caller.
func (s *Service) GetClientConfig(ctx context.Context) *ClientConfig {
	tags := slices.Clone(s.cfg.TagsExcludingRotation)
	for t := range s.cfg.RotationDaysConfig {
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	slices.Sort(tags)
	accounts := slices.Sorted(maps.Values(s.cfg.ScopedAuthKeys))
	return &ClientConfig{
		Defined:             s.cfg.ClientConfig,
		KMSAuthManageGrants: s.cfg.KMSAuthManageGrants,
		Accounts:            accounts,
		XSRFCookieName:      s.cfg.XSRFCookieName,
		MaintenanceMode:     s.maintenance(),
		HistoryPageLimit:    s.cfg.HistoryPageLimit,
		DefinedTags:         tags,
		CredentialsList:     s.allowed(ctx, ResourceCredential, ActionList, "", nil),
		CredentialsCreate:   s.allowed(ctx, ResourceCredential, ActionCreate, "", nil),
		ServicesList:        s.allowed(ctx, ResourceService, ActionList, "", nil),
		ServicesCreate:      s.allowed(ctx, ResourceService, ActionCreate, "", nil),
	}
}

// GenerateValue returns GeneratedValueLength random characters from [A-Za-z0-9]: Confidant's recipe of
// URL-safe base64 over KMS randomness with every non-alphanumeric character removed.
func (s *Service) GenerateValue(ctx context.Context) (string, error) {
	var b strings.Builder
	for b.Len() < GeneratedValueLength {
		raw, err := s.kms.GenerateRandom(ctx, 128)
		if err != nil {
			return "", kmsError(ctx, "generate random", err)
		}
		for _, c := range base64.URLEncoding.EncodeToString(raw) {
			if b.Len() == GeneratedValueLength {
				break
			}
			if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
				b.WriteRune(c)
			}
		}
	}
	return b.String(), nil
}

// FormatTime renders a time as Confidant does: ISO 8601 in UTC with an explicit offset, microseconds
// only when non-zero (Python's isoformat).
func FormatTime(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond()/1000 == 0 {
		return t.Format("2006-01-02T15:04:05") + "+00:00"
	}
	return t.Format("2006-01-02T15:04:05.000000") + "+00:00"
}
