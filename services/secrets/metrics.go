package secrets

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// The secrets service's statistics (docs/monitoring.md, "The services' metrics"). Dotted names, tagged on the admin
// port's /stats/prometheus by the proxy admin's tag rules:
//
//	secrets.authn.<method>.<result>           counter: authentications by method and result
//	secrets.authz.denied                      counter: authenticated calls refused by access control
//	secrets.rate_limit.write_refused          counter: writes refused by the per-principal write rate
//	secrets.kms.<operation>.rq_total|rq_error counter: KMS calls and failed calls
//	secrets.kms.<operation>.rq_time           histogram (ms): KMS call latency
//	secrets.store.<operation>.rq_total|rq_error, rq_time: the same for store operations
//	secrets.store.<operation>.rq_disk_full    counter: store calls refused for lack of space (also in rq_error)
//	secrets.store.write_queue_depth           gauge (bbolt): writes waiting for the batcher
//	secrets.store.write_stalled_seconds       gauge (bbolt): how long the oldest write has waited to
//	                                          commit while writes are stalled, 0 otherwise
const (
	statAuthzDenied      = "secrets.authz.denied"
	statWriteRateRefused = "secrets.rate_limit.write_refused"
)

// opStats counts the calls of one operation on a dependency (KMS, store).
type opStats struct {
	total, errors *stats.Counter
	// diskFull counts the failures that are a full disk (store operations only; nil for the KMS).
	diskFull *stats.Counter
	time     *stats.Histogram
	// failed tells a failure of the dependency from an answer (a miss, a conflict, a refusal).
	failed func(error) bool
}

func newOpStats(st *stats.Store, prefix, op string, failed func(error) bool) *opStats {
	p := prefix + "." + op + "."
	return &opStats{total: st.Counter(p + "rq_total"), errors: st.Counter(p + "rq_error"), time: st.Histogram(p + "rq_time"), failed: failed}
}

// done records one call that started at start and ended with err.
func (o *opStats) done(start time.Time, err error) {
	o.time.Record(time.Since(start))
	o.total.Inc()
	if err != nil && o.failed(err) {
		o.errors.Inc()
		if o.diskFull != nil && store.IsDiskFull(err) {
			o.diskFull.Inc()
		}
	}
}

// storeFailed: the store itself failed (every adapter wraps such errors in ErrStorage); a miss, a
// revision conflict, a name taken or a cancelled call are answers.
func storeFailed(err error) bool { return errors.Is(err, store.ErrStorage) }

// kmsFailed: the KMS failed; a key it does not hold or a ciphertext it refuses (a forged or foreign
// token, a wrong encryption context) are answers, and so is a call its caller cancelled.
func kmsFailed(err error) bool {
	return !errors.Is(err, kms.ErrKeyNotFound) && !errors.Is(err, kms.ErrInvalidCiphertext) && !errors.Is(err, kms.ErrInvalidLength) &&
		!errors.Is(err, context.Canceled)
}

// authnMethod names how a call authenticated (res set) or tried to (res nil), for secrets.authn:
// kmsauth, jwt, kubernetes, bearer (a workload token refused before its issuer was known), cert,
// header, session, none (no credential at all, or authentication off).
func (a *authenticator) authnMethod(req AuthRequest, res *AuthResult) string {
	if res != nil {
		switch t := res.Principal.AuthType; t {
		case "kms":
			return "kmsauth"
		case "":
			return "none"
		default:
			return t
		}
	}
	switch {
	case !a.cfg.UseAuth:
		return "none"
	case hasBasic(req.Authorization), req.AuthFrom != "" || req.AuthToken != "":
		return "kmsauth"
	}
	if _, ok := bearerJWT(req.Authorization); ok {
		return "bearer"
	}
	if req.ClientCert != "" || len(req.PeerCerts) > 0 {
		return AuthTypeCert
	}
	if a.missingCredential(req) != nil {
		return "none"
	}
	if a.cfg.UserAuthModule == "header" {
		return "header"
	}
	return "session"
}

// instrumentedKMS counts and times every call of a KMS provider.
type instrumentedKMS struct {
	kms.Provider
	random, encrypt, decrypt, dataKey, resolve *opStats
}

