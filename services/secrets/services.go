package secrets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

func (s *Service) currentService(ctx context.Context, id string) (*store.ServiceRecord, error) {
	if err := checkID("service", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetService(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
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
		return nil, s.deny(ctx, ResourceService, action, id, &deniedError{msg: fmt.Sprintf("%s does not have access to get service %s", p.Name, id), reference: id})
	}
	rec, err := s.currentService(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.Account != nil && p.AuthType == "kms" && p.Account != *rec.Account {
		return nil, s.deny(ctx, ResourceService, action, id, errAccountMismatch)
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
		if err := s.auditDisclosure(ctx, "get", ResourceService, id, rec.Revision); err != nil {
			return nil, err
		}
	}
	return view, nil
}

// expandCredentials loads mapped credentials (disabled ones included, vanished ones skipped), with
// decrypted pairs when decrypt is set.
func (s *Service) expandCredentials(ctx context.Context, ids []string, decrypt bool) ([]*CredentialView, error) {
	recs, err := s.store.GetCredentials(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := []*CredentialView{}
	for _, rec := range recs {
		var pairs credpair.Map
		if decrypt {
			if pairs, err = s.barrier.open(ctx, rec.ID, rec.Revision, rec.SealedPairs, rec.WrappedKey); err != nil {
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
		return nil, "", s.deny(ctx, ResourceService, ActionList, "", &deniedError{msg: p.Name + " does not have access to list services"})
	}
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListServices(ctx, page)
	return serviceViews(recs), next, err
}

func serviceViews(recs []*store.ServiceRecord) []*ServiceView {
	out := make([]*ServiceView, len(recs))
	for i, r := range recs {
		out[i] = &ServiceView{Record: r, Credentials: []*CredentialView{}, Permissions: map[string]bool{}}
	}
	return out
}

// dedupe keeps the first of each id, in order. It uses a set: a body of a megabyte holds a hundred
// thousand ids, too many to compare pairwise.
func dedupe(ids []string) []string {
	out := []string{}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
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
	if err := s.cfg.Limits.checkServiceCredentials(credentialIDs, blindIDs); err != nil {
		return nil, err
	}
	for _, c := range append(slices.Clone(credentialIDs), blindIDs...) {
		if err := checkID("credential", c); err != nil {
			return nil, err
		}
	}
	if err := refuseBlindCredentials(blindIDs); err != nil {
		return nil, err
	}
	var account *string
	if in.Account != nil && *in.Account != "" {
		if !slices.Contains(slices.Collect(maps.Values(s.cfg.ScopedAuthKeys)), *in.Account) {
			return nil, invalid("%s is not a valid account.", *in.Account)
		}
		a := *in.Account
		account = &a
	}
	var (
		rec   *store.ServiceRecord
		creds []*store.CredentialRecord
		isNew bool
		glass *breakGlass
	)
	err := s.writeRecord(ctx, serviceLockKey(id), func() error {
		cur, err := s.store.GetService(ctx, id)
		isNew = errors.Is(err, store.ErrNotFound)
		if err != nil && !isNew {
			return err
		}
		if isNew && !s.allowed(ctx, ResourceService, ActionCreate, id, nil) {
			return s.deny(ctx, ResourceService, ActionCreate, id, &deniedError{msg: fmt.Sprintf("%s does not have access to create service %s", p.Name, id), reference: id})
		}
		var previous []string
		var prevRevision int32
		// A field the write does not set keeps the current value (a write of only {"enabled": false} once
		// dropped every mapping); a new service starts from the defaults.
		ids, blind, enabled, acct := credentialIDs, blindIDs, in.Enabled == nil || *in.Enabled, account
		if !isNew {
			previous, prevRevision = cur.Credentials, cur.Revision
			if !in.sets("credentials") {
				ids = slices.Clone(cur.Credentials)
			}
			if !in.sets("blind_credentials") {
				blind = slices.Clone(cur.BlindCredentials)
			}
			if !in.sets("enabled") {
				enabled = cur.Enabled
			}
			if !in.sets("account") {
				acct = cur.Account
			}
		}
		if err := in.Expect.check("service", prevRevision); err != nil {
			return err
		}
		added := []string{}
		for _, c := range ids {
			if !slices.Contains(previous, c) {
				added = append(added, c)
			}
		}
		if !s.allowed(ctx, ResourceService, ActionUpdate, id, map[string]any{"credential_ids": ids, "new_credential_ids": added}) {
			return s.deny(ctx, ResourceService, ActionUpdate, id, &deniedError{msg: fmt.Sprintf("%s does not have access to map the credentials because they do not own the credentials being added", p.Name), reference: id})
		}
		if creds, err = s.loadCredentials(ctx, ids); err != nil {
			return err
		}
		if err := s.checkServiceConflicts(creds); err != nil {
			return err
		}
		if glass, err = s.gate(ctx, heldWrite{resourceType: ResourceService, action: ActionUpdate, id: id, intent: in.Intent, expect: in.Expect,
			change: pendingChange{Credentials: credentialIDs, BlindCredentials: blindIDs, Enabled: in.Enabled, Account: in.Account, Fields: in.Fields}}); err != nil {
			return err
		}
		rec = &store.ServiceRecord{
			ID: id, Revision: prevRevision + 1, Enabled: enabled, Account: acct,
			Credentials: ids, BlindCredentials: blind, ModifiedDate: s.writeTime(ctx), ModifiedBy: p.Name,
		}
		return s.store.PutService(ctx, rec, prevRevision)
	})
	if err != nil {
		return nil, err
	}
	s.auditLog(ctx, "update", ResourceService, id, rec.Revision)
	glass.record(ctx, rec.Revision)
	if isNew {
		s.grantNewService(ctx, id)
	}
	s.hooks.send(webhookEvent{EventType: eventServiceUpdate, Services: []string{id}, Credentials: rec.Credentials})
	views := make([]*CredentialView, len(creds))
	for i, c := range creds {
		views[i] = s.view(c, nil, nil)
	}
	return &ServiceView{Record: rec, Credentials: views, Permissions: allPermissions(ActionCreate, ActionMetadata, ActionGet, ActionUpdate)}, nil
}

// refuseBlindCredentials names the blind credential ids of a mapping as unknown. Gantry stores no
// blind credentials (deprecated since Confidant 6.0.0; it has no blind-credential routes), so no id can
// name one, and a mapping to nothing would only make clients fail later: python-confidant-client
// decrypts every blind credential of a service from its metadata.context, data_key and
// credential_pairs, which such an id does not have. Ids that earlier versions stored are never
// rendered (see serviceToPB) and never brought back by a revert.
func refuseBlindCredentials(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	unknown := slices.Clone(ids)
	slices.Sort(unknown)
	return &store.UnknownCredentialsError{IDs: unknown, Blind: true}
}

// loadCredentials returns the current records of ids, or an error naming every unknown id.
func (s *Service) loadCredentials(ctx context.Context, ids []string) ([]*store.CredentialRecord, error) {
	out, err := s.store.GetCredentials(ctx, ids)
	if err != nil {
		return nil, err
	}
	found := make(map[string]bool, len(out))
	for _, rec := range out {
		found[rec.ID] = true
	}
	var unknown []string
	for _, id := range ids {
		if !found[id] {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, &store.UnknownCredentialsError{IDs: unknown}
	}
	return out, nil
}

// checkServiceConflicts refuses a mapping in which two credentials expose the same key.
func (s *Service) checkServiceConflicts(creds []*store.CredentialRecord) error {
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

// RevertService writes a new revision with the mapping of revision toRevision. expect, when not 0,
// is the revision the revert expects to replace (If-Match).
func (s *Service) RevertService(ctx context.Context, id string, toRevision int32, expect ExpectedRevision, intent ChangeIntent) (*ServiceView, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if !s.allowed(ctx, ResourceService, ActionRevert, id, nil) {
		return nil, s.deny(ctx, ResourceService, ActionRevert, id, &deniedError{msg: fmt.Sprintf("%s does not have access to revert service %s", p.Name, id), reference: id})
	}
	var (
		rec   *store.ServiceRecord
		creds []*store.CredentialRecord
		ids   []string
		glass *breakGlass
	)
	err := s.writeRecord(ctx, serviceLockKey(id), func() error {
		cur, err := s.currentService(ctx, id)
		if err != nil {
			return err
		}
		if err := expect.check("service", cur.Revision); err != nil {
			return err
		}
		target, err := s.store.GetServiceRevision(ctx, id, toRevision)
		if errors.Is(err, store.ErrNotFound) {
			return &notFoundError{msg: fmt.Sprintf("Revision %d of service %s not found.", toRevision, id)}
		} else if err != nil {
			return err
		}
		// Credentials archived since that revision cannot come back; keep the ones that still exist.
		creds, ids = nil, nil
		for _, cid := range target.Credentials {
			rec, err := s.store.GetCredential(ctx, cid)
			if errors.Is(err, store.ErrNotFound) {
				continue
			} else if err != nil {
				return err
			}
			creds, ids = append(creds, rec), append(ids, cid)
		}
		// Blind credential ids of the target cannot come back either (see refuseBlindCredentials).
		if sameSet(ids, cur.Credentials) && len(cur.BlindCredentials) == 0 &&
			ptrEqual(target.Account, cur.Account) && target.Enabled == cur.Enabled {
			return invalid("No difference between old and new service.")
		}
		if err := s.checkServiceConflicts(creds); err != nil {
			return err
		}
		if glass, err = s.gate(ctx, heldWrite{resourceType: ResourceService, action: ActionRevert, id: id, intent: intent, expect: expect, change: pendingChange{ToRevision: toRevision}}); err != nil {
			return err
		}
		rec = &store.ServiceRecord{
			ID: id, Revision: cur.Revision + 1, Enabled: target.Enabled, Account: target.Account,
			Credentials: ids, BlindCredentials: []string{}, ModifiedDate: s.writeTime(ctx), ModifiedBy: p.Name,
		}
		return s.store.PutService(ctx, rec, cur.Revision)
	})
	if err != nil {
		return nil, err
	}
	s.auditLog(ctx, "revert", ResourceService, id, rec.Revision)
	glass.record(ctx, rec.Revision)
	s.hooks.send(webhookEvent{EventType: eventServiceUpdate, Services: []string{id}, Credentials: ids})
	views := make([]*CredentialView, len(creds))
	for i, c := range creds {
		views[i] = s.view(c, nil, nil)
	}
	return &ServiceView{Record: rec, Credentials: views, Permissions: map[string]bool{}}, nil
}

// DiffService compares two revisions of a service.
func (s *Service) DiffService(ctx context.Context, id string, oldRevision, newRevision int32) (*ServiceDiff, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionMetadata, id, nil) {
		return nil, s.deny(ctx, ResourceService, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to service %s", p.Name, id), reference: id})
	}
	if err := checkID("service", id); err != nil {
		return nil, err
	}
	if oldRevision > newRevision {
		oldRevision, newRevision = newRevision, oldRevision
	}
	get := func(rev int32) (*store.ServiceRecord, error) {
		rec, err := s.store.GetServiceRevision(ctx, id, rev)
		if errors.Is(err, store.ErrNotFound) {
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
	// Like every other field, only when it differs (Confidant always sent these two).
	if older.ModifiedBy != newer.ModifiedBy {
		d.ModifiedBy = &FieldDiff{Added: newer.ModifiedBy, Removed: older.ModifiedBy}
	}
	if !older.ModifiedDate.Equal(newer.ModifiedDate) {
		d.ModifiedDate = &FieldDiff{Added: FormatTime(newer.ModifiedDate), Removed: FormatTime(older.ModifiedDate)}
	}
	return d, nil
}

// ListArchivedServices lists every history revision of every service.
func (s *Service) ListArchivedServices(ctx context.Context, limit *int32, token string) ([]*ServiceView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionList, "", nil) {
		return nil, "", s.deny(ctx, ResourceService, ActionList, "", &deniedError{msg: p.Name + " does not have access to list services"})
	}
	page, err := s.page(limit, token, s.cfg.HistoryPageLimit)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListAllServiceRevisions(ctx, page)
	return serviceViews(recs), next, err
}

// ListServiceRevisions lists the revisions of one service, oldest first, all of them unless limit asks
// for a page.
func (s *Service) ListServiceRevisions(ctx context.Context, id string, limit *int32, token string) ([]*ServiceView, string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionMetadata, id, nil) {
		return nil, "", s.deny(ctx, ResourceService, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to service %s revisions", p.Name, id)})
	}
	if err := checkID("service", id); err != nil {
		return nil, "", err
	}
	// One record's history is answered whole, as Confidant does (it pages only the history of every
	// record by HISTORY_PAGE_LIMIT); a caller may still ask for pages with limit.
	page, err := s.page(limit, token, 0)
	if err != nil {
		return nil, "", err
	}
	recs, next, err := s.store.ListServiceRevisions(ctx, id, page)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", &notFoundError{msg: "Service not found."}
	}
	return serviceViews(recs), next, err
}
