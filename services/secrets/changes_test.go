package secrets

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

const testApprovals = `
approvals:
  ttl: 1h
  slack:
    team: example
    bot: gantry
    channel: "#changes"
    relay_service: gantry-chat
  slack_users:
    U0BOB: "user:bob@example.com"
  rules:
    - resources: ["credential-name:prod-*", "service:prod-*"]
      approvals: 2
      approvers: ["user:*@example.com"]
`

// clock is a settable time for a Service.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) get() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func approvalService(t *testing.T, policy string) (*Service, store.Store, *clock) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ACLPolicyFile = file
	svc, st := keyringTestService(t, cfg, logtest.New(t))
	c := &clock{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	svc.now = c.get
	return svc, st, c
}

func userCtx(email string) context.Context {
	return WithPrincipal(context.Background(), Principal{Type: "user", Name: email, AuthType: "kms"})
}

func heldRequest(t *testing.T, err error) *store.ChangeRequestRecord {
	t.Helper()
	var held *ChangeHeldError
	if !errors.As(err, &held) {
		t.Fatalf("write: %v, want it held for approval", err)
	}
	return held.Request.Record
}

func TestChangeRequestNeedsTwoApproversAndExpires(t *testing.T) {
	svc, st, clk := approvalService(t, testApprovals)
	alice, bob, carol := userCtx("alice@example.com"), userCtx("bob@example.com"), userCtx("carol@example.com")
	name := "prod-db"
	cred, err := svc.CreateCredential(alice, CredentialInput{Name: &name, Pairs: map[string]any{"password": "v1"}, Documentation: &name})
	if err != nil {
		t.Fatal(err)
	}
	id := cred.Record.ID
	_, err = svc.UpdateCredential(alice, id, CredentialInput{Pairs: map[string]any{"password": "sealed-in-the-request"}})
	rec := heldRequest(t, err)
	raw, _ := st.GetChangeRequest(context.Background(), rec.ID)
	for _, b := range [][]byte{raw.Change, raw.Summary, raw.SealedPairs, []byte(raw.Reason)} {
		if bytes.Contains(b, []byte("sealed-in-the-request")) {
			t.Fatal("the stored change request holds the new value in clear")
		}
	}
	v, err := svc.ApproveChangeRequest(bob, rec.ID, "api")
	if err != nil || v.Record.Status != store.ChangePending || len(v.Record.Approvals) != 1 {
		t.Fatalf("first of two approvals: %+v, %v", v, err)
	}
	if _, err := svc.ApproveChangeRequest(bob, rec.ID, "api"); err == nil {
		t.Fatal("the same approver counted twice")
	}
	v, err = svc.ApproveChangeRequest(carol, rec.ID, "api")
	if err != nil || v.Record.Status != store.ChangeApplied || v.Record.AppliedRevision != 2 {
		t.Fatalf("second approval: %+v, %v", v, err)
	}

	_, err = svc.UpdateCredential(alice, id, CredentialInput{Pairs: map[string]any{"password": "v3"}})
	late := heldRequest(t, err)
	clk.add(61 * time.Minute)
	if _, err := svc.ApproveChangeRequest(bob, late.ID, "api"); !isChangeState(err) {
		t.Fatalf("approval after expiry: %v, want refused as not pending", err)
	}
	got, err := svc.GetChangeRequest(alice, late.ID)
	if err != nil || got.Record.Status != store.ChangeExpired {
		t.Fatalf("expired request: %+v, %v", got, err)
	}
	if cur, _ := st.GetCredential(context.Background(), id); cur.Revision != 2 {
		t.Fatalf("revision %d after an expired request, want 2", cur.Revision)
	}
}

func isChangeState(err error) bool {
	var e *changeStateError
	return errors.As(err, &e)
}