func instrumentKMS(p kms.Provider, st *stats.Store) kms.Provider {
	op := func(name string) *opStats { return newOpStats(st, "secrets.kms", name, kmsFailed) }
	return &instrumentedKMS{Provider: p, random: op("generate_random"), encrypt: op("encrypt"), decrypt: op("decrypt"),
		dataKey: op("generate_data_key"), resolve: op("resolve_key_id")}
}

func (k *instrumentedKMS) GenerateRandom(ctx context.Context, n int) (b []byte, err error) {
	defer func(start time.Time) { k.random.done(start, err) }(time.Now())
	return k.Provider.GenerateRandom(ctx, n)
}

func (k *instrumentedKMS) Encrypt(ctx context.Context, keyID string, plaintext []byte, ec map[string]string) (b []byte, err error) {
	defer func(start time.Time) { k.encrypt.done(start, err) }(time.Now())
	return k.Provider.Encrypt(ctx, keyID, plaintext, ec)
}

func (k *instrumentedKMS) Decrypt(ctx context.Context, ciphertext []byte, ec map[string]string) (p []byte, id string, err error) {
	defer func(start time.Time) { k.decrypt.done(start, err) }(time.Now())
	return k.Provider.Decrypt(ctx, ciphertext, ec)
}

func (k *instrumentedKMS) GenerateDataKey(ctx context.Context, keyID string, ec map[string]string) (p, c []byte, err error) {
	defer func(start time.Time) { k.dataKey.done(start, err) }(time.Now())
	return k.Provider.GenerateDataKey(ctx, keyID, ec)
}

func (k *instrumentedKMS) ResolveKeyID(ctx context.Context, keyID string) (id string, err error) {
	defer func(start time.Time) { k.resolve.done(start, err) }(time.Now())
	return k.Provider.ResolveKeyID(ctx, keyID)
}

func hasBasic(authorization string) bool {
	scheme, _, ok := strings.Cut(authorization, " ")
	return ok && strings.EqualFold(scheme, "basic")
}

// instrumentedStore counts and times every operation of a Store.
type instrumentedStore struct {
	store.Store
	ops map[string]*opStats
}

func instrumentStore(s store.Store, st *stats.Store) store.Store {
	is := &instrumentedStore{Store: s, ops: map[string]*opStats{}}
	for _, op := range []string{"get_credential", "get_credentials", "get_credential_revision", "list_credentials", "list_credential_revisions", "list_all_credential_revisions", "put_credential", "set_last_decrypted", "rewrap_credential", "credential_services", "archive_credential", "get_archived_credential", "list_archived_credentials", "get_service", "get_service_revision", "list_services", "list_service_revisions", "list_all_service_revisions", "put_service", "replace_service_revision", "grants", "put_grants", "key_check", "init_key_check", "replace_key_check", "claim_login_nonce", "login_nonce_claimed", "get_change_request", "put_change_request", "list_change_requests", "has_data", "probe"} {
		is.ops[op] = newOpStats(st, "secrets.store", op, storeFailed)
		// A full disk fails every write while reads go on: counted apart, so an alert can name it.
		is.ops[op].diskFull = st.Counter("secrets.store." + op + ".rq_disk_full")
	}
	return is
}

func (s *instrumentedStore) GetCredential(ctx context.Context, id string) (r0 *store.CredentialRecord, err error) {
	defer func(start time.Time) { s.ops["get_credential"].done(start, err) }(time.Now())
	return s.Store.GetCredential(ctx, id)
}

func (s *instrumentedStore) GetCredentials(ctx context.Context, ids []string) (r0 []*store.CredentialRecord, err error) {
	defer func(start time.Time) { s.ops["get_credentials"].done(start, err) }(time.Now())
	return s.Store.GetCredentials(ctx, ids)
}

func (s *instrumentedStore) GetCredentialRevision(ctx context.Context, id string, revision int32) (r0 *store.CredentialRecord, err error) {
	defer func(start time.Time) { s.ops["get_credential_revision"].done(start, err) }(time.Now())
	return s.Store.GetCredentialRevision(ctx, id, revision)
}

