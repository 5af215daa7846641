package chat

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gantry-dev/gantry/pkg/freeport"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// The chat service's identity in the fake secrets service, and what that service holds for it.
const (
	relayService  = "gantry-chat"
	relayContext  = "gantry"
	relaySecret   = "approval-signing-secret"
	relayBotToken = "xoxb-from-the-secrets-service"
)

// fakeSecrets is the secrets service as the relay sees it, over real gRPC: it authenticates every
// call with kmsauth (the keyring the chat service mints its token with), serves the chat service's
// own service with its Slack credentials, and holds change requests whose Slack message is listed
// until it is recorded at their current status, as the real service does.
type fakeSecrets struct {
	secretsv1.UnimplementedSecretsServiceServer
	validator *kmsauth.Validator

	mu        sync.Mutex
	requests  map[string]*secretsv1.ChangeRequest
	shown     map[string]*secretsv1.RecordChangeNoticeRequest // id → the message recorded
	records   []*secretsv1.RecordChangeNoticeRequest
	reminders []*secretsv1.RotationReminder
	claimed   map[string]bool
	claims    []string
	decisions []*secretsv1.DecideChangeFromSlackRequest
	// decide answers DecideChangeFromSlack; nil approves as the fake's default.
	decide func(*secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error)
	// refuse, when set, is the answer of every relay call (a secrets service without the relay).
	refuse  codes.Code
	callers map[string]bool
	// noBotToken leaves the bot token out of the chat service's credentials (so -chat-demo stands in).
	noBotToken bool
	// listings and remListings count the relay's polls.
	listings, remListings int
}

