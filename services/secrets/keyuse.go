package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Whether a master key version can be retired or destroyed is decided from the records themselves and
// from every running replica, never from the tally of a rewrap pass: a pass counts what it rewrapped
// under the active version, so an old version's count is 0 as soon as it is no longer active, and a
// pass never sees what another replica writes behind its cursor. CountKeyVersions is the one place
// that counts records by key version: the sealed-revision statistics, KeyUse (retire, destroy and
// rewrap's "done") and gantry check all read it.

// unreadableVersion counts the wrapped keys whose header names no keyring key version.
const unreadableVersion = "unreadable"

// KeyVersionCounts is what a scan of a store found under each master key version ("<key id> v<N>";
// "unreadable" for a wrapped key whose header names none).
type KeyVersionCounts struct {
	// Revisions counts every history revision of every current credential.
	Revisions map[string]int
	// Archived counts the archived credentials, by the revision each was archived at (the one the
	// archive keeps readable).
	Archived map[string]int
	// KeyCheck is the version of the store's key-check value; "" when the store has none yet.
	KeyCheck string
	// Changes counts the pending change requests holding new pairs (sealed until approved), by the
	// version of their data key: destroying it would make them fail when approved.
	Changes map[string]int
}

// Under is how many records (revisions, archived credentials, the key-check value) are under version.
func (c KeyVersionCounts) Under(version string) int {
	n := c.Revisions[version] + c.Archived[version] + c.Changes[version]
	if c.KeyCheck == version {
		n++
	}
	return n
}

