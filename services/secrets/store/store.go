package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Storage errors. Every Store adapter returns exactly these (wrapped or not), so the service can
// decide with errors.Is / errors.As whatever the backend.
var (
	// ErrNotFound: no record with that id (or id and revision).
	ErrNotFound = errors.New("secrets: not found")
	// ErrRevisionConflict: the current revision is not the one the writer read; reload and retry.
	ErrRevisionConflict = errors.New("secrets: revision conflict")
	// ErrBadPageToken: a paging token that this store did not issue.
	ErrBadPageToken = errors.New("secrets: bad page token")
	// ErrStillMapped: a credential cannot be archived while a service maps it.
	ErrStillMapped = errors.New("secrets: credential has mapped services")
	// ErrTooLarge: a write exceeds what the store accepts in one transaction (the etcd store's request
	// size and operation limits); the service answers 400.
	ErrTooLarge = errors.New("secrets: record too large for the store")
	// ErrStorage: the storage itself failed (I/O error, full disk, unreachable or leaderless etcd,
	// damaged data, a contained bbolt panic). The service answers 503 "storage unavailable"; the
	// request may be retried later.
	ErrStorage = errors.New("secrets: storage unavailable")
)

// IsDiskFull reports whether err is the storage refusing a write for lack of space: ENOSPC from the
// file system (bbolt), wrapped or, where a library formatted it into its own message, by its text,
// or etcd's NOSPACE alarm ("database space exceeded", its backend quota). Such a write never took
// effect; nothing succeeds until space is freed (or the etcd alarm disarmed), so it is counted
// apart (the secrets.store.<op>.rq_disk_full statistic, alert GantryStoreDiskFull).
func IsDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "database space exceeded")
}

// WriteStalledError is a write refused because the store's writes are stalled: the oldest write has
// not committed within the store's stall timeout (a frozen or failing disk). The refused write never
// took effect. It wraps ErrStorage; the service answers 503 with Retry-After.
type WriteStalledError struct {
	// For is how long the oldest write has waited to commit.
	For time.Duration
	// RetryAfter is when to try again.
	RetryAfter time.Duration
}

func (e *WriteStalledError) Error() string {
	return fmt.Sprintf("secrets: storage unavailable: writes stalled (the oldest write has waited %s to commit)", e.For.Round(time.Millisecond))
}

// Unwrap makes a WriteStalledError match ErrStorage.
func (e *WriteStalledError) Unwrap() error { return ErrStorage }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1.
func (e *WriteStalledError) RetryAfterSeconds() int {
	return max(1, int((e.RetryAfter+time.Second-1)/time.Second))
}

// ReadStalledError is a read refused because it could not begin within the store's stall timeout (a
// frozen disk holds the file while a commit waits for it). Nothing was read. It wraps ErrStorage; the
// service answers 503 with Retry-After.
type ReadStalledError struct {
	// For is how long the read waited.
	For time.Duration
	// RetryAfter is when to try again.
	RetryAfter time.Duration
}

func (e *ReadStalledError) Error() string {
	return fmt.Sprintf("secrets: storage unavailable: reads stalled (a read could not begin within %s)", e.For.Round(time.Millisecond))
}

// Unwrap makes a ReadStalledError match ErrStorage.
func (e *ReadStalledError) Unwrap() error { return ErrStorage }

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1.
func (e *ReadStalledError) RetryAfterSeconds() int {
	return max(1, int((e.RetryAfter+time.Second-1)/time.Second))
}

// NameTakenError reports that another current credential already has the name.
type NameTakenError struct {
	// ID is the credential that holds the name.
	ID string
}

func (e *NameTakenError) Error() string { return "secrets: name already used by credential " + e.ID }

// UnknownCredentialsError reports service mappings to credential ids that have no current record, or
// (Blind) to blind credential ids.
type UnknownCredentialsError struct {
	IDs   []string
	Blind bool
}

func (e *UnknownCredentialsError) Error() string { return "secrets: " + e.Message() }

// Message is the error without the package prefix, as an API answer says it.
func (e *UnknownCredentialsError) Message() string {
	kind := "credential"
	if e.Blind {
		kind = "blind credential"
	}
	return fmt.Sprintf("unknown %s ids: %s", kind, strings.Join(e.IDs, ", "))
}

