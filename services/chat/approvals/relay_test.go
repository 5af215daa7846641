package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/events"
)

// scriptedSecrets is the secrets service as Secrets, answering what a test sets and counting calls.
// The end-to-end behaviour over gRPC is tested in package chat; here the relay's own rules are, with
// its clock in the test's hands.
type scriptedSecrets struct {
	mu                 sync.Mutex
	notices            []*secretsv1.ChangeNotice
	noticesErr, remErr error
	recordErr          error
	reminders          []*secretsv1.RotationReminder
	listed, remListed  int
	records            []*secretsv1.RecordChangeNoticeRequest
	claims             []string
	decide             func(*secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error)
}

func (s *scriptedSecrets) ListChangeNotices(context.Context) ([]*secretsv1.ChangeNotice, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listed++
	return s.notices, s.noticesErr
}

func (s *scriptedSecrets) RecordChangeNotice(_ context.Context, r *secretsv1.RecordChangeNoticeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recordErr != nil {
		return s.recordErr
	}
	s.records = append(s.records, r)
	return nil
}

func (s *scriptedSecrets) ListRotationReminders(context.Context) ([]*secretsv1.RotationReminder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remListed++
	return s.reminders, s.remErr
}

func (s *scriptedSecrets) ClaimRotationReminder(_ context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, key)
	return true, nil
}

func (s *scriptedSecrets) DecideChangeFromSlack(_ context.Context, r *secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
	return s.decide(r)
}

// recordingSlack answers chat.postMessage with a new ts and chat.update with the same one, or a
// scripted error code, and records the calls.
type recordingSlack struct {
	mu    sync.Mutex
	calls []string // method channel ts
	fail  map[string]string
	n     int
}

func (s *recordingSlack) Post(_ context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, _ := kwargs["channel"].(string)
	ts, _ := kwargs["ts"].(string)
	s.calls = append(s.calls, fmt.Sprintf("%s %s %s", method, ch, ts))
	if code := s.fail[method]; code != "" {
		return json.RawMessage(fmt.Sprintf(`{"ok":false,"error":%q}`, code)), nil
	}
	if method == "chat.postMessage" {
		s.n++
		ts = fmt.Sprintf("1700000000.%06d", s.n)
	}
	return json.RawMessage(fmt.Sprintf(`{"ok":true,"channel":"C0GENERAL","ts":%q}`, ts)), nil
}

func (s *recordingSlack) made() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func notice(id, status, ts string) *secretsv1.ChangeNotice {
	n := &secretsv1.ChangeNotice{ChangeRequest: &secretsv1.ChangeRequest{Id: id, Status: status, Action: "update", ResourceType: "credential", ResourceId: "c1"},
		Team: "acme", Bot: "pingbot", Channel: "#general"}
	if ts != "" {
		n.NoticeChannel, n.NoticeTs = "C0GENERAL", ts
	}
	return n
}

// testRelay is a relay whose clock the test moves.
func testRelay(sec Secrets, slack Slack, logger *zap.Logger) (*Relay, *time.Time) {
	r := New(Config{PollInterval: 2 * time.Second, RefusedRetry: time.Minute, MaxSlackBackoff: 10 * time.Second}, sec, slack, logger)
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	return r, &now
}

// TestRelayRefusedBacksOffQuietly: a refusal is logged once at info and asked about again only after
// RefusedRetry, each poll on its own clock (reminders keep going while notices are refused); an
// unreachable secrets service is asked again at each tick, logged once; the end of either is logged.
func TestRelayRefusedBacksOffQuietly(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	sec := &scriptedSecrets{noticesErr: fmt.Errorf("%w: Unimplemented", ErrRefused)}
	r, now := testRelay(sec, &recordingSlack{}, zap.New(core))
	ctx := context.Background()
	for range 5 {
		r.pass(ctx)
		*now = now.Add(2 * time.Second)
	}
	if sec.listed != 1 || sec.remListed != 5 {
		t.Errorf("in 10s of ticks: %d notice polls (want 1, then RefusedRetry), %d reminder polls (want 5)", sec.listed, sec.remListed)
	}
	if n := logs.FilterMessageSnippet("does not take").Len(); n != 1 {
		t.Errorf("%d refusal log lines, want 1", n)
	}
	*now = now.Add(time.Minute)
	r.pass(ctx)
	if sec.listed != 2 {
		t.Errorf("%d notice polls after RefusedRetry, want 2", sec.listed)
	}
	if n := logs.FilterMessageSnippet("does not take").Len(); n != 1 {
		t.Errorf("%d refusal log lines after a second refusal, want still 1", n)
	}

	sec.noticesErr = fmt.Errorf("%w: connection refused", ErrUnavailable)
	*now = now.Add(time.Minute)
	for range 3 {
		r.pass(ctx)
		*now = now.Add(2 * time.Second)
	}
	if sec.listed != 5 {
		t.Errorf("%d notice polls, want one per tick while unreachable (5)", sec.listed)
	}
	if n := logs.FilterMessageSnippet("unreachable").Len(); n != 1 {
		t.Errorf("%d unreachable log lines, want 1", n)
	}
	sec.noticesErr = nil
	r.pass(ctx)
	if n := logs.FilterMessageSnippet("answers the Slack relay again").Len(); n != 1 {
		t.Errorf("%d recovery log lines, want 1", n)
	}
}