// Versions lists every version something is under, sorted.
func (c KeyVersionCounts) Versions() []string {
	seen := map[string]bool{}
	for v := range c.Revisions {
		seen[v] = true
	}
	for v := range c.Archived {
		seen[v] = true
	}
	for v := range c.Changes {
		seen[v] = true
	}
	if c.KeyCheck != "" {
		seen[c.KeyCheck] = true
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// CountKeyVersions reads every credential revision, every archived credential, every pending change
// request's new pairs and the key-check value
// of st and counts them by the key version named in their wrapped key's clear header: nothing is
// decrypted and no KMS is called, so it runs offline (gantry check) as well as in the service.
func CountKeyVersions(ctx context.Context, st store.Store, versions kms.KeyVersioner) (KeyVersionCounts, error) {
	counts := KeyVersionCounts{Revisions: map[string]int{}, Archived: map[string]int{}, Changes: map[string]int{}}
	name := func(wrapped []byte) string {
		v, err := versions.CiphertextKeyVersion(wrapped)
		if err != nil {
			return unreadableVersion
		}
		return v.String()
	}
	for token := ""; ; {
		recs, next, err := st.ListAllCredentialRevisions(ctx, store.Page{Limit: MaxRewrapBatch, Token: token})
		if err != nil {
			return KeyVersionCounts{}, err
		}
		for _, rec := range recs {
			counts.Revisions[name(rec.WrappedKey)]++
		}
		if token = next; token == "" {
			break
		}
	}
	for token := ""; ; {
		archived, next, err := st.ListArchivedCredentials(ctx, store.Page{Limit: MaxRewrapBatch, Token: token})
		if err != nil {
			return KeyVersionCounts{}, err
		}
		for _, a := range archived {
			counts.Archived[name(a.Record.WrappedKey)]++
		}
		if token = next; token == "" {
			break
		}
	}
	for token := ""; ; {
		changes, next, err := st.ListChangeRequests(ctx, store.Page{Limit: MaxRewrapBatch, Token: token})
		if err != nil {
			return KeyVersionCounts{}, err
		}
		for _, c := range changes {
			if c.Status == store.ChangePending && len(c.WrappedKey) > 0 {
				counts.Changes[name(c.WrappedKey)]++
			}
		}
		if token = next; token == "" {
			break
		}
	}
	held, err := st.KeyCheck(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return KeyVersionCounts{}, err
	default:
		counts.KeyCheck = name(held)
	}
	return counts, nil
}

// KeyUse is what a retire or destroy of a master key version must know: what the store holds under
// each version, and what every running replica encrypts with and holds.
type KeyUse struct {
	KeyVersionCounts
	// Active is the version this replica wraps new data keys under.
	Active string
	// Replicas are the running replicas, this one included, by name. On a store without a registry
	// (bbolt: one process per file) only this one.
	Replicas []store.ReplicaKeys
	// Self is this replica's name ("" before RunReplicaPresence named it).
	Self string
}

// errVersionsNotVisible: the provider does not show key versions (AWS KMS rotates its own).
var errVersionsNotVisible = errors.New("secrets: the key provider shows no key versions (AWS KMS rotates its backing keys itself): there is nothing to count or retire")

// KeyUse scans the store (CountKeyVersions) and reads every running replica's keys. The scan comes
// first, so a replica that changes what it encrypts with during the scan shows up in its record.
func (s *Service) KeyUse(ctx context.Context) (KeyUse, error) {
	if s.versions == nil {
		return KeyUse{}, errVersionsNotVisible
	}
	counts, err := CountKeyVersions(ctx, s.store, s.versions)
	if err != nil {
		return KeyUse{}, err
	}
	s.publishSealed(counts.Revisions, "")
	self, err := s.replicaKeys(ctx)
	if err != nil {
		return KeyUse{}, err
	}
	use := KeyUse{KeyVersionCounts: counts, Active: self.Active, Replicas: []store.ReplicaKeys{self}, Self: self.Name}
	if s.replicas != nil {
		others, err := s.replicas.ListReplicaKeys(ctx)
		if err != nil {
			return KeyUse{}, err
		}
		for _, r := range others {
			// This replica's own record may lag its keyring by a publish: the live value wins.
			if r.Name != self.Name {
				use.Replicas = append(use.Replicas, r)
			}
		}
	}
	slices.SortFunc(use.Replicas, func(a, b store.ReplicaKeys) int { return strings.Compare(a.Name, b.Name) })
	return use, nil
}

// keyHolder is a provider that lists the versions of a key it holds: the local keyring.
type keyHolder interface {
	HeldKeyVersions(ctx context.Context, keyIDOrAlias string) ([]kms.KeyVersion, error)
}

// replicaKeys is this replica's record: its name, active master key version and held versions.
func (s *Service) replicaKeys(ctx context.Context) (store.ReplicaKeys, error) {
	active, err := s.activeKey(ctx)
	if err != nil {
		return store.ReplicaKeys{}, err
	}
	r := store.ReplicaKeys{Name: s.presence.name(), Active: active, Published: s.now()}
	if h, ok := s.reloader.(keyHolder); ok {
		held, err := h.HeldKeyVersions(ctx, s.cfg.KMSMasterKey)
		if err != nil {
			return store.ReplicaKeys{}, kmsError(ctx, "list the master key's versions", err)
		}
		for _, v := range held {
			r.Held = append(r.Held, v.String())
		}
	}
	return r, nil
}

// Replica records live for replicaTTL and are republished every replicaRefresh, so a replica that
// dies is gone within replicaTTL, and one that lives never lapses between two publishes.
const (
	replicaTTL     = 15 * time.Second
	replicaRefresh = replicaTTL / 3
)

// presence is the replica's name once RunReplicaPresence set it.
type presence struct {
	mu   sync.Mutex
	self string
}

func (p *presence) name() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.self
}

// publishKeys publishes this replica's record, when the store has a registry and the replica a name.
func (s *Service) publishKeys(ctx context.Context) error {
	if s.replicas == nil || s.presence.name() == "" || s.versions == nil {
		return nil
	}
	r, err := s.replicaKeys(ctx)
	if err != nil {
		return err
	}
	if err := s.replicas.PublishReplicaKeys(ctx, r, replicaTTL); err != nil {
		return fmt.Errorf("publish this replica's key versions: %w", err)
	}
	return nil
}

// RunReplicaPresence names this replica (its host and gRPC address) and, on a store shared by
// replicas (etcd), publishes what it encrypts with and holds until ctx ends: at once, after every
// keyring reload (ReloadKeys), and every replicaRefresh; then it withdraws the record. It returns
// at once on a store without a registry, where KeyUse reports this replica alone.
func (s *Service) RunReplicaPresence(ctx context.Context, name string) {
	s.presence.mu.Lock()
	s.presence.self = name
	s.presence.mu.Unlock()
	if s.replicas == nil || s.versions == nil {
		return
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := s.replicas.WithdrawReplicaKeys(stop, name); err != nil {
			s.logger.Debug("withdrawing this replica's key versions failed (they lapse by themselves)", zap.Error(err))
		}
	}()
	for {
		if err := s.publishKeys(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("publishing this replica's key versions failed (its record lapses after the lease's TTL, and key retires no longer see this replica)", zap.Error(err), zap.Duration("ttl", replicaTTL))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(replicaRefresh):
		}
	}
}