// CredentialRecord is one revision of a credential as stored. Secret values exist only sealed:
// SealedPairs is the AES-256-GCM ciphertext of the pairs under a data key, and WrappedKey is that data
// key encrypted by the KMS with the credential id as encryption context. Everything else is clear text.
type CredentialRecord struct {
	ID       string
	Revision int32
	Name     string
	Enabled  bool
	// Documentation is nil when none was given.
	Documentation *string
	Metadata      map[string]string
	Tags          []string
	// Keys are the (lower-case) names of the pairs, kept clear so key-conflict checks and listings
	// need no decryption.
	Keys              []string
	SealedPairs       []byte
	WrappedKey        []byte
	ModifiedDate      time.Time
	ModifiedBy        string
	LastRotationDate  *time.Time
	LastDecryptedDate *time.Time
}

// ServiceRecord is one revision of a service's credential mapping.
type ServiceRecord struct {
	ID       string
	Revision int32
	Enabled  bool
	// Account is nil when the service is not scoped to a cloud account.
	Account          *string
	Credentials      []string
	BlindCredentials []string
	ModifiedDate     time.Time
	ModifiedBy       string
}

// SameService reports whether two records of a service revision hold the same fields (mappings
// compared as sets, as the store keeps them in no particular order).
func SameService(a, b *ServiceRecord) bool {
	set := func(ids []string) []string { return slices.Compact(slices.Sorted(slices.Values(ids))) }
	return a.ID == b.ID && a.Revision == b.Revision && a.Enabled == b.Enabled &&
		(a.Account == nil) == (b.Account == nil) && (a.Account == nil || *a.Account == *b.Account) &&
		slices.Equal(set(a.Credentials), set(b.Credentials)) && slices.Equal(set(a.BlindCredentials), set(b.BlindCredentials)) &&
		a.ModifiedDate.Equal(b.ModifiedDate) && a.ModifiedBy == b.ModifiedBy
}

// GrantsRecord is what the local keyring records of a service's grants on the auth key (with -kms=aws
// the grants live in KMS and no record is kept). It is kept in the store, not in a file of one
// process, so every replica sharing the store enforces the same grants.
type GrantsRecord struct {
	// Encrypt: the service may make auth tokens; Decrypt: it may read tokens addressed to it.
	Encrypt, Decrypt bool
	// Created is when the service first got a grant (UTC).
	Created time.Time
}

// Change request statuses (ChangeRequestRecord.Status). Pending is the only one that changes again;
// the others are final.
const (
	ChangePending   = "pending"
	ChangeApplied   = "applied"
	ChangeRejected  = "rejected"
	ChangeCancelled = "cancelled"
	ChangeExpired   = "expired"
	// ChangeStale: the record moved on from the request's base revision before it was applied; it
	// is never merged.
	ChangeStale = "stale"
	// ChangeFailed: approved, but the write was refused when applied (the requester lost access, a
	// key now conflicts, a mapped credential is gone...); DecisionReason says why. Nothing applied.
	ChangeFailed = "failed"
	// ChangeBrokeGlass: applied at once, without approval, by a principal allowed to break glass.
	ChangeBrokeGlass = "break_glass"
)

// ChangeApproval is one approval of a change request.
type ChangeApproval struct {
	// By is the approving principal, as "user:<email>" or "service:<id>".
	By string
	At time.Time
	// Via is how the approval arrived: "api" or "slack:<team id>/<user id>".
	Via string
}

