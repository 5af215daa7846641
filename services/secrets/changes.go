package secrets

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/audit"
	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Two-person approval of writes. A write to a record an approval rule protects (approvals.go) does
// not apply: it becomes a change request holding the intended change (new pairs sealed, bound to the
// request) and the revision it was based on. When the rule's number of approvers agree, the change
// is applied by the very write it was, as the requester, with the base revision as its If-Match, so
// a record that moved on in between is refused as stale, never merged.
//
// Applying is not one storage transaction with the request's own update, so it is made idempotent:
// the final approver first records itself (compare-and-set on the request's version, which also
// decides between two approvers pressing at once) with the apply time, the write is stamped with
// that time, and then the request is marked applied. A request left between the two steps (a crash)
// is settled by the next reader: the record's revision after the base, written by the requester at
// exactly that time, is the applied change; the base still current means apply again; anything else
// is stale.

// ChangeIntent is what the writer says about a write an approval rule may hold.
type ChangeIntent struct {
	// Reason is shown to approvers; required to break glass.
	Reason string
	// BreakGlass applies the write at once when the rule allows the principal to.
	BreakGlass bool
}

// maxChangeReason bounds a reason: it is shown in Slack and kept in every request.
const maxChangeReason = 1000

// ChangeHeldError is a write that was not applied but held for approval: the transport answers it
// as a success carrying the change request (REST 202).
type ChangeHeldError struct {
	Request *ChangeRequestView
}

func (e *ChangeHeldError) Error() string {
	return "the change is held for approval as change request " + e.Request.Record.ID
}

// changeStateError refuses a decision on a request that is not pending (412).
type changeStateError struct{ msg string }

func (e *changeStateError) Error() string { return e.msg }

// ChangeRequestView is a change request as responses show it.
type ChangeRequestView struct {
	Record  *store.ChangeRequestRecord
	Summary ChangeSummary
}

// ChangeSummary is what a change does, by name only: it is what approvers see, in the API and in
// Slack, and never holds a value.
type ChangeSummary struct {
	KeysAdded               []string `json:"keys_added,omitempty"`
	KeysRemoved             []string `json:"keys_removed,omitempty"`
	KeysChanged             []string `json:"keys_changed,omitempty"`
	MetadataChanged         []string `json:"metadata_changed,omitempty"`
	CredentialsAdded        []string `json:"credentials_added,omitempty"`
	CredentialsRemoved      []string `json:"credentials_removed,omitempty"`
	BlindCredentialsAdded   []string `json:"blind_credentials_added,omitempty"`
	BlindCredentialsRemoved []string `json:"blind_credentials_removed,omitempty"`
	Name                    *string  `json:"name,omitempty"`
	Enabled                 *bool    `json:"enabled,omitempty"`
	FieldsChanged           []string `json:"fields_changed,omitempty"`
	ToRevision              *int32   `json:"to_revision,omitempty"`
}

