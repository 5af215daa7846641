package secrets

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/iamroles"
	"github.com/gantry-dev/gantry/pkg/jwtkeys"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/loginlink"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/pkg/workload"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// GeneratedValueLength is the length of a value from GenerateValue, as in Confidant.
const GeneratedValueLength = 50

// maxPageLimit caps a client's limit so one request cannot ask for an unbounded page.
const maxPageLimit = 10000

// Deps are the collaborators of a Service.
type Deps struct {
	Store  store.Store
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
	// Audit is the audit trail; nil keeps no trail (tests of other concerns).
	Audit *audit.Sink
	// WorkloadCerts verifies services' client certificates (NewWorkloadCertVerifier); nil refuses them.
	WorkloadCerts *workload.CertVerifier
	// Stats receives the service's statistics (metrics.go); nil keeps none.
	Stats *stats.Store
}

// Service holds the secrets domain logic: validation, revisions, envelope encryption, access control,
// conflicts, events. It knows neither gRPC nor the storage engine.
type Service struct {
	login loginModules
	// links redeems `gantry login` links; nil unless USER_AUTH_MODULE is null.
	links  *loginlink.Redeemer
	grants kms.GrantManager
	roles  iamroles.Lister
	auth   *authenticator
	jwt    *jwtkeys.Store
	certs  *certificates
	cfg    Config
	store  store.Store
	kms    kms.Provider
	// versions tells key versions apart (the local keyring), for rewrap; nil with AWS KMS.
	versions kms.KeyVersioner
	// reloader is deps.KMS before instrumentation, for ReloadKeys.
	reloader kms.Provider
	// sealed tracks the per-version gauges of ScanSealed.
	sealed  sealedGauges
	barrier *barrier
	acl     ACL
	hooks   *webhooks
	logger  *zap.Logger
	audit   *audit.Sink
	now     func() time.Time
	// writes is the per-principal write rate limit; nil when it is off.
	writes *writeLimiter
	// recordLocks lines up the writers of one record on this replica (see writeRecord).
	recordLocks recordLocks
	// rawStore is deps.Store before instrumentation, for Store.
	rawStore store.Store
	// stats is deps.Stats; nil keeps none.
	stats *stats.Store
	// replicas is the store's registry of running replicas (etcd), nil without one (keyuse.go).
	replicas store.ReplicaRegistry
	// presence is this replica's name in it.
	presence presence
	// approvals is the approval policy (approvals.go); nil: every write applies at once.
	approvals *approvalPolicy
	// reminders caches the due list of rotation reminders (changes_slack.go).
	reminders reminderScan
}