func (s *instrumentedStore) ListCredentials(ctx context.Context, page store.Page) (r0 []*store.CredentialRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_credentials"].done(start, err) }(time.Now())
	return s.Store.ListCredentials(ctx, page)
}

func (s *instrumentedStore) ListCredentialRevisions(ctx context.Context, id string, page store.Page) (r0 []*store.CredentialRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_credential_revisions"].done(start, err) }(time.Now())
	return s.Store.ListCredentialRevisions(ctx, id, page)
}

func (s *instrumentedStore) ListAllCredentialRevisions(ctx context.Context, page store.Page) (r0 []*store.CredentialRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_all_credential_revisions"].done(start, err) }(time.Now())
	return s.Store.ListAllCredentialRevisions(ctx, page)
}

func (s *instrumentedStore) PutCredential(ctx context.Context, rec *store.CredentialRecord, prevRevision int32) (err error) {
	defer func(start time.Time) { s.ops["put_credential"].done(start, err) }(time.Now())
	return s.Store.PutCredential(ctx, rec, prevRevision)
}

func (s *instrumentedStore) SetLastDecrypted(ctx context.Context, id string, revision int32, at time.Time) (err error) {
	defer func(start time.Time) { s.ops["set_last_decrypted"].done(start, err) }(time.Now())
	return s.Store.SetLastDecrypted(ctx, id, revision, at)
}

func (s *instrumentedStore) RewrapCredential(ctx context.Context, id string, revision int32, oldWrapped, newWrapped []byte) (err error) {
	defer func(start time.Time) { s.ops["rewrap_credential"].done(start, err) }(time.Now())
	return s.Store.RewrapCredential(ctx, id, revision, oldWrapped, newWrapped)
}

func (s *instrumentedStore) CredentialServices(ctx context.Context, id string) (r0 []string, err error) {
	defer func(start time.Time) { s.ops["credential_services"].done(start, err) }(time.Now())
	return s.Store.CredentialServices(ctx, id)
}

func (s *instrumentedStore) ArchiveCredential(ctx context.Context, id string, prevRevision int32, at time.Time) (err error) {
	defer func(start time.Time) { s.ops["archive_credential"].done(start, err) }(time.Now())
	return s.Store.ArchiveCredential(ctx, id, prevRevision, at)
}

func (s *instrumentedStore) GetArchivedCredential(ctx context.Context, id string) (r0 *store.CredentialRecord, err error) {
	defer func(start time.Time) { s.ops["get_archived_credential"].done(start, err) }(time.Now())
	return s.Store.GetArchivedCredential(ctx, id)
}

func (s *instrumentedStore) ListArchivedCredentials(ctx context.Context, page store.Page) (r0 []*store.ArchivedCredential, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_archived_credentials"].done(start, err) }(time.Now())
	return s.Store.ListArchivedCredentials(ctx, page)
}

func (s *instrumentedStore) GetService(ctx context.Context, id string) (r0 *store.ServiceRecord, err error) {
	defer func(start time.Time) { s.ops["get_service"].done(start, err) }(time.Now())
	return s.Store.GetService(ctx, id)
}

func (s *instrumentedStore) GetServiceRevision(ctx context.Context, id string, revision int32) (r0 *store.ServiceRecord, err error) {
	defer func(start time.Time) { s.ops["get_service_revision"].done(start, err) }(time.Now())
	return s.Store.GetServiceRevision(ctx, id, revision)
}

func (s *instrumentedStore) ListServices(ctx context.Context, page store.Page) (r0 []*store.ServiceRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_services"].done(start, err) }(time.Now())
	return s.Store.ListServices(ctx, page)
}

func (s *instrumentedStore) ListServiceRevisions(ctx context.Context, id string, page store.Page) (r0 []*store.ServiceRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_service_revisions"].done(start, err) }(time.Now())
	return s.Store.ListServiceRevisions(ctx, id, page)
}

func (s *instrumentedStore) ListAllServiceRevisions(ctx context.Context, page store.Page) (r0 []*store.ServiceRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_all_service_revisions"].done(start, err) }(time.Now())
	return s.Store.ListAllServiceRevisions(ctx, page)
}