func newFakeSecrets(t *testing.T, keyring string) *fakeSecrets {
	t.Helper()
	ring, err := kms.OpenKeyring(keyring, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := kmsauth.NewValidator(context.Background(), ring, kmsauth.Config{To: relayContext, AuthKey: kms.AliasAuth,
		MinVersion: 1, MaxVersion: 2, UserTypes: []string{"service"}, MaxLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSecrets{validator: v, requests: map[string]*secretsv1.ChangeRequest{}, shown: map[string]*secretsv1.RecordChangeNoticeRequest{},
		claimed: map[string]bool{}, callers: map[string]bool{}}
}

// serve serves the fake on addr until the returned stop is called (or the test ends).
func (f *fakeSecrets) serve(t *testing.T, addr string) (stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(f.authenticate))
	secretsv1.RegisterSecretsServiceServer(srv, f)
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { srv.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// authenticate refuses a call without a valid kmsauth service token, as the secrets service does.
func (f *fakeSecrets) authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	auth := md.Get(wirekeys.Authorization)
	if len(auth) != 1 || !strings.HasPrefix(auth[0], "Basic ") {
		return nil, status.Error(codes.Unauthenticated, "no credentials")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(auth[0], "Basic "))
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, "bad credentials")
	}
	user, token, _ := strings.Cut(string(raw), ":")
	id, err := f.validator.Validate(ctx, user, token)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	f.mu.Lock()
	f.callers[id.String()] = true
	f.mu.Unlock()
	return next(ctx, req)
}

func (f *fakeSecrets) GetService(_ context.Context, r *secretsv1.GetServiceRequest) (*secretsv1.GetServiceResponse, error) {
	if r.GetId() != relayService {
		return nil, status.Error(codes.NotFound, "no such service")
	}
	pairs := map[string]string{"slack_oauth_bot_token_a0ping001": relayBotToken, "slack_signing_secret_a0ping001": relaySecret}
	f.mu.Lock()
	if f.noBotToken {
		delete(pairs, "slack_oauth_bot_token_a0ping001")
	}
	f.mu.Unlock()
	return &secretsv1.GetServiceResponse{Service: &secretsv1.Service{Id: relayService, Credentials: []*secretsv1.Credential{{
		Id: "slack", Name: "slack-pingbot", CredentialPairs: pairs,
	}}}}, nil
}

func (f *fakeSecrets) refused() error {
	if f.refuse != codes.OK {
		return status.Error(f.refuse, "the relay is refused")
	}
	return nil
}

func (f *fakeSecrets) ListChangeNotices(context.Context, *secretsv1.ListChangeNoticesRequest) (*secretsv1.ListChangeNoticesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listings++
	if err := f.refused(); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(f.requests))
	for id := range f.requests {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	resp := &secretsv1.ListChangeNoticesResponse{}
	for _, id := range ids {
		cr := f.requests[id]
		shown := f.shown[id]
		if shown.GetStatus() == cr.GetStatus() {
			continue
		}
		resp.Notices = append(resp.Notices, &secretsv1.ChangeNotice{ChangeRequest: proto.Clone(cr).(*secretsv1.ChangeRequest),
			Team: "acme", Bot: "pingbot", Channel: "#general", NoticeChannel: shown.GetNoticeChannel(), NoticeTs: shown.GetNoticeTs()})
	}
	return resp, nil
}

func (f *fakeSecrets) RecordChangeNotice(_ context.Context, r *secretsv1.RecordChangeNoticeRequest) (*secretsv1.RecordChangeNoticeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refused(); err != nil {
		return nil, err
	}
	f.shown[r.GetId()] = r
	f.records = append(f.records, r)
	return &secretsv1.RecordChangeNoticeResponse{}, nil
}

func (f *fakeSecrets) DecideChangeFromSlack(_ context.Context, r *secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.decisions = append(f.decisions, r)
	if f.decide != nil {
		return f.decide(r)
	}
	cr, ok := f.requests[r.GetId()]
	if !ok {
		return &secretsv1.DecideChangeFromSlackResponse{Refused: "no such change request"}, nil
	}
	principal := "user:" + r.GetSlackEmail()
	if r.GetDecision() == "approve" {
		cr.Approvals = append(cr.Approvals, &secretsv1.ChangeApproval{By: principal, Via: "slack:" + r.GetSlackTeamId() + "/" + r.GetSlackUserId()})
		cr.Status, cr.AppliedRevision = "applied", wrapperspb.Int32(cr.GetBaseRevision()+1)
	} else {
		cr.Status = "rejected"
	}
	cr.DecidedBy = principal
	return &secretsv1.DecideChangeFromSlackResponse{ChangeRequest: cr, Principal: principal}, nil
}

func (f *fakeSecrets) ListRotationReminders(context.Context, *secretsv1.ListRotationRemindersRequest) (*secretsv1.ListRotationRemindersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remListings++
	if err := f.refused(); err != nil {
		return nil, err
	}
	return &secretsv1.ListRotationRemindersResponse{Reminders: f.reminders}, nil
}

func (f *fakeSecrets) ClaimRotationReminder(_ context.Context, r *secretsv1.ClaimRotationReminderRequest) (*secretsv1.ClaimRotationReminderResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refused(); err != nil {
		return nil, err
	}
	f.claims = append(f.claims, r.GetKey())
	first := !f.claimed[r.GetKey()]
	f.claimed[r.GetKey()] = true
	return &secretsv1.ClaimRotationReminderResponse{Claimed: first}, nil
}

// with runs fn under the fake's lock, to change or read its state.
func (f *fakeSecrets) with(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func (f *fakeSecrets) shownStatus(id string) string {
	var s string
	f.with(func() { s = f.shown[id].GetStatus() })
	return s
}

func (f *fakeSecrets) decided() []*secretsv1.DecideChangeFromSlackRequest {
	var out []*secretsv1.DecideChangeFromSlackRequest
	f.with(func() { out = slices.Clone(f.decisions) })
	return out
}

// relayFixture is a chat service whose tokens and approvals come from a fake secrets service, over
// the fake Slack workspace, with a bolt queue for its receivers.
type relayFixture struct {
	svc     *Service
	slack   *slacktest.Server
	secrets *fakeSecrets
	addr    string
	logs    *observer.ObservedLogs
	stop    func() // stops the fake secrets service
}

// pendingRequest is a pending update of a credential, of the shape the secrets service lists.
func pendingRequest(id string) *secretsv1.ChangeRequest {
	return &secretsv1.ChangeRequest{
		Id: id, Status: "pending", Action: "update", ResourceType: "credential", ResourceId: "0f3a9c", ResourceName: "payments-db",
		BaseRevision: 4, RequestedBy: "user:alice@example.com", Reason: "rotate the password", ApprovalsRequired: 1,
		ExpiryDate: "2026-11-30T10:00:00+00:00", Changes: &secretsv1.ChangeSummary{KeysChanged: []string{"password"}},
	}
}

func startRelay(t *testing.T, setup func(*fakeSecrets)) *relayFixture {
	t.Helper()
	return startRelayOn(t, setup, false)
}

// startRelayOn is startRelay, on the demo workspace of -chat-demo when demo is set (the fake secrets
// service then holds no bot token, so the demo stands in): the fixture has no fake Slack to read,
// the demo's log lines say what it was sent.
func startRelayOn(t *testing.T, setup func(*fakeSecrets), demo bool) *relayFixture {
	t.Helper()
	dir := t.TempDir()
	keyring := filepath.Join(dir, "keyring.json")
	secrets := newFakeSecrets(t, keyring)
	if setup != nil {
		secrets.with(func() { setup(secrets) })
	}
	addr := freeport.Addr(t)
	stop := secrets.serve(t, addr)

	f := slacktest.StartWorkspace(t)
	f.AddUser(slacktest.User{ID: "U0BOB0001", Name: "bob", Email: "bob@example.com", EmailConfirmed: new(true)})
	f.AddUser(slacktest.User{ID: "U0CAROL01", Name: "carol", Email: "carol@example.com", EmailConfirmed: new(false)})
	if demo {
		secrets.with(func() { secrets.noBotToken = true })
	}
	cfgPath := filepath.Join(dir, "chat.yaml")
	if err := os.WriteFile(cfgPath, []byte(testFile), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ConfigFile = cfgPath
	cfg.SlackAPIURL = f.APIURL()
	cfg.RefreshInterval = -1
	cfg.Credentials = func(string) string { return "" } // every token from the secrets service
	cfg.Secrets = SecretsTokenConfig{Service: relayService, Addr: addr, Keyring: keyring, AuthKey: kms.AliasAuth, To: relayContext, UserType: "service"}
	cfg.ApprovalsPollInterval = 100 * time.Millisecond
	cfg.Demo = demo
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	q, err := boltqueue.Open(filepath.Join(dir, "queue.db"), boltqueue.Options{DedupeWindow: time.Hour}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(zapcore.NewTee(logtest.New(t).Core(), core))
	svc, err := New(context.Background(), cfg, Deps{Queue: q, Logger: logger, StartDemo: startDemo(logger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = svc.Close()
		for _, e := range logs.All() {
			line := fmt.Sprint(e.Message, e.ContextMap())
			for _, secret := range []string{relayBotToken, relaySecret, "Basic "} {
				if strings.Contains(line, secret) {
					t.Errorf("a log line carries a credential: %s", line)
				}
			}
		}
	})
	return &relayFixture{svc: svc, slack: f, secrets: secrets, addr: addr, logs: logs, stop: stop}
}

// messages are the messages posted in #general.
func (r *relayFixture) messages() []slacktest.Message { return r.slack.Messages("C0GENERAL") }

// press sends a signed block_actions payload of a change request button as Slack would, with the
// given trigger id.
func (r *relayFixture) press(t *testing.T, secret, action, id, user, trigger string) (events.Response, error) {
	t.Helper()
	payload, err := json.Marshal(map[string]any{
		"type": "block_actions", "api_app_id": "A0PING001", "token": "legacy", "trigger_id": trigger,
		"team":      map[string]any{"id": "T0FAKE001", "domain": "acme"},
		"user":      map[string]any{"id": user, "team_id": "T0FAKE001"},
		"container": map[string]any{"type": "message", "channel_id": "C0GENERAL", "message_ts": "1503435956.000001"},
		"actions": []any{map[string]any{"type": "button", "block_id": events.ApprovalBlockID, "action_id": action, "value": id,
			"action_ts": "1700000000.000001"}},
		"response_url": "https://hooks.slack.com/actions/T0FAKE001/1/x",
	})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("payload=" + url.QueryEscape(string(payload)))
	now := time.Now().Unix()
	return r.svc.ReceiveSlack(context.Background(), events.Request{Kind: events.KindInteractive, Body: body,
		Timestamp: fmt.Sprint(now), Signature: events.Sign(secret, now, body)})
}

// blocksOf decodes a recorded message's blocks.
func blocksOf(t *testing.T, m slacktest.Message) []map[string]any {
	t.Helper()
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(m.Blocks), &blocks); err != nil {
		t.Fatalf("message %s: blocks %q: %v", m.TS, m.Blocks, err)
	}
	return blocks
}

func hasButtons(t *testing.T, m slacktest.Message) bool {
	for _, b := range blocksOf(t, m) {
		if b["type"] == "actions" && b["block_id"] == events.ApprovalBlockID {
			return true
		}
	}
	return false
}

// TestApprovalRelayPostsThenUpdatesOneMessage: a pending request is posted to its channel with its
// buttons, as the bot whose token the secrets service holds, and recorded with Slack's channel id
// and ts; once it is applied the same message is updated (chat.update), its buttons gone, and the
// new status recorded. Every call to the secrets service carried the chat service's own kmsauth
// service token.
func TestApprovalRelayPostsThenUpdatesOneMessage(t *testing.T) {
	r := startRelay(t, func(s *fakeSecrets) { s.requests["cr-1"] = pendingRequest("cr-1") })
	testwait.Until(t, "the pending request's message to be recorded", func() bool { return r.secrets.shownStatus("cr-1") == "pending" })
	msgs := r.messages()
	if len(msgs) != 1 || !hasButtons(t, msgs[0]) || !strings.Contains(msgs[0].Text, "payments-db") {
		t.Fatalf("messages in #general: %+v, want the request with its buttons", msgs)
	}
	var rec *secretsv1.RecordChangeNoticeRequest
	r.secrets.with(func() { rec = r.secrets.shown["cr-1"] })
	if rec.GetNoticeChannel() != "C0GENERAL" || rec.GetNoticeTs() != msgs[0].TS {
		t.Errorf("recorded %v, want channel C0GENERAL and ts %s", rec, msgs[0].TS)
	}
	for _, req := range r.slack.Requests("chat.postMessage") {
		if req.Token != relayBotToken {
			t.Errorf("posted with token %q, want the bot token of the secrets service", req.Token)
		}
	}

	r.secrets.with(func() {
		cr := r.secrets.requests["cr-1"]
		cr.Status, cr.AppliedRevision, cr.DecidedBy = "applied", wrapperspb.Int32(5), "user:bob@example.com"
		cr.Approvals = []*secretsv1.ChangeApproval{{By: "user:bob@example.com", Via: "api"}}
	})
	testwait.Until(t, "the applied status to be recorded", func() bool { return r.secrets.shownStatus("cr-1") == "applied" })
	msgs = r.messages()
	if len(msgs) != 1 || msgs[0].Updates != 1 || hasButtons(t, msgs[0]) || !strings.Contains(msgs[0].Blocks, "applied revision 5") {
		t.Fatalf("messages in #general: %+v, want the one message updated once, without buttons, saying applied", msgs)
	}
	if ups := r.slack.Requests("chat.update"); len(ups) != 1 || ups[0].Form.Get("ts") != msgs[0].TS || ups[0].Form.Get("channel") != "C0GENERAL" {
		t.Errorf("chat.update calls %+v", ups)
	}
	var callers map[string]bool
	r.secrets.with(func() { callers = r.secrets.callers })
	if len(callers) != 1 || !callers["2/service/"+relayService] {
		t.Errorf("the secrets service was called as %v, want only 2/service/%s", callers, relayService)
	}
}

// TestApprovalRelayBreakGlass: a break-glass change is announced loudly, with who and why, and no
// buttons.
func TestApprovalRelayBreakGlass(t *testing.T) {
	r := startRelay(t, func(s *fakeSecrets) {
		cr := pendingRequest("cr-bg")
		cr.Status, cr.Reason, cr.AppliedRevision = "break_glass", "payments are down", wrapperspb.Int32(5)
		s.requests["cr-bg"] = cr
	})
	testwait.Until(t, "the break-glass notice to be recorded", func() bool { return r.secrets.shownStatus("cr-bg") == "break_glass" })
	msgs := r.messages()
	if len(msgs) != 1 || hasButtons(t, msgs[0]) {
		t.Fatalf("messages %+v, want one without buttons", msgs)
	}
	for _, want := range []string{":rotating_light: *BREAK GLASS*", "alice@example.com", "payments are down"} {
		if !strings.Contains(msgs[0].Blocks, want) {
			t.Errorf("the notice's blocks lack %q: %s", want, msgs[0].Blocks)
		}
	}
	if !strings.Contains(msgs[0].Text, "BREAK GLASS") {
		t.Errorf("the notice's text %q does not say BREAK GLASS", msgs[0].Text)
	}
}

// TestApprovalRelayRemindersOnlyWhenClaimed: a reminder is posted to each of its channels when this
// relay claimed it, and not when the claim answered false (another replica, or earlier today); the
// next polls, whose claims answer false, post nothing more.
func TestApprovalRelayRemindersOnlyWhenClaimed(t *testing.T) {
	due := func(id, name string) *secretsv1.DueCredential {
		return &secretsv1.DueCredential{Id: id, Name: name, State: "overdue", NextRotationDate: "2026-11-01T00:00:00+00:00", Services: []string{"payments-api"}}
	}
	r := startRelay(t, func(s *fakeSecrets) {
		s.claimed["taken-today"] = true
		// Listed first: once the second is posted, the relay is past the first.
		s.reminders = []*secretsv1.RotationReminder{
			{Key: "taken-today", Credential: due("c-taken", "claimed-elsewhere"), Team: "acme", Bot: "pingbot", Channels: []string{"#general"}},
			{Key: "mine", Credential: due("c-mine", "payments-db"), Team: "acme", Bot: "pingbot", Channels: []string{"#general", "C0MPIM001"}},
		}
	})
	testwait.Until(t, "the claimed reminder in both its channels", func() bool {
		return len(r.messages()) == 1 && len(r.slack.Messages("C0MPIM001")) == 1
	})
	claims := func() int {
		var n int
		r.secrets.with(func() { n = len(r.secrets.claims) })
		return n
	}
	testwait.Until(t, "two more polls", func() bool { return claims() >= 6 })
	if msgs := r.messages(); len(msgs) != 1 || !strings.Contains(msgs[0].Text, "payments-db") || strings.Contains(msgs[0].Text, "claimed-elsewhere") {
		t.Errorf("messages in #general %+v, want the claimed reminder once", msgs)
	}
	if n := len(r.slack.Messages("C0MPIM001")); n != 1 {
		t.Errorf("%d messages in the second channel, want 1", n)
	}
}

// TestApprovalPress: a signed press reaches the secrets service with the presser's Slack team and
// user and their confirmed email, the empty 200 Slack takes as done, and the message is updated at
// once (the press kicks the relay). The same press replayed (its trigger id) reaches the secrets
// service no more; a press of a user whose email is unconfirmed goes without the email; a forged
// press is refused and never reaches the secrets service.
func TestApprovalPress(t *testing.T) {
	r := startRelay(t, func(s *fakeSecrets) {
		s.requests["cr-1"] = pendingRequest("cr-1")
		s.requests["cr-2"] = pendingRequest("cr-2")
	})
	testwait.Until(t, "both messages posted", func() bool {
		return r.secrets.shownStatus("cr-1") == "pending" && r.secrets.shownStatus("cr-2") == "pending"
	})

	resp, err := r.press(t, relaySecret, "approve", "cr-1", "U0BOB0001", "trigger-1")
	if err != nil || resp.Body != nil {
		t.Fatalf("press: %s, %v; want an empty 200", resp.Body, err)
	}
	want := &secretsv1.DecideChangeFromSlackRequest{Id: "cr-1", Decision: "approve", SlackTeamId: "T0FAKE001", SlackUserId: "U0BOB0001", SlackEmail: "bob@example.com"}
	if got := r.secrets.decided(); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	testwait.Until(t, "the message to show the decision", func() bool { return r.secrets.shownStatus("cr-1") == "applied" })

	resp, err = r.press(t, relaySecret, "approve", "cr-1", "U0BOB0001", "trigger-1")
	if err != nil || resp.Body != nil {
		t.Errorf("replayed press: %s, %v; want an empty 200", resp.Body, err)
	}
	if n := len(r.secrets.decided()); n != 1 {
		t.Errorf("the replayed press reached the secrets service: %d decisions", n)
	}

	if _, err := r.press(t, relaySecret, "reject", "cr-2", "U0CAROL01", "trigger-2"); err != nil {
		t.Fatal(err)
	}
	if got := r.secrets.decided(); len(got) != 2 || got[1].GetSlackUserId() != "U0CAROL01" || got[1].GetSlackEmail() != "" || got[1].GetDecision() != "reject" {
		t.Errorf("decision of a user with an unconfirmed email: %v, want no email", got[1:])
	}

	_, err = r.press(t, "not-the-signing-secret", "approve", "cr-2", "U0BOB0001", "trigger-3")
	if !errors.Is(err, events.ErrUnauthenticated) {
		t.Errorf("forged press: %v, want refused as unauthenticated", err)
	}
	if n := len(r.secrets.decided()); n != 2 {
		t.Errorf("the forged press reached the secrets service: %d decisions", n)
	}
}

// TestApprovalPressRefusedOrUnreachable: the secrets service's refusal is shown to the presser
// alone (an ephemeral reply leaving the message as it is); a secrets service that fails to answer
// gets them "try again".
func TestApprovalPressRefusedOrUnreachable(t *testing.T) {
	r := startRelay(t, func(s *fakeSecrets) {
		s.decide = func(*secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
			return &secretsv1.DecideChangeFromSlackResponse{Refused: "you asked for this change: another approver must decide"}, nil
		}
	})
	resp, err := r.press(t, relaySecret, "approve", "cr-1", "U0ALICE01", "trigger-1")
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	_ = json.Unmarshal(resp.Body, &got)
	_ = json.Unmarshal([]byte(`{"response_type":"ephemeral","replace_original":false,"text":"you asked for this change: another approver must decide"}`), &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refused press answered %s, want %v", resp.Body, want)
	}

	r.secrets.with(func() {
		r.secrets.decide = func(*secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
			return nil, status.Error(codes.Unavailable, "the store is down")
		}
	})
	resp, err = r.press(t, relaySecret, "approve", "cr-1", "U0ALICE01", "trigger-2")
	if err != nil || !strings.Contains(string(resp.Body), `"text":"could not reach the secrets service, try again"`) || !strings.Contains(string(resp.Body), `"response_type":"ephemeral"`) {
		t.Errorf("press with the secrets service failing: %s, %v", resp.Body, err)
	}
}

// TestApprovalRelaySurvivesTheSecretsServiceGoingDown: with the secrets service down the relay logs
// once and goes on asking at each poll; once it is back, the request waiting is posted.
func TestApprovalRelaySurvivesTheSecretsServiceGoingDown(t *testing.T) {
	r := startRelay(t, nil)
	listings := func() int {
		var n int
		r.secrets.with(func() { n = r.secrets.listings })
		return n
	}
	testwait.Until(t, "a first poll", func() bool { return listings() > 0 })
	r.stop()
	testwait.Until(t, "the relay to notice", func() bool { return r.logs.FilterMessageSnippet("unreachable").Len() > 0 })
	r.secrets.with(func() { r.secrets.requests["cr-1"] = pendingRequest("cr-1") })
	r.secrets.serve(t, r.addr)
	testwait.Until(t, "the request posted once the secrets service is back", func() bool { return r.secrets.shownStatus("cr-1") == "pending" })
	if n := r.logs.FilterMessageSnippet("unreachable").Len(); n != 1 {
		t.Errorf("%d log lines about the unreachable secrets service, want 1", n)
	}
	if len(r.messages()) != 1 {
		t.Errorf("messages %+v, want the one request", r.messages())
	}
}

// TestApprovalRelayRefusedQuietly: a secrets service without the relay (Unimplemented, as before
// change requests land) gets one info line, and nothing is posted.
func TestApprovalRelayRefusedQuietly(t *testing.T) {
	r := startRelay(t, func(s *fakeSecrets) { s.refuse = codes.Unimplemented })
	// Both polls are refused (each is asked once, then not before a minute): one line says so.
	testwait.Until(t, "both polls refused", func() bool {
		var n, m int
		r.secrets.with(func() { n, m = r.secrets.listings, r.secrets.remListings })
		return n == 1 && m == 1
	})
	relayLogs := r.logs.FilterLoggerName("approvals")
	for _, e := range relayLogs.All() {
		if e.Level != zap.InfoLevel {
			t.Errorf("the relay logged at %v: %s", e.Level, e.Message)
		}
	}
	if n := relayLogs.FilterMessageSnippet("does not take").Len(); n != 1 {
		t.Errorf("%d refusal lines, want 1", n)
	}
	if n := len(r.slack.Requests("chat.postMessage")); n != 0 {
		t.Errorf("%d messages posted", n)
	}
}

// TestApprovalRelayOnTheDemoWorkspace: with -chat-demo the request is posted to the in-memory
// workspace, whose log shows it with its buttons; pressing one with a request signed by hand (as
// docs/chat-inbound.md signs them) decides it, and the log shows the message updated without them.
func TestApprovalRelayOnTheDemoWorkspace(t *testing.T) {
	r := startRelayOn(t, func(s *fakeSecrets) { s.requests["cr-1"] = pendingRequest("cr-1") }, true)
	if !strings.HasPrefix(r.svc.SlackAPIURL(), "http://127.0.0.1:") || r.svc.demo == nil {
		t.Fatalf("Slack API %q: the demo workspace did not stand in", r.svc.SlackAPIURL())
	}
	testwait.Until(t, "the request's message in the demo's log", func() bool {
		return r.logs.FilterMessage("demo workspace: message posted").FilterField(zap.Strings("buttons", []string{"gantry_change/approve=cr-1", "gantry_change/reject=cr-1"})).Len() == 1
	})
	resp, err := r.press(t, relaySecret, "approve", "cr-1", "U0BOB0001", "demo-trigger-1")
	if err != nil || resp.Body != nil {
		t.Fatalf("press: %s, %v", resp.Body, err)
	}
	if got := r.secrets.decided(); len(got) != 1 || got[0].GetSlackEmail() != "bob@example.com" {
		t.Errorf("decisions %v, want bob's approval with his email", got)
	}
	testwait.Until(t, "the updated message in the demo's log", func() bool {
		return r.logs.FilterMessage("demo workspace: message updated").Len() == 1
	})
	updated := r.logs.FilterMessage("demo workspace: message updated").All()[0].ContextMap()
	if _, ok := updated["buttons"]; ok || !strings.Contains(fmt.Sprint(updated["text"]), "Applied") {
		t.Errorf("updated message %v, want it applied, without buttons", updated)
	}
}