// NewService returns a service over deps, resolving the authentication keys through the KMS. Call
// Close to flush pending webhooks.
func NewService(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	logger := deps.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	rawStore := deps.Store
	replicas, _ := rawStore.(store.ReplicaRegistry)
	rawKMS := deps.KMS
	versions, _ := rawKMS.(kms.KeyVersioner)
	if deps.Stats != nil {
		// At zero from the start, so rates and ratios have both sides before the first refusal.
		deps.Stats.Counter(statAuthzDenied)
		deps.Stats.Counter(statWriteRateRefused)
		if versions != nil {
			deps.Stats.Gauge(statSealedNotActive)
		}
		if deps.Store != nil {
			deps.Store = instrumentStore(deps.Store, deps.Stats)
		}
		if deps.KMS != nil {
			deps.KMS = instrumentKMS(deps.KMS, deps.Stats)
		}
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
	approvals, err := loadApprovalPolicy(cfg.ACLPolicyFile)
	if err != nil {
		return nil, err
	}
	auth, err := newAuthenticator(ctx, cfg, deps.KMS)
	if err != nil {
		return nil, err
	}
	auth.serviceAllowed = deps.ServiceAllowed
	auth.certs = deps.WorkloadCerts
	if auth.certs != nil {
		certs.workloadCA, certs.trustDomain = cfg.Auth.WorkloadCertCA, auth.certs.TrustDomain()
	}
	if deps.Store != nil {
		auth.sessionEnded = func(ctx context.Context, id string) (bool, error) {
			return deps.Store.LoginNonceClaimed(ctx, endedSessionKey(id))
		}
	}
	login, err := newLoginModules(ctx, cfg.Auth, logger)
	if err != nil {
		return nil, err
	}
	var links *loginlink.Redeemer
	// Login links need a session key that is not the empty string anyone could sign with.
	if cfg.Auth.UseAuth && cfg.Auth.UserAuthModule == "null" && cfg.Auth.SessionSecret != "" {
		if links, err = loginlink.NewRedeemer(ctx, deps.KMS, cfg.Auth.UserAuthKey, cfg.Auth.AuthContext, deps.Store); err != nil {
			return nil, err
		}
		auth.linkSessions = true
	}
	return &Service{
		approvals: approvals,
		links:     links,
		login:     login,
		grants:    deps.Grants,
		roles:     deps.Roles,
		auth:      auth,
		jwt:       deps.JWTKeys,
		certs:     certs,
		cfg:       cfg,
		store:     deps.Store,
		kms:       deps.KMS,
		versions:  versions,
		reloader:  rawKMS,
		barrier:   newBarrier(deps.KMS, cfg.KMSMasterKey, cfg.DataKeyCacheSize),
		acl:       acl,
		hooks: newWebhooks(webhookConfig{URL: cfg.WebhookURL, Username: cfg.WebhookUsername, Password: cfg.WebhookPassword},
			logger.Named("webhook")),
		logger:   logger,
		audit:    auditSink(deps.Audit),
		now:      func() time.Time { return time.Now().UTC() },
		writes:   newWriteLimiter(cfg.Limits.WriteRate, cfg.Limits.WriteBurst, maxRateLimitedPrincipals, time.Now, cfg.Limits.WritePrincipals),
		rawStore: rawStore,
		stats:    deps.Stats,
		replicas: replicas,
	}, nil
}

// ProbeStore tells whether the store can serve now (see Store.Probe); it drives the gRPC health.
func (s *Service) ProbeStore(ctx context.Context) error { return s.store.Probe(ctx) }

// Close stops the webhook worker after the queued events were attempted.
func (s *Service) Close() { s.hooks.close() }

// Store returns the service's store, for the process that wires it (fault injection in tests).
func (s *Service) Store() store.Store { return s.rawStore }

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
	// Expect is the revision an update expects to replace (If-Match); 0 for none.
	Expect ExpectedRevision
	// Intent is what the writer says for an approval rule (reason, break glass).
	Intent ChangeIntent
}

// CredentialView is a credential as a response shows it.
type CredentialView struct {
	Record *store.CredentialRecord
	// Pairs are the decrypted values, nil when not returned.
	Pairs        credpair.Map
	Permissions  map[string]bool
	NextRotation *time.Time
}

// ServiceInput is the body of a service write.
type ServiceInput struct {
	Credentials      []string
	BlindCredentials []string
	Enabled          *bool
	Account          *string
	// Expect is the revision the write expects to replace (If-Match); 0 for none.
	Expect ExpectedRevision
	// Fields, when not nil, are the fields the write sets ("credentials", "blind_credentials",
	// "enabled", "account"); the others keep the current revision's values (the defaults for a new
	// service). nil sets every field.
	Fields map[string]bool
	// Intent is what the writer says for an approval rule (reason, break glass).
	Intent ChangeIntent
}

// sets reports whether the write sets field.
func (in ServiceInput) sets(field string) bool { return in.Fields == nil || in.Fields[field] }