// TestRelayKickSkipsTheRefusedWait: a decided press kicks the relay, which asks at once even while
// it waits out a refusal (the secrets service just answered the press).
func TestRelayKickSkipsTheRefusedWait(t *testing.T) {
	sec := &scriptedSecrets{noticesErr: ErrRefused}
	r := New(Config{PollInterval: time.Hour, RefusedRetry: time.Hour}, sec, &recordingSlack{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the first poll", func() bool { return sec.count() == 1 })
	sec.mu.Lock()
	sec.noticesErr = nil
	sec.mu.Unlock()
	r.Kick()
	waitFor(t, "the poll the kick asked for", func() bool { return sec.count() == 2 })
}

func (s *scriptedSecrets) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // only bounds a hang
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRelayUnrecordedMessageIsUpdatedNotPostedAgain: when the secrets service does not take the
// record of a posted message, the next pass updates that message instead of posting a second one.
func TestRelayUnrecordedMessageIsUpdatedNotPostedAgain(t *testing.T) {
	sec := &scriptedSecrets{notices: []*secretsv1.ChangeNotice{notice("cr1", StatusPending, "")}, recordErr: ErrUnavailable}
	slack := &recordingSlack{}
	r, now := testRelay(sec, slack, nil)
	r.pass(context.Background())
	sec.recordErr = nil
	*now = now.Add(2 * time.Second)
	r.pass(context.Background())
	want := []string{"chat.postMessage #general ", "chat.update C0GENERAL 1700000000.000001"}
	if got := slack.made(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Slack calls %q, want %q", got, want)
	}
	if len(sec.records) != 1 || sec.records[0].GetNoticeTs() != "1700000000.000001" {
		t.Errorf("records %v", sec.records)
	}
}

// TestRelayGoneMessageIsPostedAgain: a message deleted in Slack is posted again (and recorded anew)
// rather than updated in vain at every tick.
func TestRelayGoneMessageIsPostedAgain(t *testing.T) {
	sec := &scriptedSecrets{notices: []*secretsv1.ChangeNotice{notice("cr1", StatusApplied, "1600000000.000001")}}
	slack := &recordingSlack{fail: map[string]string{"chat.update": "message_not_found"}}
	r, _ := testRelay(sec, slack, nil)
	r.pass(context.Background())
	want := []string{"chat.update C0GENERAL 1600000000.000001", "chat.postMessage #general "}
	if got := slack.made(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Slack calls %q, want %q", got, want)
	}
	if len(sec.records) != 1 || sec.records[0].GetNoticeTs() != "1700000000.000001" || sec.records[0].GetStatus() != StatusApplied {
		t.Errorf("records %v", sec.records)
	}
}

// TestRelaySlackRefusalBacksOff: a message Slack refuses (a channel the bot is not in) is tried
// again later and later, up to MaxSlackBackoff, not at every tick; the other requests go on.
func TestRelaySlackRefusalBacksOff(t *testing.T) {
	sec := &scriptedSecrets{notices: []*secretsv1.ChangeNotice{notice("cr1", StatusPending, "")}}
	slack := &recordingSlack{fail: map[string]string{"chat.postMessage": "not_in_channel"}}
	core, logs := observer.New(zap.WarnLevel)
	r, now := testRelay(sec, slack, zap.New(core))
	var tried []int
	for tick := range 30 { // a minute of 2s ticks
		before := len(slack.made())
		r.pass(context.Background())
		if len(slack.made()) > before {
			tried = append(tried, tick)
		}
		*now = now.Add(2 * time.Second)
	}
	// Waits of 4s, 8s, then MaxSlackBackoff (10s): ticks 0, 2, 6, 11, 16, ...
	want := []int{0, 2, 6, 11, 16, 21, 26}
	if fmt.Sprint(tried) != fmt.Sprint(want) {
		t.Errorf("tried at ticks %v, want %v", tried, want)
	}
	if n := logs.Len(); n != len(want) {
		t.Errorf("%d warnings, want one per try (%d)", n, len(want))
	}
	if len(sec.records) != 0 {
		t.Errorf("recorded %v although Slack refused", sec.records)
	}
}

// TestDecideRefusedRelayIsAnsweredNotAnError: a secrets service that refuses the relay's decision
// answers the presser with a reason, not "try again".
func TestDecideRefusedRelayIsAnsweredNotAnError(t *testing.T) {
	sec := &scriptedSecrets{decide: func(*secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
		return nil, fmt.Errorf("%w: PermissionDenied", ErrRefused)
	}}
	r := New(Config{}, sec, &recordingSlack{}, nil)
	refused, err := r.Decide(context.Background(), pressOf("cr1"))
	if err != nil || refused != refusedRelay {
		t.Errorf("Decide: %q, %v", refused, err)
	}
	sec.decide = func(*secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error) {
		return nil, ErrUnavailable
	}
	if _, err := r.Decide(context.Background(), pressOf("cr1")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Decide with the secrets service down: %v, want the error", err)
	}
}

func pressOf(id string) events.ApprovalPress {
	return events.ApprovalPress{ChangeID: id, Decision: events.ApprovalApprove, TeamID: "T0FAKE001", UserID: "U0BOB0001"}
}