// ChangeRequestRecord is a write to a credential or service that an approval rule protects, held
// until enough approvers agree. The change itself is kept like a credential: new pairs exist only
// sealed (SealedPairs under WrappedKey, bound to the request id); everything else is clear text and
// holds no secret value. Version counts the writes of the record, from 1: every put is
// compare-and-set on it, so of two approvers deciding at once one wins.
type ChangeRequestRecord struct {
	ID      string
	Version int32
	// Action is what was asked: "update", "revert" or "archive" of a credential, "update" or "revert"
	// of a service.
	Action string
	// ResourceType is "credential" or "service"; ResourceID its id; ResourceName a credential's name
	// when the request was made (a service's is its id).
	ResourceType, ResourceID, ResourceName string
	// BaseRevision is the current revision the change was made against (0: the service does not exist
	// yet). The change applies only while it is still current.
	BaseRevision int32
	Status       string
	// RequestedBy is the requesting principal ("user:<email>" or "service:<id>").
	RequestedBy string
	// Reason is what the requester said the change is for.
	Reason    string
	Created   time.Time
	Expires   time.Time
	Required  int32
	Approvals []ChangeApproval
	// DecidedBy, DecidedAt and DecisionReason say who ended the request (rejected, cancelled) and why;
	// for applied, who gave the last approval.
	DecidedBy      string
	DecidedAt      *time.Time
	DecisionReason string
	// AppliedRevision is the revision the change was written as (0: not applied). For an archive it
	// is the archived revision.
	AppliedRevision int32
	// Change is the intended change without secret values, encoded by the secrets service (opaque to
	// the store); Summary what it changes, for people (names of keys, never values), also opaque.
	Change, Summary []byte
	// SealedPairs and WrappedKey hold the new pairs of a credential update that replaces them.
	SealedPairs, WrappedKey []byte
	// Team, Bot and Channel are where the request is announced in Slack ("" with no Slack);
	// NoticeTS is the announcement's message ts once posted and NoticedStatus the status it shows,
	// so the relay updates it when the status moves on.
	Team, Bot, Channel string
	NoticeChannel      string
	NoticeTS           string
	NoticedStatus      string
}

// Page selects a slice of a listing. Limit 0 means everything; Token is the opaque value a previous
// call returned ("" for the first page).
type Page struct {
	Limit int
	Token string
	// NamePrefix, for ListCredentials only, keeps the credentials whose lower-case name starts with it
	// (it must be lower-case). The name index is sorted, so a store seeks to the prefix instead of
	// reading every credential: the web UI's search stays fast with 100k credentials.
	NamePrefix string
}

// ArchivedCredential is the last revision of a credential moved to the archive area, and when.
type ArchivedCredential struct {
	Record     *CredentialRecord
	ArchivedAt time.Time
}