// ServiceView is a service as a response shows it.
type ServiceView struct {
	Record      *store.ServiceRecord
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
func normalizePairs(in map[string]any) (credpair.Map, error) {
	out := make(credpair.Map, len(in))
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
		pv, err := credpair.FromAny(v)
		switch {
		case errors.Is(err, credpair.ErrNotScalar):
			return nil, invalid("credential pairs must be key: value")
		case err != nil:
			// Never the value itself: only its key and what is wrong with it.
			return nil, invalid("credential pair %q: %v; send it as a string to keep every digit", key, err)
		}
		out[key] = pv
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
	// A control character (a NUL, a newline) in a name is never meant and breaks logs and listings.
	if strings.ContainsFunc(name, unicode.IsControl) {
		return invalid("name must not contain control characters")
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

func (s *Service) page(limit *int32, token string, defaultLimit int) (store.Page, error) {
	p := store.Page{Token: token, Limit: defaultLimit}
	if limit != nil {
		if *limit < 1 {
			return store.Page{}, invalid("limit must be a positive integer")
		}
		p.Limit = min(int(*limit), maxPageLimit)
	}
	return p, nil
}

// nextRotation computes next_rotation_date (never stored): null when a tag excludes rotation or the
// feature is off (MAXIMUM_ROTATION_DAYS 0 and no ROTATION_DAYS_CONFIG tag applies); "now" for records
// without a rotation date; the last decryption when someone saw the values after the last rotation;
// else the last rotation plus the smallest applicable number of days.
func (s *Service) nextRotation(rec *store.CredentialRecord) *time.Time {
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

func (s *Service) view(rec *store.CredentialRecord, pairs credpair.Map, perms map[string]bool) *CredentialView {
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

// auditSink is the trail of a service: deps' or, when none was given, one that keeps nothing.
func auditSink(sink *audit.Sink) *audit.Sink {
	if sink == nil {
		return audit.Discard()
	}
	return sink
}

// auditLog records that the principal of ctx did action on a resource: a committed write (whose
// pending record the transport wrote before it, see Server.authInterceptor) or a read. It cannot
// undo what was done, so a trail that fails here is only on the error log (the sink logs it).
func (s *Service) auditLog(ctx context.Context, action, resource, id string, revision int32) {
	call := audit.CallFrom(ctx)
	r := principalRecord(call.Record(audit.Allowed), PrincipalFrom(ctx))
	r.Action, r.Resource, r.ResourceID, r.Revision = action, resource, id, revision
	if a := applyingFrom(ctx); a != nil {
		// The write of an approved change: the requester wrote it, these approved it.
		r.ChangeRequest, r.Requester, r.Approvers = a.requestID, principalString(PrincipalFrom(ctx)), a.approvedBy
	}
	_ = s.audit.Write(r)
	call.Conclude()
}

// auditDisclosure records that the principal of ctx is being given secret material (a credential's
// or a service's values, a JWT, a certificate's private key), before it is: when no audit sink can
// take the record the disclosure is refused (503, errAuditDisclosure) unless the operator chose
// -audit-reads-when-down. Vault refuses every request it cannot audit; for a secrets manager the
// unrecorded event that matters most is a disclosure.
func (s *Service) auditDisclosure(ctx context.Context, action, resource, id string, revision int32) error {
	call := audit.CallFrom(ctx)
	r := principalRecord(call.Record(audit.Allowed), PrincipalFrom(ctx))
	r.Action, r.Resource, r.ResourceID, r.Revision = action, resource, id, revision
	err := s.audit.Write(r)
	call.Conclude()
	if err != nil && !s.audit.ReadsWhenDown() {
		return errAuditDisclosure
	}
	return nil
}

// errAuditDisclosure refuses a read of secret values while no audit sink can be written (toStatus:
// 503, the audit dependency).
var errAuditDisclosure = errors.New("the audit trail cannot be written: secret values are not given out until it can (-audit-reads-when-down changes that)")

// deny records a refusal of an authenticated principal (by the ACL, or a kmsauth key scoped to another
// account) on the audit trail and returns refusal. Called once, where the refusal is decided, so a
// probe of what a principal may reach leaves a trail. The record says who asked for what, and why,
// in the server's words: never a value or a token. A refusal stands even when the trail is down.
func (s *Service) deny(ctx context.Context, resourceType, action, resourceID string, refusal error) error {
	call := audit.CallFrom(ctx)
	r := principalRecord(call.Record(audit.Denied), PrincipalFrom(ctx))
	r.Action, r.Resource, r.ResourceID = action, resourceType, resourceID
	r.Code, r.Reason = statusCodeName(refusal), refusal.Error()
	_ = s.audit.Write(r)
	call.Conclude()
	return refusal
}

// principalRecord fills in who r is about.
func principalRecord(r audit.Record, p Principal) audit.Record {
	r.Principal, r.PrincipalType, r.AuthType = p.Name, p.Type, p.AuthType
	return r
}

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
	CAsList             bool
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
		CAsList:             s.allowed(ctx, ResourceCA, ActionList, "", nil),
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
