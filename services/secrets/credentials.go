package secrets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// CreateCredential stores a new credential at revision 1.
func (s *Service) CreateCredential(ctx context.Context, in CredentialInput) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceCredential, ActionCreate, "", nil) {
		return nil, s.deny(ctx, ResourceCredential, ActionCreate, "", &deniedError{msg: p.Name + " does not have access to create credentials"})
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
	if err := s.cfg.Limits.checkPairs(pairs); err != nil {
		return nil, err
	}
	metadata, err := normalizeMetadata(in.Metadata)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Limits.checkMetadata(metadata); err != nil {
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
	sealed, wrapped, err := s.barrier.seal(ctx, id, 1, pairs)
	if err != nil {
		return nil, err
	}
	now := s.now()
	doc := *in.Documentation
	rec := &store.CredentialRecord{
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

func (s *Service) currentCredential(ctx context.Context, id string) (*store.CredentialRecord, error) {
	if err := checkID("credential", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetCredential(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &notFoundError{msg: "Credential not found."}
	}
	return rec, err
}

func (s *Service) credentialRevision(ctx context.Context, id string, revision int32) (*store.CredentialRecord, error) {
	rec, err := s.store.GetCredentialRevision(ctx, id, revision)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &notFoundError{msg: fmt.Sprintf("Revision %d of credential %s not found.", revision, id)}
	}
	return rec, err
}

// GetCredential returns one credential, with its decrypted pairs when allowed and asked for.
func (s *Service) GetCredential(ctx context.Context, id string, metadataOnly bool) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionMetadata, id, nil) {
		return nil, s.deny(ctx, ResourceCredential, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s", p.Name, id), reference: id})
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
	var pairs credpair.Map
	if !metadataOnly && perms[ActionGet] {
		if pairs, err = s.barrier.open(ctx, rec.ID, rec.Revision, rec.SealedPairs, rec.WrappedKey); err != nil {
			return nil, err
		}
		if err := s.auditDisclosure(ctx, "get", ResourceCredential, id, rec.Revision); err != nil {
			return nil, err
		}
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
func (s *Service) ListCredentials(ctx context.Context, limit *int32, token, namePrefix string) ([]*CredentialView, string, error) {
	if err := s.checkListCredentials(ctx); err != nil {
		return nil, "", err
	}
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	if len(namePrefix) > maxNamePrefix {
		return nil, "", invalid("name_prefix is longer than %d bytes", maxNamePrefix)
	}
	// The store's name index holds lower-case names, so the search is case-insensitive.
	page.NamePrefix = strings.ToLower(namePrefix)
	recs, next, err := s.store.ListCredentials(ctx, page)
	return s.views(recs), next, err
}

// checkListCredentials is the access check of every credential listing (current, history, archived).
func (s *Service) checkListCredentials(ctx context.Context) error {
	if s.allowed(ctx, ResourceCredential, ActionList, "", nil) {
		return nil
	}
	p := PrincipalFrom(ctx)
	return s.deny(ctx, ResourceCredential, ActionList, "", &deniedError{msg: p.Name + " does not have access to list credentials"})
}

// maxNamePrefix bounds the name search: no credential name is longer.
const maxNamePrefix = 1024

func (s *Service) views(recs []*store.CredentialRecord) []*CredentialView {
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
		return nil, s.deny(ctx, ResourceCredential, ActionUpdate, id, &deniedError{msg: fmt.Sprintf("%s does not have access to update credential %s", p.Name, id), reference: id})
	}
	var newPairs credpair.Map
	if in.Pairs != nil {
		if len(in.Pairs) == 0 {
			return nil, invalid("Credential Pairs cannot be empty.")
		}
		var err error
		if newPairs, err = normalizePairs(in.Pairs); err != nil {
			return nil, err
		}
		if err := s.cfg.Limits.checkPairs(newPairs); err != nil {
			return nil, err
		}
	}
	var metadata map[string]string
	if in.Metadata != nil {
		var err error
		if metadata, err = normalizeMetadata(in.Metadata); err != nil {
			return nil, err
		}
		if err := s.cfg.Limits.checkMetadata(metadata); err != nil {
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
	var next store.CredentialRecord
	var pairs credpair.Map
	var glass *breakGlass
	err := s.writeRecord(ctx, credentialLockKey(id), func() error {
		cur, err := s.currentCredential(ctx, id)
		if err != nil {
			return err
		}
		if err := in.Expect.check("credential", cur.Revision); err != nil {
			return err
		}
		oldPairs, err := s.barrier.open(ctx, cur.ID, cur.Revision, cur.SealedPairs, cur.WrappedKey)
		if err != nil {
			return err
		}
		next = *cur
		pairs = oldPairs
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
			return invalid("documentation is a required field")
		}
		now := s.writeTime(ctx)
		if !maps.Equal(pairs, oldPairs) {
			next.LastRotationDate = &now
		}
		next.Keys = sortedKeys(pairs)
		if err := s.checkCredentialConflicts(ctx, id, next.Keys); err != nil {
			return err
		}
		if glass, err = s.gate(ctx, heldWrite{resourceType: ResourceCredential, action: ActionUpdate, id: id, intent: in.Intent, expect: in.Expect, pairs: newPairs,
			change: pendingChange{Name: in.Name, Metadata: in.Metadata, Enabled: in.Enabled, Documentation: in.Documentation, Tags: tags, TagsSet: in.TagsSet, Restoring: in.Restoring}}); err != nil {
			return err
		}
		next.Revision, next.ModifiedDate, next.ModifiedBy = cur.Revision+1, now, p.Name
		if next.SealedPairs, next.WrappedKey, err = s.barrier.seal(ctx, id, next.Revision, pairs); err != nil {
			return err
		}
		return s.store.PutCredential(ctx, &next, cur.Revision)
	})
	if err != nil {
		return nil, err
	}
	s.auditLog(ctx, "update", ResourceCredential, id, next.Revision)
	glass.record(ctx, next.Revision)
	s.notifyCredential(ctx, id)
	return s.view(&next, pairs, allPermissions(ActionMetadata, ActionGet, ActionUpdate)), nil
}

// RevertCredential writes a new revision with the content of revision toRevision. expect, when not 0,
// is the revision the revert expects to replace (If-Match).
func (s *Service) RevertCredential(ctx context.Context, id string, toRevision int32, expect ExpectedRevision, intent ChangeIntent) (*CredentialView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceCredential, ActionRevert, id, nil) {
		return nil, s.deny(ctx, ResourceCredential, ActionRevert, id, &deniedError{msg: fmt.Sprintf("%s does not have access to revert credential %s", p.Name, id), reference: id})
	}
	var next store.CredentialRecord
	var glass *breakGlass
	err := s.writeRecord(ctx, credentialLockKey(id), func() error {
		cur, err := s.currentCredential(ctx, id)
		if err != nil {
			return err
		}
		if err := expect.check("credential", cur.Revision); err != nil {
			return err
		}
		target, err := s.credentialRevision(ctx, id, toRevision)
		if err != nil {
			return err
		}
		curPairs, err := s.barrier.open(ctx, id, cur.Revision, cur.SealedPairs, cur.WrappedKey)
		if err != nil {
			return err
		}
		targetPairs, err := s.barrier.open(ctx, id, target.Revision, target.SealedPairs, target.WrappedKey)
		if err != nil {
			return err
		}
		if sameCredentialContent(cur, target) && maps.Equal(curPairs, targetPairs) {
			return invalid("No difference between old and new credential.")
		}
		if err := s.checkCredentialConflicts(ctx, id, target.Keys); err != nil {
			return err
		}
		if glass, err = s.gate(ctx, heldWrite{resourceType: ResourceCredential, action: ActionRevert, id: id, intent: intent, expect: expect, change: pendingChange{ToRevision: toRevision}}); err != nil {
			return err
		}
		// The target's blob is bound to its own revision: the pairs are sealed again for the new one.
		next = *target
		next.Revision, next.ModifiedDate, next.ModifiedBy = cur.Revision+1, s.writeTime(ctx), p.Name
		if next.SealedPairs, next.WrappedKey, err = s.barrier.seal(ctx, id, next.Revision, targetPairs); err != nil {
			return err
		}
		next.LastDecryptedDate = cur.LastDecryptedDate
		return s.store.PutCredential(ctx, &next, cur.Revision)
	})
	if err != nil {
		return nil, err
	}
	s.auditLog(ctx, "revert", ResourceCredential, id, next.Revision)
	glass.record(ctx, next.Revision)
	s.notifyCredential(ctx, id)
	return s.view(&next, nil, nil), nil
}

func sameCredentialContent(a, b *store.CredentialRecord) bool {
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
		return nil, s.deny(ctx, ResourceCredential, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s", p.Name, id), reference: id})
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
	oldPairs, err := s.barrier.open(ctx, id, older.Revision, older.SealedPairs, older.WrappedKey)
	if err != nil {
		return nil, err
	}
	newPairs, err := s.barrier.open(ctx, id, newer.Revision, newer.SealedPairs, newer.WrappedKey)
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
	// Like every other field, only when it differs (Confidant always sent these two).
	if older.ModifiedBy != newer.ModifiedBy {
		d.ModifiedBy = &FieldDiff{Added: newer.ModifiedBy, Removed: older.ModifiedBy}
	}
	if !older.ModifiedDate.Equal(newer.ModifiedDate) {
		d.ModifiedDate = &FieldDiff{Added: FormatTime(newer.ModifiedDate), Removed: FormatTime(older.ModifiedDate)}
	}
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
func keyDiff[V comparable](older, newer map[string]V) *KeysDiff {
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
		return nil, s.deny(ctx, ResourceCredential, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s", p.Name, id), reference: id})
	}
	if err := checkID("credential", id); err != nil {
		return nil, err
	}
	return s.store.CredentialServices(ctx, id)
}

// ArchiveCredential moves a disabled, unmapped credential to the archive; a dry run unless force.
func (s *Service) ArchiveCredential(ctx context.Context, id string, force bool, intent ChangeIntent) (string, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return "", err
	}
	if !s.allowed(ctx, ResourceCredential, ActionArchive, id, nil) {
		return "", s.deny(ctx, ResourceCredential, ActionArchive, id, &deniedError{msg: fmt.Sprintf("%s does not have access to archive credential %s", p.Name, id), reference: id})
	}
	var glass *breakGlass
	var result string
	var archived int32
	err := s.writeRecord(ctx, credentialLockKey(id), func() error {
		cur, err := s.currentCredential(ctx, id)
		if err != nil {
			return err
		}
		if cur.Enabled {
			return invalid("Credential still enabled")
		}
		services, err := s.store.CredentialServices(ctx, id)
		if err != nil {
			return err
		}
		if len(services) > 0 {
			return invalid("Credential has mapped services")
		}
		archived = cur.Revision
		if !force {
			result = "dry-run success"
			return nil
		}
		// A dry run applies nothing, so it needs no approval.
		if glass, err = s.gate(ctx, heldWrite{resourceType: ResourceCredential, action: ActionArchive, id: id, intent: intent}); err != nil {
			return err
		}
		if a := applyingFrom(ctx); a != nil && cur.Revision != a.base {
			return &StaleRevisionError{Kind: "credential", Expected: a.base, Current: cur.Revision}
		}
		err = s.store.ArchiveCredential(ctx, id, cur.Revision, s.writeTime(ctx))
		if errors.Is(err, store.ErrStillMapped) {
			return invalid("Credential has mapped services")
		}
		result = "success"
		return err
	})
	if err != nil {
		return "", err
	}
	if !force {
		s.auditLog(ctx, "archive-dry-run", ResourceCredential, id, archived)
	} else {
		s.auditLog(ctx, "archive", ResourceCredential, id, archived)
		glass.record(ctx, archived)
	}
	return result, nil
}

// ListArchivedCredentials lists every history revision of every credential.
func (s *Service) ListArchivedCredentials(ctx context.Context, limit *int32, token string) ([]*CredentialView, string, error) {
	if err := s.checkListCredentials(ctx); err != nil {
		return nil, "", err
	}
	page, err := s.page(limit, token, s.cfg.HistoryPageLimit)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListAllCredentialRevisions(ctx, page)
	return s.views(recs), next, err
}

// ArchivedCredentialView is an archived credential as listed (metadata only) and when it was archived.
type ArchivedCredentialView struct {
	*CredentialView
	ArchivedAt time.Time
}

// ListCredentialArchive lists the archived credentials by id. Archived values are never served, so
// the check is the one of listing credentials.
func (s *Service) ListCredentialArchive(ctx context.Context, limit *int32, token string) ([]*ArchivedCredentialView, string, error) {
	if err := s.checkListCredentials(ctx); err != nil {
		return nil, "", err
	}
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	archived, next, err := s.store.ListArchivedCredentials(ctx, page)
	if err != nil {
		return nil, "", err
	}
	out := make([]*ArchivedCredentialView, len(archived))
	for i, a := range archived {
		out[i] = &ArchivedCredentialView{CredentialView: s.view(a.Record, nil, nil), ArchivedAt: a.ArchivedAt}
	}
	return out, next, nil
}

// ListCredentialRevisions lists the revisions of one credential, oldest first, all of them unless limit
// asks for a page.
func (s *Service) ListCredentialRevisions(ctx context.Context, id string, limit *int32, token string) ([]*CredentialView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCredential, ActionMetadata, id, nil) {
		return nil, "", s.deny(ctx, ResourceCredential, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to credential %s revisions", p.Name, id)})
	}
	if err := checkID("credential", id); err != nil {
		return nil, "", err
	}
	// One record's history is answered whole, as Confidant does (it pages only the history of every
	// record by HISTORY_PAGE_LIMIT); a caller may still ask for pages with limit.
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListCredentialRevisions(ctx, id, page)
	if errors.Is(err, store.ErrNotFound) {
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
	others := map[string]*store.CredentialRecord{}
	for _, svcID := range services {
		svc, err := s.store.GetService(ctx, svcID)
		if errors.Is(err, store.ErrNotFound) {
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
				if other, err = s.store.GetCredential(ctx, otherID); errors.Is(err, store.ErrNotFound) {
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
	if !s.hooks.enabled() {
		return // no webhook: not worth a read of the store after every write
	}
	services, err := s.store.CredentialServices(ctx, id)
	if err != nil || len(services) == 0 {
		return
	}
	s.hooks.send(webhookEvent{EventType: eventCredentialUpdate, Services: services, Credentials: []string{id}})
}