// Store persists credentials and services with their full history. Implementations: the bbolt adapter
// (package store/boltstore) and the etcd adapter (package store/etcdstore), which share the stored
// form of the records (package store/codec); all of them pass the conformance suite, package
// store/storetest (storetest.Run), which any other implementation must pass too.
//
// Contract for every implementation:
//   - Records passed in and returned are never shared with the store: callers may modify them.
//   - A write of revision N stores the immutable history record (id, N), the current record and every
//     index atomically: after a crash either all of it exists or none of it.
//   - Writes are compare-and-set on the current revision (prevRevision), so concurrent writers of the
//     same id can never both succeed with the same revision.
//   - Listings return the next page token, "" when there are no more items.
type Store interface {
	// GetCredential returns the current revision of a credential, or ErrNotFound.
	GetCredential(ctx context.Context, id string) (*CredentialRecord, error)
	// GetCredentials returns the current revisions of the credentials of ids that have one, in the
	// order of ids, in one read (a service's mapped credentials); ids with no current record (unknown
	// or archived) are left out, which is not an error.
	GetCredentials(ctx context.Context, ids []string) ([]*CredentialRecord, error)
	// GetCredentialRevision returns one history revision, or ErrNotFound.
	GetCredentialRevision(ctx context.Context, id string, revision int32) (*CredentialRecord, error)
	// ListCredentials lists current credentials ordered by lower-case name, then id; with
	// page.NamePrefix only those whose lower-case name starts with it.
	ListCredentials(ctx context.Context, page Page) ([]*CredentialRecord, string, error)
	// ListCredentialRevisions lists the history of one current credential by ascending revision;
	// ErrNotFound when the credential has no current record.
	ListCredentialRevisions(ctx context.Context, id string, page Page) ([]*CredentialRecord, string, error)
	// ListAllCredentialRevisions lists every history record of every current credential ordered by
	// lower-case name of that revision, then id, then revision.
	ListAllCredentialRevisions(ctx context.Context, page Page) ([]*CredentialRecord, string, error)
	// PutCredential stores rec as revision rec.Revision. prevRevision is the current revision the
	// caller read, 0 to create. Errors: ErrRevisionConflict when the stored current revision differs
	// (or rec.Revision != prevRevision+1); *NameTakenError when another current credential has exactly
	// rec.Name.
	PutCredential(ctx context.Context, rec *CredentialRecord, prevRevision int32) error
	// SetLastDecrypted records when decrypted pairs were last sent to a client, on the current record
	// and on history revision `revision`, without creating a revision. ErrNotFound when the current
	// record is gone; a current revision other than `revision` is left alone.
	SetLastDecrypted(ctx context.Context, id string, revision int32, at time.Time) error
	// RewrapCredential replaces the wrapped data key of history revision `revision` of a current
	// credential, and of its current record when that is the same revision, with newWrapped (the
	// same data key under a newer master key version, for key rewrap) — only where the stored
	// wrapped key is exactly oldWrapped, so a concurrent rewrap by another replica is never
	// overwritten with a stale value. Like SetLastDecrypted it creates no revision, and no other
	// field changes: a LastDecryptedDate set concurrently is kept. Errors: ErrNotFound when the
	// credential has no current record (unknown or archived) or no such revision;
	// ErrRevisionConflict when the stored wrapped key of the history record is not oldWrapped, and
	// then nothing changed. A current record of that revision whose wrapped key differs from the
	// history record's is left alone. An empty oldWrapped or newWrapped is refused with an error
	// that is neither of those, writing nothing. A failure of the storage wraps ErrStorage, as for
	// every call; on etcd so does a record that changed (a stamp, a new revision) during every
	// attempt: the key is still oldWrapped then, so it is never reported as a conflict.
	RewrapCredential(ctx context.Context, id string, revision int32, oldWrapped, newWrapped []byte) error
	// CredentialServices returns the ids of the current services that map the credential, sorted.
	CredentialServices(ctx context.Context, id string) ([]string, error)
	// ArchiveCredential moves the current record and every history record of a credential into the
	// archive area (stamped with `at`), in one transaction. Errors: ErrNotFound;
	// ErrRevisionConflict when the current revision is not prevRevision; ErrStillMapped when a
	// current service maps it.
	ArchiveCredential(ctx context.Context, id string, prevRevision int32, at time.Time) error
	// GetArchivedCredential returns the archived current record of a credential, or ErrNotFound.
	GetArchivedCredential(ctx context.Context, id string) (*CredentialRecord, error)
	// ListArchivedCredentials lists the archived credentials (the last revision of each, with when
	// it was archived) ordered by id.
	ListArchivedCredentials(ctx context.Context, page Page) ([]*ArchivedCredential, string, error)

	// GetService returns the current revision of a service, or ErrNotFound.
	GetService(ctx context.Context, id string) (*ServiceRecord, error)
	// GetServiceRevision returns one history revision, or ErrNotFound.
	GetServiceRevision(ctx context.Context, id string, revision int32) (*ServiceRecord, error)
	// ListServices lists current services ordered by lower-case id, then id.
	ListServices(ctx context.Context, page Page) ([]*ServiceRecord, string, error)
	// ListServiceRevisions lists the history of one current service by ascending revision;
	// ErrNotFound when the service has no current record.
	ListServiceRevisions(ctx context.Context, id string, page Page) ([]*ServiceRecord, string, error)
	// ListAllServiceRevisions lists every history record of every service ordered by lower-case id,
	// then id, then revision.
	ListAllServiceRevisions(ctx context.Context, page Page) ([]*ServiceRecord, string, error)
	// PutService stores rec as revision rec.Revision and updates the credential→services index.
	// prevRevision as for PutCredential. *UnknownCredentialsError when a mapped credential id has no
	// current record (checked in the same transaction, so a concurrent archive cannot slip in).
	PutService(ctx context.Context, rec *ServiceRecord, prevRevision int32) error
	// ReplaceServiceRevision rewrites history revision rec.Revision of service rec.ID with rec, only
	// where the stored revision is exactly prev (SameService), creating no revision: the one way to
	// change a revision once written, for an import that left a mapping out of it and can now carry
	// it over (package confidant). When rec.Revision is the current revision the current record and
	// the credential→services index change with it, and its mapped credentials must be current
	// (*UnknownCredentialsError); an older revision is history only and may name any id. Errors:
	// ErrNotFound when the service or the revision does not exist; ErrRevisionConflict when the
	// stored revision is not prev (nothing changed).
	ReplaceServiceRevision(ctx context.Context, rec, prev *ServiceRecord) error

	// Grants returns the grants recorded for a service id, or ErrNotFound when none ever were.
	Grants(ctx context.Context, serviceID string) (GrantsRecord, error)
	// PutGrants replaces the grants record of a service id (last writer wins: callers only ever add
	// grants). It does not require a current service record.
	PutGrants(ctx context.Context, serviceID string, rec GrantsRecord) error

	// KeyCheck returns the key-check value recorded when the store was initialised (a small value
	// wrapped under the master key, see secrets.VerifyKeys), or ErrNotFound when none was recorded yet.
	KeyCheck(ctx context.Context) ([]byte, error)
	// InitKeyCheck records value as the key-check value unless one is recorded already, and returns
	// the value the store holds afterwards (value, or the one another replica recorded first).
	InitKeyCheck(ctx context.Context, value []byte) ([]byte, error)
	// ReplaceKeyCheck replaces the key-check value with next (the same check value wrapped under a
	// newer master key version, for key rewrap) only when the stored value is exactly prev, so of
	// replicas replacing it at once one wins. Errors: ErrNotFound when none is recorded,
	// ErrRevisionConflict when the stored value is another one (nothing changed); an empty prev or
	// next is refused with an error that is neither of those.
	ReplaceKeyCheck(ctx context.Context, prev, next []byte) error
	// ClaimLoginNonce records that the one-time login link carrying nonce was opened, and reports
	// whether this call recorded it first: false means the link was used already, through this
	// replica or another sharing the store, before or after a restart. Of concurrent claims of one
	// nonce exactly one gets true. The record is kept at least until expires (the link's own expiry
	// plus a margin for clock skew) and may be dropped after it, so the keyspace stays small. A nonce
	// must be non-empty and free of 0x00 bytes. Login nonces are not data: HasData ignores them.
	ClaimLoginNonce(ctx context.Context, nonce string, expires time.Time) (bool, error)
	// LoginNonceClaimed reports whether nonce was claimed and its record has not expired yet. Ended
	// browser sessions are recorded as claimed nonces, so every replica refuses them at once.
	LoginNonceClaimed(ctx context.Context, nonce string) (bool, error)

	// GetChangeRequest returns a change request, or ErrNotFound.
	GetChangeRequest(ctx context.Context, id string) (*ChangeRequestRecord, error)
	// PutChangeRequest stores rec as version rec.Version, compare-and-set: prevVersion is the version
	// the caller read, 0 to create. ErrRevisionConflict when the stored version differs (or
	// rec.Version != prevVersion+1, or a create finds the id taken).
	PutChangeRequest(ctx context.Context, rec *ChangeRequestRecord, prevVersion int32) error
	// ListChangeRequests lists change requests ordered by id (ids sort by creation time).
	ListChangeRequests(ctx context.Context, page Page) ([]*ChangeRequestRecord, string, error)

	// HasData reports whether any credential (current or archived) or service was ever stored.
	HasData(ctx context.Context) (bool, error)
	// Probe tells whether the store can serve reads now: nil, or an error wrapping ErrStorage. It
	// backs the service's gRPC health, so it must be cheap and bounded by ctx.
	Probe(ctx context.Context) error

	// Close releases the store.
	Close() error
}