// pendingChange is the held write without its new pairs (sealed apart): what applying replays.
type pendingChange struct {
	// Credential update fields (CredentialInput without Pairs, Expect and the intent).
	Name          *string        `json:"name,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
	Enabled       *bool          `json:"enabled,omitempty"`
	Documentation *string        `json:"documentation,omitempty"`
	Tags          []string       `json:"tags,omitempty"`
	TagsSet       bool           `json:"tags_set,omitempty"`
	Restoring     bool           `json:"restoring,omitempty"`
	HasPairs      bool           `json:"has_pairs,omitempty"`
	// Service update fields.
	Credentials      []string        `json:"credentials,omitempty"`
	BlindCredentials []string        `json:"blind_credentials,omitempty"`
	Account          *string         `json:"account,omitempty"`
	Fields           map[string]bool `json:"fields,omitempty"`
	// ToRevision is a revert's target.
	ToRevision int32 `json:"to_revision,omitempty"`
}

// heldWrite is a write the approval gate looks at.
type heldWrite struct {
	resourceType, action, id string
	intent                   ChangeIntent
	expect                   ExpectedRevision
	change                   pendingChange
	// pairs are a credential update's new pairs, nil when it keeps them.
	pairs credpair.Map
}

// applyingKey marks the context of a write that applies an approved (or break-glass) change: the
// gate lets it through and the write is stamped with the apply time.
type applyingKey struct{}

type applying struct {
	requestID string
	at        time.Time
	// base is the revision the change was made against (an archive checks it; the other writes
	// carry it as their If-Match).
	base int32
	// approvedBy are the approvers, for the audit trail ("" for break glass).
	approvedBy []string
}

func applyingFrom(ctx context.Context) *applying {
	a, _ := ctx.Value(applyingKey{}).(*applying)
	return a
}

// writeTime is the time a write stamps on the record: now, or the apply time of an approved change
// (which is what marks the revision as the change's, see settle).
func (s *Service) writeTime(ctx context.Context) time.Time {
	if a := applyingFrom(ctx); a != nil {
		return a.at
	}
	return s.now()
}

// breakGlass is a write the gate let through on a break-glass intent: once it applied, record()
// leaves the notice and the audit record.
type breakGlass struct {
	s    *Service
	rule *approvalRule
	w    heldWrite
	name string
	base int32
	// summary is what the write changes, read before it.
	summary ChangeSummary
}

// gate decides whether a write applies now. It returns a *ChangeHeldError when the write is held
// (nothing was written), a breakGlass to record once the write applied, or neither. Writes of an
// approved change, and every write when no approval policy is configured, pass.
func (s *Service) gate(ctx context.Context, w heldWrite) (*breakGlass, error) {
	if s.approvals == nil || applyingFrom(ctx) != nil {
		return nil, nil
	}
	name, tags, base, err := s.currentState(ctx, w.resourceType, w.id)
	if err != nil {
		return nil, err
	}
	rule := s.approvals.ruleFor(w.resourceType, w.id, name, tags)
	if rule == nil && (w.change.Name != nil || w.change.TagsSet) {
		// A rename or retag into a protected name or tag is held like a change of a protected
		// record: the rule of what the record becomes counts too.
		nextName, nextTags := name, tags
		if w.change.Name != nil {
			nextName = *w.change.Name
		}
		if w.change.TagsSet {
			nextTags = w.change.Tags
		}
		rule = s.approvals.ruleFor(w.resourceType, w.id, nextName, nextTags)
	}
	if rule == nil {
		return nil, nil
	}
	p := PrincipalFrom(ctx)
	who := principalString(p)
	if len(w.intent.Reason) > maxChangeReason {
		return nil, invalid("change_reason is longer than %d bytes", maxChangeReason)
	}
	if w.intent.BreakGlass {
		if w.intent.Reason == "" {
			return nil, invalid("break_glass needs a change_reason")
		}
		if !s.approvals.matches(rule.BreakGlass, who) {
			return nil, s.deny(ctx, w.resourceType, "break-glass", w.id, &deniedError{msg: fmt.Sprintf("%s may not break glass on %s %s", p.Name, w.resourceType, w.id), reference: w.id})
		}
		// What it changes is read now, from the record the write replaces, as for a held write.
		summary, err := s.summarize(ctx, w, base)
		if err != nil {
			return nil, err
		}
		return &breakGlass{s: s, rule: rule, w: w, name: name, base: base, summary: summary}, nil
	}
	if s.approvals.matches(rule.Exempt, who) {
		return nil, nil
	}
	if err := w.expect.check(w.resourceType, base); err != nil {
		return nil, err
	}
	view, err := s.createChangeRequest(ctx, rule, w, name, base)
	if err != nil {
		return nil, err
	}
	return nil, &ChangeHeldError{Request: view}
}

// currentState reads what the approval rules match on, and the base revision (0: no such service).
func (s *Service) currentState(ctx context.Context, resourceType, id string) (name string, tags []string, revision int32, err error) {
	if resourceType == ResourceCredential {
		rec, err := s.currentCredential(ctx, id)
		if err != nil {
			return "", nil, 0, err
		}
		return rec.Name, rec.Tags, rec.Revision, nil
	}
	rec, err := s.store.GetService(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return id, nil, 0, nil
	}
	if err != nil {
		return "", nil, 0, err
	}
	return id, nil, rec.Revision, nil
}

// newChangeID returns an id that sorts by creation time (the store lists by id): the time in
// microseconds, then random bytes.
func (s *Service) newChangeID() (string, error) {
	random, err := newID()
	if err != nil {
		return "", err
	}
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(s.now().UnixMicro()))
	return hex.EncodeToString(t[:]) + random[:16], nil
}

func (s *Service) createChangeRequest(ctx context.Context, rule *approvalRule, w heldWrite, name string, base int32) (*ChangeRequestView, error) {
	id, err := s.newChangeID()
	if err != nil {
		return nil, err
	}
	summary, err := s.summarize(ctx, w, base)
	if err != nil {
		return nil, err
	}
	now := s.now()
	rec := &store.ChangeRequestRecord{
		ID: id, Version: 1, Action: w.action, ResourceType: w.resourceType, ResourceID: w.id, ResourceName: name,
		BaseRevision: base, Status: store.ChangePending, RequestedBy: principalString(PrincipalFrom(ctx)),
		Reason: w.intent.Reason, Created: now, Expires: now.Add(rule.TTL), Required: int32(rule.Approvals),
	}
	if s.approvals.slack.Team != "" && rule.Channel != "" {
		rec.Team, rec.Bot, rec.Channel = s.approvals.slack.Team, s.approvals.slack.Bot, rule.Channel
	}
	w.change.HasPairs = w.pairs != nil
	if rec.Change, err = json.Marshal(w.change); err != nil {
		return nil, err
	}
	if rec.Summary, err = json.Marshal(summary); err != nil {
		return nil, err
	}
	if w.pairs != nil {
		if rec.SealedPairs, rec.WrappedKey, err = s.barrier.sealChange(ctx, w.id, id, w.pairs); err != nil {
			return nil, err
		}
	}
	if err := s.store.PutChangeRequest(ctx, rec, 0); err != nil {
		return nil, err
	}
	s.auditChange(ctx, "change-request", rec, "")
	return &ChangeRequestView{Record: rec, Summary: summary}, nil
}

// summarize says what the write changes, by name. Whether a key's value changes is only said to a
// requester who may read the credential; anyone else learns nothing about the current values from
// it: every key kept counts as changed.
func (s *Service) summarize(ctx context.Context, w heldWrite, base int32) (ChangeSummary, error) {
	switch {
	case w.action == ActionRevert:
		to := w.change.ToRevision
		return ChangeSummary{ToRevision: &to}, nil
	case w.action == ActionArchive:
		return ChangeSummary{}, nil
	case w.resourceType == ResourceCredential:
		return s.summarizeCredential(ctx, w)
	}
	return s.summarizeService(ctx, w, base)
}

func (s *Service) summarizeCredential(ctx context.Context, w heldWrite) (ChangeSummary, error) {
	var sum ChangeSummary
	c := w.change
	cur, err := s.currentCredential(ctx, w.id)
	if err != nil {
		return sum, err
	}
	if w.pairs != nil {
		var old credpair.Map
		if s.allowed(ctx, ResourceCredential, ActionGet, w.id, nil) {
			if old, err = s.barrier.open(ctx, cur.ID, cur.Revision, cur.SealedPairs, cur.WrappedKey); err != nil {
				return sum, err
			}
		}
		for _, k := range cur.Keys {
			if _, kept := w.pairs[k]; !kept {
				sum.KeysRemoved = append(sum.KeysRemoved, k)
			} else if old == nil || old[k] != w.pairs[k] {
				sum.KeysChanged = append(sum.KeysChanged, k)
			}
		}
		for _, k := range sortedKeys(w.pairs) {
			if !slices.Contains(cur.Keys, k) {
				sum.KeysAdded = append(sum.KeysAdded, k)
			}
		}
	}
	if c.Name != nil && *c.Name != cur.Name {
		sum.Name = c.Name
	}
	if c.Enabled != nil && *c.Enabled != cur.Enabled {
		sum.Enabled = c.Enabled
	}
	if c.Metadata != nil {
		meta, err := normalizeMetadata(c.Metadata)
		if err != nil {
			return sum, err
		}
		for _, k := range sortedKeys(meta) {
			if old, ok := cur.Metadata[k]; !ok || old != meta[k] {
				sum.MetadataChanged = append(sum.MetadataChanged, k)
			}
		}
		for _, k := range sortedKeys(cur.Metadata) {
			if _, ok := meta[k]; !ok {
				sum.MetadataChanged = append(sum.MetadataChanged, k)
			}
		}
	}
	if c.Documentation != nil && !ptrEqual(c.Documentation, cur.Documentation) {
		sum.FieldsChanged = append(sum.FieldsChanged, "documentation")
	}
	if c.TagsSet && !sameSet(c.Tags, cur.Tags) {
		sum.FieldsChanged = append(sum.FieldsChanged, "tags")
	}
	return sum, nil
}

func (s *Service) summarizeService(ctx context.Context, w heldWrite, base int32) (ChangeSummary, error) {
	var sum ChangeSummary
	c := w.change
	var cur store.ServiceRecord
	if base > 0 {
		rec, err := s.store.GetService(ctx, w.id)
		if err != nil {
			return sum, err
		}
		cur = *rec
	}
	sets := func(f string) bool { return c.Fields == nil || c.Fields[f] }
	if sets("credentials") {
		sum.CredentialsAdded, sum.CredentialsRemoved = addedRemoved(cur.Credentials, c.Credentials)
	}
	if sets("blind_credentials") {
		sum.BlindCredentialsAdded, sum.BlindCredentialsRemoved = addedRemoved(cur.BlindCredentials, c.BlindCredentials)
	}
	enabled := c.Enabled == nil || *c.Enabled
	if sets("enabled") && (base == 0 || enabled != cur.Enabled) {
		sum.Enabled = &enabled
	}
	if sets("account") && !ptrEqual(c.Account, cur.Account) {
		sum.FieldsChanged = append(sum.FieldsChanged, "account")
	}
	return sum, nil
}

func addedRemoved(old, next []string) (added, removed []string) {
	for _, id := range next {
		if !slices.Contains(old, id) && !slices.Contains(added, id) {
			added = append(added, id)
		}
	}
	for _, id := range old {
		if !slices.Contains(next, id) && !slices.Contains(removed, id) {
			removed = append(removed, id)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

// record writes what a break-glass write leaves behind, once it applied as revision: a change
// request in status break_glass (Slack's loud notice comes from it) and its audit record.
func (b *breakGlass) record(ctx context.Context, revision int32) {
	if b == nil {
		return
	}
	s := b.s
	rec := &store.ChangeRequestRecord{
		Version: 1, Action: b.w.action, ResourceType: b.w.resourceType, ResourceID: b.w.id, ResourceName: b.name,
		BaseRevision: b.base, Status: store.ChangeBrokeGlass, RequestedBy: principalString(PrincipalFrom(ctx)),
		Reason: b.w.intent.Reason, Created: s.now(), AppliedRevision: revision,
	}
	rec.Expires, rec.DecidedBy, rec.DecidedAt = rec.Created, rec.RequestedBy, &rec.Created
	if s.approvals.slack.Team != "" && b.rule.Channel != "" {
		rec.Team, rec.Bot, rec.Channel = s.approvals.slack.Team, s.approvals.slack.Bot, b.rule.Channel
	}
	rec.Summary, _ = json.Marshal(b.summary)
	id, err := s.newChangeID()
	if err == nil {
		rec.ID = id
		err = s.store.PutChangeRequest(ctx, rec, 0)
	}
	if err != nil {
		// The write stands; the trail below still says what happened.
		s.logger.Error("could not record the break-glass notice", zap.String("resource_id", b.w.id), zap.Error(err))
	}
	s.auditChange(ctx, "break-glass", rec, "")
}

// GetChangeRequest returns one change request the caller may see.
func (s *Service) GetChangeRequest(ctx context.Context, id string) (*ChangeRequestView, error) {
	rec, err := s.changeRequest(ctx, id)
	if err != nil {
		return nil, err
	}
	if !s.maySeeChange(ctx, rec) {
		p := PrincipalFrom(ctx)
		return nil, s.deny(ctx, "change", ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to change request %s", p.Name, id), reference: id})
	}
	return changeView(rec), nil
}

func (s *Service) changeRequest(ctx context.Context, id string) (*store.ChangeRequestRecord, error) {
	if err := checkID("change request", id); err != nil {
		return nil, err
	}
	rec, err := s.store.GetChangeRequest(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &notFoundError{msg: "Change request not found."}
	}
	if err != nil {
		return nil, err
	}
	return s.settle(ctx, rec)
}

func changeView(rec *store.ChangeRequestRecord) *ChangeRequestView {
	v := &ChangeRequestView{Record: rec}
	_ = json.Unmarshal(rec.Summary, &v.Summary)
	return v
}

// maySeeChange: the requester, an approver of the request's rule, or whoever may read the record's
// metadata.
func (s *Service) maySeeChange(ctx context.Context, rec *store.ChangeRequestRecord) bool {
	who := principalString(PrincipalFrom(ctx))
	if rec.RequestedBy == who {
		return true
	}
	if s.approvals != nil {
		var tags []string
		if s.approvals.matchesTags && rec.ResourceType == ResourceCredential {
			if cur, err := s.store.GetCredential(ctx, rec.ResourceID); err == nil {
				tags = cur.Tags
			}
		}
		if rule := s.approvals.ruleFor(rec.ResourceType, rec.ResourceID, rec.ResourceName, tags); rule != nil && s.approvals.matches(rule.Approvers, who) {
			return true
		}
	}
	return s.allowed(ctx, rec.ResourceType, ActionMetadata, rec.ResourceID, nil)
}

// changeStatuses are every status a change request can have.
var changeStatuses = []string{store.ChangePending, store.ChangeApplied, store.ChangeRejected, store.ChangeCancelled,
	store.ChangeExpired, store.ChangeStale, store.ChangeFailed, store.ChangeBrokeGlass}

// maxChangeListing bounds one listing of change requests.
const maxChangeListing = 1000

// ListChangeRequests lists the change requests the caller may see, newest first, optionally only
// those in one status. The token is the id to continue below.
func (s *Service) ListChangeRequests(ctx context.Context, statusFilter string, limit *int32, token string) ([]*ChangeRequestView, string, error) {
	if statusFilter != "" && !slices.Contains(changeStatuses, statusFilter) {
		return nil, "", invalid("status must be one of %s", strings.Join(changeStatuses, ", "))
	}
	n := 100
	if limit != nil {
		if *limit < 1 || *limit > maxChangeListing {
			return nil, "", invalid("limit must be 1 to %d", maxChangeListing)
		}
		n = int(*limit)
	}
	if token != "" {
		if err := checkID("next_page", token); err != nil {
			return nil, "", err
		}
	}
	all, err := s.allChangeRequests(ctx)
	if err != nil {
		return nil, "", err
	}
	var out []*ChangeRequestView
	for i := len(all) - 1; i >= 0; i-- {
		rec := all[i]
		if token != "" && rec.ID >= token {
			continue
		}
		if settled, err := s.settle(ctx, rec); err != nil {
			// Shown as stored; the next reader settles it.
			s.logger.Warn("could not settle a change request", zap.String("change_request", rec.ID), zap.Error(err))
		} else {
			rec = settled
		}
		if (statusFilter != "" && rec.Status != statusFilter) || !s.maySeeChange(ctx, rec) {
			continue
		}
		if len(out) == n {
			return out, out[n-1].Record.ID, nil
		}
		out = append(out, changeView(rec))
	}
	return out, "", nil
}

// allChangeRequests reads every change request, oldest first.
func (s *Service) allChangeRequests(ctx context.Context) ([]*store.ChangeRequestRecord, error) {
	var all []*store.ChangeRequestRecord
	token := ""
	for {
		page, next, err := s.store.ListChangeRequests(ctx, store.Page{Limit: 500, Token: token})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		token = next
	}
}

// ApproveChangeRequest records the caller's approval; the last one needed applies the change.
func (s *Service) ApproveChangeRequest(ctx context.Context, id, via string) (*ChangeRequestView, error) {
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	return s.decide(ctx, id, func(rec *store.ChangeRequestRecord, rule *approvalRule, who string) (bool, error) {
		if err := s.checkApprover(ctx, rec, rule, who, "approve"); err != nil {
			return false, err
		}
		if slices.ContainsFunc(rec.Approvals, func(a store.ChangeApproval) bool { return a.By == who }) {
			return false, &changeStateError{msg: "You approved this change request already."}
		}
		// Whole microseconds: the apply time marks the written revision (see appliedAlready), and
		// every stored form keeps at least that precision.
		now := s.now().Truncate(time.Microsecond)
		rec.Approvals = append(rec.Approvals, store.ChangeApproval{By: who, At: now, Via: via})
		if int32(len(rec.Approvals)) >= rec.Required {
			rec.DecidedBy, rec.DecidedAt = who, &now
			return true, nil
		}
		return false, nil
	}, "change-approve")
}

// RejectChangeRequest ends a pending request without applying it: an approver of its rule.
func (s *Service) RejectChangeRequest(ctx context.Context, id, reason string) (*ChangeRequestView, error) {
	if len(reason) > maxChangeReason {
		return nil, invalid("reason is longer than %d bytes", maxChangeReason)
	}
	return s.decide(ctx, id, func(rec *store.ChangeRequestRecord, rule *approvalRule, who string) (bool, error) {
		if err := s.checkApprover(ctx, rec, rule, who, "reject"); err != nil {
			return false, err
		}
		now := s.now()
		rec.Status, rec.DecidedBy, rec.DecidedAt, rec.DecisionReason = store.ChangeRejected, who, &now, reason
		return false, nil
	}, "change-reject")
}

// CancelChangeRequest withdraws a pending request: its requester only.
func (s *Service) CancelChangeRequest(ctx context.Context, id, reason string) (*ChangeRequestView, error) {
	if len(reason) > maxChangeReason {
		return nil, invalid("reason is longer than %d bytes", maxChangeReason)
	}
	return s.decide(ctx, id, func(rec *store.ChangeRequestRecord, _ *approvalRule, who string) (bool, error) {
		if rec.RequestedBy != who {
			return false, s.deny(ctx, "change", "cancel", rec.ID, &deniedError{msg: "Only the requester may cancel a change request.", reference: rec.ID})
		}
		now := s.now()
		rec.Status, rec.DecidedBy, rec.DecidedAt, rec.DecisionReason = store.ChangeCancelled, who, &now, reason
		return false, nil
	}, "change-cancel")
}

// checkApprover refuses the requester and anyone the rule does not name. The rule is the one
// protecting the record now, so a policy tightened since the request was made holds.
func (s *Service) checkApprover(ctx context.Context, rec *store.ChangeRequestRecord, rule *approvalRule, who, verb string) error {
	if rec.RequestedBy == who {
		return s.deny(ctx, "change", verb, rec.ID, &deniedError{msg: "You cannot " + verb + " your own change request: another approver must.", reference: rec.ID})
	}
	if rule == nil || !s.approvals.matches(rule.Approvers, who) {
		return s.deny(ctx, "change", verb, rec.ID, &deniedError{msg: fmt.Sprintf("%s is not an approver of change request %s", who, rec.ID), reference: rec.ID})
	}
	return nil
}

// decide runs one decision on a pending request under compare-and-set on its version: mutate changes
// rec and says whether the change is now to be applied. A lost race reads again, so two approvers
// pressing at once are both counted, or the second finds the request decided.
func (s *Service) decide(ctx context.Context, id string, mutate func(rec *store.ChangeRequestRecord, rule *approvalRule, who string) (bool, error), auditAction string) (*ChangeRequestView, error) {
	if s.approvals == nil {
		return nil, &changeStateError{msg: "Change approvals are not configured (the policy file has no approvals: section)."}
	}
	who := principalString(PrincipalFrom(ctx))
	for attempt := 0; ; attempt++ {
		rec, err := s.changeRequest(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec.Status != store.ChangePending || rec.DecidedAt != nil {
			return nil, &changeStateError{msg: fmt.Sprintf("Change request %s is %s, not pending.", id, rec.Status)}
		}
		name, tags, _, err := s.currentState(ctx, rec.ResourceType, rec.ResourceID)
		if err != nil && !isNotFound(err) {
			return nil, err
		}
		if name == "" {
			name = rec.ResourceName
		}
		next := *rec
		next.Approvals = slices.Clone(rec.Approvals)
		next.Version = rec.Version + 1
		apply, err := mutate(&next, s.approvals.ruleFor(rec.ResourceType, rec.ResourceID, name, tags), who)
		if err != nil {
			return nil, err
		}
		sealedUntilDecided(&next)
		err = s.store.PutChangeRequest(ctx, &next, rec.Version)
		if errors.Is(err, store.ErrRevisionConflict) && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.auditChange(ctx, auditAction, &next, next.DecisionReason)
		if apply {
			settled, err := s.apply(ctx, &next)
			if err != nil {
				return nil, err
			}
			return changeView(settled), nil
		}
		return changeView(&next), nil
	}
}

// refusedForGood tells a write that will never apply as asked (bad input, access, conflicts) from a
// passing failure of a dependency.
func refusedForGood(err error) bool {
	var (
		inv      *invalidError
		denied   *deniedError
		conflict *conflictError
		taken    *store.NameTakenError
		unknown  *store.UnknownCredentialsError
		limit    *LimitError
	)
	return errors.As(err, &inv) || errors.As(err, &denied) || errors.As(err, &conflict) || errors.As(err, &taken) ||
		errors.As(err, &unknown) || errors.As(err, &limit)
}

// sealedUntilDecided drops a request's sealed new pairs once it is no longer pending: nothing will
// ever open them again, so neither the store nor its backups keep them.
func sealedUntilDecided(rec *store.ChangeRequestRecord) {
	if rec.Status != store.ChangePending {
		rec.SealedPairs, rec.WrappedKey = nil, nil
	}
}

func isNotFound(err error) bool {
	var nf *notFoundError
	return errors.As(err, &nf)
}

// settle brings a request up to date: a pending one past its expiry expires; one whose last
// approval was recorded but whose outcome was not (a crash between the steps) is applied or found
// applied or stale. Another replica settling it at once wins the compare-and-set; the record it
// wrote is read back.
func (s *Service) settle(ctx context.Context, rec *store.ChangeRequestRecord) (*store.ChangeRequestRecord, error) {
	if rec.Status != store.ChangePending {
		return rec, nil
	}
	if rec.DecidedAt != nil {
		return s.apply(ctx, rec)
	}
	if s.now().Before(rec.Expires) {
		return rec, nil
	}
	next := *rec
	next.Version, next.Status = rec.Version+1, store.ChangeExpired
	sealedUntilDecided(&next)
	if err := s.store.PutChangeRequest(ctx, &next, rec.Version); err != nil {
		if errors.Is(err, store.ErrRevisionConflict) {
			return s.store.GetChangeRequest(ctx, rec.ID)
		}
		return nil, err
	}
	s.auditChange(ctx, "change-expire", &next, "")
	return &next, nil
}

// apply writes an approved change (rec is pending with DecidedAt set, stored) and records the
// outcome: applied with its revision, or stale.
func (s *Service) apply(ctx context.Context, rec *store.ChangeRequestRecord) (*store.ChangeRequestRecord, error) {
	revision, err := s.replay(ctx, rec)
	status, reason := store.ChangeApplied, ""
	var stale *StaleRevisionError
	switch {
	case err == nil:
	case errors.As(err, &stale) || isNotFound(err):
		if revision, err = s.appliedAlready(ctx, rec); err != nil {
			return nil, err
		}
		if revision == 0 {
			status = store.ChangeStale
		}
	case refusedForGood(err):
		status, reason = store.ChangeFailed, statusMessage(err)
	default:
		// Storage or KMS trouble: the request stays approved but unapplied; the next reader tries
		// again.
		return nil, err
	}
	next := *rec
	next.Version, next.Status, next.AppliedRevision = rec.Version+1, status, revision
	if reason != "" {
		next.DecisionReason = reason
	}
	sealedUntilDecided(&next)
	if err := s.store.PutChangeRequest(ctx, &next, rec.Version); err != nil {
		if errors.Is(err, store.ErrRevisionConflict) {
			return s.store.GetChangeRequest(ctx, rec.ID)
		}
		return nil, err
	}
	switch status {
	case store.ChangeStale:
		s.auditChange(ctx, "change-stale", &next, "the record moved on from the base revision")
	case store.ChangeFailed:
		s.auditChange(ctx, "change-failed", &next, reason)
	default:
		s.auditChange(ctx, "change-applied", &next, "")
	}
	return &next, nil
}

// appliedAlready tells whether the change was written already (by this request, before a crash or
// by another replica): the revision after the base written by the requester at the apply time. It
// returns that revision, or 0.
func (s *Service) appliedAlready(ctx context.Context, rec *store.ChangeRequestRecord) (int32, error) {
	at := *rec.DecidedAt
	requester := parsePrincipal(rec.RequestedBy).Name
	switch {
	case rec.ResourceType == ResourceCredential && rec.Action == ActionArchive:
		arch, err := s.store.GetArchivedCredential(ctx, rec.ResourceID)
		if err == nil && arch.Revision == rec.BaseRevision {
			return arch.Revision, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
	case rec.ResourceType == ResourceCredential:
		r, err := s.store.GetCredentialRevision(ctx, rec.ResourceID, rec.BaseRevision+1)
		if err == nil && r.ModifiedBy == requester && r.ModifiedDate.Truncate(time.Microsecond).Equal(at) {
			return r.Revision, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
	default:
		r, err := s.store.GetServiceRevision(ctx, rec.ResourceID, rec.BaseRevision+1)
		if err == nil && r.ModifiedBy == requester && r.ModifiedDate.Truncate(time.Microsecond).Equal(at) {
			return r.Revision, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
	}
	return 0, nil
}

// replay performs the held write as its requester, with the base revision as its If-Match, stamped
// with the apply time. It returns the revision written (an archive: the archived one).
func (s *Service) replay(ctx context.Context, rec *store.ChangeRequestRecord) (int32, error) {
	var c pendingChange
	if err := json.Unmarshal(rec.Change, &c); err != nil {
		return 0, fmt.Errorf("change request %s: damaged change: %w", rec.ID, err)
	}
	approvers := make([]string, len(rec.Approvals))
	for i, a := range rec.Approvals {
		approvers[i] = a.By
	}
	requester := parsePrincipal(rec.RequestedBy)
	requester.AuthType = "change-request" // the requester's own credentials are not in this call
	actx := WithPrincipal(ctx, requester)
	actx = context.WithValue(actx, applyingKey{}, &applying{requestID: rec.ID, at: *rec.DecidedAt, base: rec.BaseRevision, approvedBy: approvers})
	expect := ExpectedRevision(rec.BaseRevision)
	switch {
	case rec.ResourceType == ResourceCredential && rec.Action == ActionUpdate:
		in := CredentialInput{Name: c.Name, Metadata: c.Metadata, Enabled: c.Enabled, Documentation: c.Documentation,
			Tags: c.Tags, TagsSet: c.TagsSet, Restoring: c.Restoring, Expect: expect}
		if c.HasPairs {
			pairs, err := s.barrier.openChange(ctx, rec.ResourceID, rec.ID, rec.SealedPairs, rec.WrappedKey)
			if err != nil {
				return 0, err
			}
			in.Pairs = make(map[string]any, len(pairs))
			for k, v := range pairs {
				in.Pairs[k] = v.Any()
			}
		}
		v, err := s.UpdateCredential(actx, rec.ResourceID, in)
		if err != nil {
			return 0, err
		}
		return v.Record.Revision, nil
	case rec.ResourceType == ResourceCredential && rec.Action == ActionRevert:
		v, err := s.RevertCredential(actx, rec.ResourceID, c.ToRevision, expect, ChangeIntent{})
		if err != nil {
			return 0, err
		}
		return v.Record.Revision, nil
	case rec.ResourceType == ResourceCredential && rec.Action == ActionArchive:
		if _, err := s.ArchiveCredential(actx, rec.ResourceID, true, ChangeIntent{}); err != nil {
			return 0, err
		}
		return rec.BaseRevision, nil
	case rec.ResourceType == ResourceService && rec.Action == ActionUpdate:
		v, err := s.PutService(actx, rec.ResourceID, ServiceInput{Credentials: c.Credentials, BlindCredentials: c.BlindCredentials,
			Enabled: c.Enabled, Account: c.Account, Fields: c.Fields, Expect: expect})
		if err != nil {
			return 0, err
		}
		return v.Record.Revision, nil
	case rec.ResourceType == ResourceService && rec.Action == ActionRevert:
		v, err := s.RevertService(actx, rec.ResourceID, c.ToRevision, expect, ChangeIntent{})
		if err != nil {
			return 0, err
		}
		return v.Record.Revision, nil
	}
	return 0, fmt.Errorf("change request %s: unknown change %s of %s", rec.ID, rec.Action, rec.ResourceType)
}

// auditChange records a step of a change request, naming the principal of ctx and the requester
// (and the approvers so far).
func (s *Service) auditChange(ctx context.Context, action string, rec *store.ChangeRequestRecord, reason string) {
	call := audit.CallFrom(ctx)
	r := principalRecord(call.Record(audit.Allowed), PrincipalFrom(ctx))
	r.Action, r.Resource, r.ResourceID, r.Revision = action, rec.ResourceType, rec.ResourceID, rec.AppliedRevision
	r.ChangeRequest, r.Requester, r.Reason = rec.ID, rec.RequestedBy, reason
	for _, a := range rec.Approvals {
		r.Approvers = append(r.Approvers, a.By)
	}
	_ = s.audit.Write(r)
	call.Conclude()
}