func (s *instrumentedStore) PutService(ctx context.Context, rec *store.ServiceRecord, prevRevision int32) (err error) {
	defer func(start time.Time) { s.ops["put_service"].done(start, err) }(time.Now())
	return s.Store.PutService(ctx, rec, prevRevision)
}

func (s *instrumentedStore) ReplaceServiceRevision(ctx context.Context, rec, prev *store.ServiceRecord) (err error) {
	defer func(start time.Time) { s.ops["replace_service_revision"].done(start, err) }(time.Now())
	return s.Store.ReplaceServiceRevision(ctx, rec, prev)
}

func (s *instrumentedStore) Grants(ctx context.Context, serviceID string) (r0 store.GrantsRecord, err error) {
	defer func(start time.Time) { s.ops["grants"].done(start, err) }(time.Now())
	return s.Store.Grants(ctx, serviceID)
}

func (s *instrumentedStore) PutGrants(ctx context.Context, serviceID string, rec store.GrantsRecord) (err error) {
	defer func(start time.Time) { s.ops["put_grants"].done(start, err) }(time.Now())
	return s.Store.PutGrants(ctx, serviceID, rec)
}

func (s *instrumentedStore) KeyCheck(ctx context.Context) (r0 []byte, err error) {
	defer func(start time.Time) { s.ops["key_check"].done(start, err) }(time.Now())
	return s.Store.KeyCheck(ctx)
}

func (s *instrumentedStore) InitKeyCheck(ctx context.Context, value []byte) (r0 []byte, err error) {
	defer func(start time.Time) { s.ops["init_key_check"].done(start, err) }(time.Now())
	return s.Store.InitKeyCheck(ctx, value)
}

func (s *instrumentedStore) ReplaceKeyCheck(ctx context.Context, prev, next []byte) (err error) {
	defer func(start time.Time) { s.ops["replace_key_check"].done(start, err) }(time.Now())
	return s.Store.ReplaceKeyCheck(ctx, prev, next)
}

func (s *instrumentedStore) ClaimLoginNonce(ctx context.Context, nonce string, expires time.Time) (r0 bool, err error) {
	defer func(start time.Time) { s.ops["claim_login_nonce"].done(start, err) }(time.Now())
	return s.Store.ClaimLoginNonce(ctx, nonce, expires)
}

func (s *instrumentedStore) LoginNonceClaimed(ctx context.Context, nonce string) (r0 bool, err error) {
	defer func(start time.Time) { s.ops["login_nonce_claimed"].done(start, err) }(time.Now())
	return s.Store.LoginNonceClaimed(ctx, nonce)
}

func (s *instrumentedStore) GetChangeRequest(ctx context.Context, id string) (r0 *store.ChangeRequestRecord, err error) {
	defer func(start time.Time) { s.ops["get_change_request"].done(start, err) }(time.Now())
	return s.Store.GetChangeRequest(ctx, id)
}

func (s *instrumentedStore) PutChangeRequest(ctx context.Context, rec *store.ChangeRequestRecord, prevVersion int32) (err error) {
	defer func(start time.Time) { s.ops["put_change_request"].done(start, err) }(time.Now())
	return s.Store.PutChangeRequest(ctx, rec, prevVersion)
}

func (s *instrumentedStore) ListChangeRequests(ctx context.Context, page store.Page) (r0 []*store.ChangeRequestRecord, r1 string, err error) {
	defer func(start time.Time) { s.ops["list_change_requests"].done(start, err) }(time.Now())
	return s.Store.ListChangeRequests(ctx, page)
}

func (s *instrumentedStore) HasData(ctx context.Context) (r0 bool, err error) {
	defer func(start time.Time) { s.ops["has_data"].done(start, err) }(time.Now())
	return s.Store.HasData(ctx)
}

func (s *instrumentedStore) Probe(ctx context.Context) (err error) {
	defer func(start time.Time) { s.ops["probe"].done(start, err) }(time.Now())
	return s.Store.Probe(ctx)
}