// TestApplyIsSettledAfterACrash: the final approval is recorded before the write; a crash between
// the two leaves a request that the next reader applies (base still current), finds applied (the
// revision stamped with the apply time by the requester), or finds stale (another write).
func TestApplyIsSettledAfterACrash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T, svc *Service, st store.Store, rec *store.ChangeRequestRecord, credID string)
		want  string
		rev   int32
	}{
		{name: "write never happened", want: store.ChangeApplied, rev: 2, crash: func(*testing.T, *Service, store.Store, *store.ChangeRequestRecord, string) {}},
		{name: "write happened, outcome not recorded", want: store.ChangeApplied, rev: 2, crash: func(t *testing.T, svc *Service, _ store.Store, rec *store.ChangeRequestRecord, _ string) {
			if _, err := svc.replay(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another write moved the base", want: store.ChangeStale, crash: func(t *testing.T, svc *Service, _ store.Store, _ *store.ChangeRequestRecord, credID string) {
			ctx := context.WithValue(userCtx("dave@example.com"), applyingKey{}, &applying{at: svc.now()})
			if _, err := svc.UpdateCredential(ctx, credID, CredentialInput{Pairs: map[string]any{"password": "dave"}}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, st, _ := approvalService(t, testApprovals)
			alice := userCtx("alice@example.com")
			name := "prod-api"
			cred, err := svc.CreateCredential(alice, CredentialInput{Name: &name, Pairs: map[string]any{"token": "t1"}, Documentation: &name})
			if err != nil {
				t.Fatal(err)
			}
			_, err = svc.UpdateCredential(alice, cred.Record.ID, CredentialInput{Pairs: map[string]any{"token": "t2"}})
			rec := heldRequest(t, err)
			// Step one of the final approval, as decide writes it, and then the crash.
			at := svc.now()
			next := *rec
			next.Version, next.DecidedBy, next.DecidedAt = 2, "user:bob@example.com", &at
			next.Approvals = []store.ChangeApproval{{By: "user:bob@example.com", At: at}, {By: "user:carol@example.com", At: at}}
			if err := st.PutChangeRequest(context.Background(), &next, 1); err != nil {
				t.Fatal(err)
			}
			tc.crash(t, svc, st, &next, cred.Record.ID)
			got, err := svc.GetChangeRequest(alice, rec.ID)
			if err != nil || got.Record.Status != tc.want || got.Record.AppliedRevision != tc.rev {
				t.Fatalf("settled: %+v, %v; want %s revision %d", got, err, tc.want, tc.rev)
			}
			if cur, _ := st.GetCredential(context.Background(), cred.Record.ID); tc.want == store.ChangeApplied && cur.Revision != 2 {
				t.Fatalf("the change applied twice: revision %d", cur.Revision)
			}
		})
	}
}

func TestSlackPressIsDecidedForTheMappedPrincipal(t *testing.T) {
	svc, st, _ := approvalService(t, strings.Replace(testApprovals, "approvals: 2", "approvals: 1", 1))
	alice := userCtx("alice@example.com")
	relay := WithPrincipal(context.Background(), Principal{Type: "service", Name: "gantry-chat", AuthType: "kms"})
	name := "prod-web"
	cred, err := svc.CreateCredential(alice, CredentialInput{Name: &name, Pairs: map[string]any{"k": "v"}, Documentation: &name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.UpdateCredential(alice, cred.Record.ID, CredentialInput{Pairs: map[string]any{"k": "w"}})
	rec := heldRequest(t, err)

	if _, _, _, err := svc.DecideChangeFromSlack(WithPrincipal(context.Background(), Principal{Type: "service", Name: "other"}), SlackPress{ID: rec.ID, Decision: "approve", TeamID: "T1", UserID: "U0BOB"}); err == nil {
		t.Fatal("a service that is not the relay decided")
	}
	for _, press := range []SlackPress{
		{ID: rec.ID, Decision: "approve", TeamID: "T1", UserID: "U0NOBODY"},                                       // no mapping, no email
		{ID: rec.ID, Decision: "approve", TeamID: "T1", UserID: "U0ALICE", ConfirmedEmail: "alice@example.com"},   // the requester
		{ID: rec.ID, Decision: "approve", TeamID: "T1", UserID: "U0MALLORY", ConfirmedEmail: "mallory@evil.test"}, // not an approver
	} {
		v, _, refused, err := svc.DecideChangeFromSlack(relay, press)
		if err != nil || refused == "" || v != nil {
			t.Errorf("press by %s: %v, %q, %v; want a refusal", press.UserID, v, refused, err)
		}
	}
	// The relay posts the pending request once; it is listed again only when its status changes.
	if notices, err := svc.ListChangeNotices(relay); err != nil || len(notices) != 1 {
		t.Fatalf("notices of a new request: %v, %v", notices, err)
	}
	if err := svc.RecordChangeNotice(relay, rec.ID, "C1", "111.222", store.ChangePending); err != nil {
		t.Fatal(err)
	}
	if notices, err := svc.ListChangeNotices(relay); err != nil || len(notices) != 0 {
		t.Fatalf("a posted pending request listed again: %v, %v", notices, err)
	}
	v, principal, refused, err := svc.DecideChangeFromSlack(relay, SlackPress{ID: rec.ID, Decision: "approve", TeamID: "T1", UserID: "U0BOB"})
	if err != nil || refused != "" || principal != "user:bob@example.com" || v.Record.Status != store.ChangeApplied {
		t.Fatalf("press by a mapped approver: %+v, %q, %q, %v", v, principal, refused, err)
	}
	if v.Record.Approvals[0].Via != "slack:T1/U0BOB" {
		t.Errorf("approval via %q", v.Record.Approvals[0].Via)
	}
	if stored, _ := st.GetChangeRequest(context.Background(), rec.ID); len(stored.SealedPairs) != 0 || len(stored.WrappedKey) != 0 {
		t.Error("an applied request still holds its sealed pairs")
	}
	notices, err := svc.ListChangeNotices(relay)
	if err != nil || len(notices) != 1 || notices[0].Record.Status != store.ChangeApplied {
		t.Fatalf("notices: %v, %v", notices, err)
	}
	if err := svc.RecordChangeNotice(relay, rec.ID, "C1", "111.222", store.ChangeApplied); err != nil {
		t.Fatal(err)
	}
	if notices, err := svc.ListChangeNotices(relay); err != nil || len(notices) != 0 {
		t.Fatalf("notices after the message shows the status: %v, %v", notices, err)
	}
}

func TestApprovalPolicyRefusesMistakes(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown key":         "approvals:\n  rulez: []\n",
		"bad resource":        "approvals:\n  rules:\n    - resources: [\"credential-nam:prod-*\"]\n      approvers: [\"*\"]\n",
		"no approvers":        "approvals:\n  rules:\n    - resources: [\"service:x\"]\n",
		"unknown group":       "approvals:\n  rules:\n    - resources: [\"service:x\"]\n      approvers: [\"group:sre\"]\n",
		"too many":            "approvals:\n  rules:\n    - resources: [\"service:x\"]\n      approvers: [\"*\"]\n      approvals: 11\n",
		"short ttl":           "approvals:\n  ttl: 10s\n",
		"slack without bot":   "approvals:\n  slack:\n    team: t\n    relay_service: c\n",
		"bad slack user":      "approvals:\n  slack_users:\n    U1: \"alice\"\n",
		"reminders w/o slack": "approvals:\n  reminders:\n    channel: \"#r\"\n",
	} {
		if _, err := parseApprovalPolicy([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	p, err := parseApprovalPolicy([]byte(testApprovals))
	if err != nil {
		t.Fatal(err)
	}
	if r := p.ruleFor(ResourceCredential, "id1", "prod-x", nil); r == nil || r.TTL != time.Hour || r.Channel != "#changes" {
		t.Errorf("rule for prod-x: %+v", r)
	}
	if r := p.ruleFor(ResourceCredential, "id1", "dev-x", nil); r != nil {
		t.Errorf("dev-x protected: %+v", r)
	}
	if none, err := parseApprovalPolicy([]byte("rules: []\n")); err != nil || none != nil {
		t.Errorf("a file without approvals: %v, %v", none, err)
	}
}

// TestKeyUseCountsPendingChanges: the new pairs a pending change request holds are under a key
// version like a revision's, so a destroy of that version is refused until the request is decided.
func TestKeyUseCountsPendingChanges(t *testing.T) {
	svc, st, _ := approvalService(t, testApprovals)
	alice := userCtx("alice@example.com")
	name := "prod-keys"
	cred, err := svc.CreateCredential(alice, CredentialInput{Name: &name, Pairs: map[string]any{"k": "v"}, Documentation: &name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.UpdateCredential(alice, cred.Record.ID, CredentialInput{Pairs: map[string]any{"k": "w"}})
	rec := heldRequest(t, err)
	counts, err := CountKeyVersions(context.Background(), st, svc.versions)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range counts.Changes {
		total += n
	}
	if total != 1 {
		t.Fatalf("changes counted %v, want the pending request's key", counts.Changes)
	}
	if _, err := svc.CancelChangeRequest(alice, rec.ID, ""); err != nil {
		t.Fatal(err)
	}
	if counts, _ := CountKeyVersions(context.Background(), st, svc.versions); len(counts.Changes) != 0 {
		t.Fatalf("a cancelled request still counted: %v", counts.Changes)
	}
}

// TestApprovedChangeThatCannotApplyFails: a change refused when applied (here a rename to a name
// another credential took meanwhile) ends failed with the reason, writing nothing; it is not retried.
func TestApprovedChangeThatCannotApplyFails(t *testing.T) {
	svc, st, _ := approvalService(t, strings.Replace(testApprovals, "approvals: 2", "approvals: 1", 1))
	alice, bob := userCtx("alice@example.com"), userCtx("bob@example.com")
	name, target := "prod-one", "prod-two"
	cred, err := svc.CreateCredential(alice, CredentialInput{Name: &name, Pairs: map[string]any{"k": "v"}, Documentation: &name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.UpdateCredential(alice, cred.Record.ID, CredentialInput{Name: &target})
	rec := heldRequest(t, err)
	other, err := svc.CreateCredential(bob, CredentialInput{Name: &target, Pairs: map[string]any{"k": "v"}, Documentation: &target})
	if err != nil {
		t.Fatal(err)
	}
	v, err := svc.ApproveChangeRequest(bob, rec.ID, "api")
	if err != nil || v.Record.Status != store.ChangeFailed || v.Record.DecisionReason != "Name already exists. See id: "+other.Record.ID {
		t.Fatalf("approval of a change that cannot apply: %+v, %v", v, err)
	}
	if cur, _ := st.GetCredential(context.Background(), cred.Record.ID); cur.Revision != 1 || cur.Name != name {
		t.Fatalf("a failed change wrote: %+v", cur)
	}
}

// TestRenameIntoProtectionIsHeld: a rule protects what a record becomes too, so renaming a
// credential into a protected name needs approval.
func TestRenameIntoProtectionIsHeld(t *testing.T) {
	svc, _, _ := approvalService(t, testApprovals)
	alice := userCtx("alice@example.com")
	name, protected := "dev-db", "prod-db2"
	cred, err := svc.CreateCredential(alice, CredentialInput{Name: &name, Pairs: map[string]any{"k": "v"}, Documentation: &name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.UpdateCredential(alice, cred.Record.ID, CredentialInput{Pairs: map[string]any{"k": "w"}}); err != nil {
		t.Fatalf("a write to an unprotected credential: %v", err)
	}
	_, err = svc.UpdateCredential(alice, cred.Record.ID, CredentialInput{Name: &protected})
	if rec := heldRequest(t, err); rec.ResourceName != name {
		t.Errorf("request names %q, want the current name %q", rec.ResourceName, name)
	}
}