// ReplicaKeys is what one running replica of the secrets service wraps new data keys under and can
// unwrap, as it publishes it for key rotation: a master key version may be retired only once no
// replica encrypts with it (gantry keyring retire, rewrap), and a replica that never reloaded its
// keyring must be seen, not assumed.
type ReplicaKeys struct {
	// Name tells the replica apart: its host and the address of its gRPC listener.
	Name string `json:"name"`
	// Active is the master key version it wraps new data keys under ("<key id> v<N>").
	Active string `json:"active"`
	// Held are the master key versions it can unwrap, in order.
	Held []string `json:"held"`
	// Published is when the replica published this record.
	Published time.Time `json:"published"`
}

// ReplicaRegistry is implemented by stores that several replicas share (etcdstore): each replica
// publishes its ReplicaKeys there, on a lease, so the others can tell which versions are in use by a
// running process. A replica that stops withdraws its record; one that dies loses it when its lease
// runs out. The bbolt store has one process per file and no registry.
type ReplicaRegistry interface {
	// PublishReplicaKeys records r under r.Name for ttl (etcd rounds up to whole seconds), replacing
	// what r.Name published before; a replica republishes well within ttl while it runs.
	PublishReplicaKeys(ctx context.Context, r ReplicaKeys, ttl time.Duration) error
	// WithdrawReplicaKeys deletes the record of name (a replica that stops); none is not an error.
	WithdrawReplicaKeys(ctx context.Context, name string) error
	// ListReplicaKeys returns the records of the replicas that published one and whose lease still
	// runs, ordered by name.
	ListReplicaKeys(ctx context.Context) ([]ReplicaKeys, error)
}
