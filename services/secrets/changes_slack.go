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

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// The Slack side of approvals, as the secrets service sees it: the chat service relays. It reads the
// requests whose Slack message is missing or out of date, posts or updates them and says so; it
// relays the Approve and Reject buttons pressed, after verifying Slack's signature; it reads the
// rotation reminders due and claims each before posting. Only the service the policy names as
// slack.relay_service may call these, and the decision on a press is taken here, by the same rules
// as through the API, for the principal the Slack user maps to.

// checkRelay refuses every caller but the policy's relay service.
func (s *Service) checkRelay(ctx context.Context, what string) error {
	if s.approvals == nil || s.approvals.slack.RelayService == "" {
		return &changeStateError{msg: "Slack approvals are not configured (the policy file has no approvals.slack section)."}
	}
	p := PrincipalFrom(ctx)
	if p.Type != "service" || p.Name != s.approvals.slack.RelayService {
		return s.deny(ctx, "change", what, "", &deniedError{msg: p.Name + " is not the Slack relay of the approval policy (approvals.slack.relay_service)"})
	}
	return nil
}

// maxNotices bounds one relay poll.
const maxNotices = 50

// ListChangeNotices returns the requests whose Slack message is missing or shows an older status,
// oldest first (settling expired ones on the way, so an expiry reaches Slack too).
func (s *Service) ListChangeNotices(ctx context.Context) ([]*ChangeRequestView, error) {
	if err := s.checkRelay(ctx, "list-notices"); err != nil {
		return nil, err
	}
	all, err := s.allChangeRequests(ctx)
	if err != nil {
		return nil, err
	}
	var out []*ChangeRequestView
	for _, rec := range all {
		// A final request whose message shows it needs nothing; a pending one may have expired.
		if rec.Channel == "" || (rec.Status != store.ChangePending && noticeUpToDate(rec)) {
			continue
		}
		settled, err := s.settle(ctx, rec)
		if err != nil {
			s.logger.Warn("could not settle a change request", zap.String("change_request", rec.ID), zap.Error(err))
			continue
		}
		if noticeUpToDate(settled) {
			continue
		}
		out = append(out, changeView(settled))
		if len(out) == maxNotices {
			break
		}
	}
	return out, nil
}

// noticeUpToDate: the request's Slack message is posted and shows its status (and, while pending,
// its approvals so far).
func noticeUpToDate(rec *store.ChangeRequestRecord) bool {
	return rec.NoticeTS != "" && rec.NoticedStatus == noticedStatus(rec)
}

// noticedStatus is what a message showing rec up to date records: its status, and while it is
// pending the number of approvals shown ("pending/<n>").
func noticedStatus(rec *store.ChangeRequestRecord) string {
	if rec.Status == store.ChangePending {
		return fmt.Sprintf("%s/%d", store.ChangePending, len(rec.Approvals))
	}
	return rec.Status
}

// RecordChangeNotice records the message the relay posted or updated for a request and the status it
// shows (for a pending request, "pending/<approvals shown>", or plain "pending").
func (s *Service) RecordChangeNotice(ctx context.Context, id, channel, ts, shown string) error {
	if err := s.checkRelay(ctx, "record-notice"); err != nil {
		return err
	}
	if channel == "" || ts == "" || len(channel) > 100 || len(ts) > 100 {
		return invalid("notice_channel and notice_ts are required (up to 100 bytes)")
	}
	for attempt := 0; ; attempt++ {
		rec, err := s.changeRequest(ctx, id)
		if err != nil {
			return err
		}
		next := *rec
		next.Version = rec.Version + 1
		next.NoticeChannel, next.NoticeTS = channel, ts
		next.NoticedStatus = shown
		if shown == store.ChangePending {
			next.NoticedStatus = noticedStatus(rec)
		}
		err = s.store.PutChangeRequest(ctx, &next, rec.Version)
		if errors.Is(err, store.ErrRevisionConflict) && attempt < 5 {
			continue
		}
		return err
	}
}

// SlackPress is an Approve or Reject button pressed in Slack, as the relay saw it.
type SlackPress struct {
	ID, Decision, TeamID, UserID string
	// ConfirmedEmail is the user's email when Slack reports it confirmed; "" otherwise.
	ConfirmedEmail string
}

// DecideChangeFromSlack decides on a press for the principal the Slack user maps to. A refusal (not
// an approver, the requester, not pending...) is not an error: it is returned as refused, the text
// the presser sees; the request is unchanged.
func (s *Service) DecideChangeFromSlack(ctx context.Context, press SlackPress) (view *ChangeRequestView, principal, refused string, err error) {
	if err := s.checkRelay(ctx, "decide"); err != nil {
		return nil, "", "", err
	}
	if press.TeamID == "" || press.UserID == "" || len(press.TeamID) > 64 || len(press.UserID) > 64 {
		return nil, "", "", invalid("slack_team_id and slack_user_id are required")
	}
	principal = s.approvals.slackPrincipal(press.TeamID, press.UserID, press.ConfirmedEmail)
	if principal == "" {
		return nil, "", "Gantry cannot tell who you are: your Slack profile has no confirmed email, and approvals.slack_users does not map you.", nil
	}
	pctx := WithPrincipal(ctx, Principal{Type: parsePrincipal(principal).Type, Name: parsePrincipal(principal).Name, AuthType: "slack"})
	via := "slack:" + press.TeamID + "/" + press.UserID
	switch press.Decision {
	case "approve":
		view, err = s.ApproveChangeRequest(pctx, press.ID, via)
	case "reject":
		view, err = s.RejectChangeRequest(pctx, press.ID, "rejected in Slack")
	default:
		return nil, principal, "", invalid("decision must be approve or reject")
	}
	var denied *deniedError
	var state *changeStateError
	var nf *notFoundError
	switch {
	case errors.As(err, &denied):
		return nil, principal, denied.msg, nil
	case errors.As(err, &state):
		return nil, principal, state.msg, nil
	case errors.As(err, &nf):
		return nil, principal, nf.msg, nil
	}
	return view, principal, "", err
}

// DueCredential is a credential due for rotation within a window, or overdue.
type DueCredential struct {
	ID, Name string
	// State is "due" or "overdue".
	State        string
	Next         time.Time
	LastRotation *time.Time
	Services     []string
}

// ListDueCredentials lists current credentials whose next rotation date (Confidant's rotation
// rules: -maximum-rotation-days, -rotation-days-config) falls within withinDays, or has passed;
// soonest first. It needs the list permission.
func (s *Service) ListDueCredentials(ctx context.Context, withinDays *int32) ([]DueCredential, error) {
	if err := s.checkListCredentials(ctx); err != nil {
		return nil, err
	}
	days := defaultReminderDays
	if s.approvals != nil && s.approvals.reminders != nil {
		days = s.approvals.reminders.BeforeDays
	}
	if withinDays != nil {
		if *withinDays < 0 || *withinDays > 3660 {
			return nil, invalid("within_days must be 0 to 3660")
		}
		days = int(*withinDays)
	}
	return s.dueCredentials(ctx, days)
}

func (s *Service) dueCredentials(ctx context.Context, days int) ([]DueCredential, error) {
	now := s.now()
	horizon := now.AddDate(0, 0, days)
	var out []DueCredential
	token := ""
	for {
		recs, next, err := s.store.ListCredentials(ctx, store.Page{Limit: 1000, Token: token})
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			nextRotation := s.nextRotation(rec)
			if nextRotation == nil || nextRotation.After(horizon) {
				continue
			}
			d := DueCredential{ID: rec.ID, Name: rec.Name, State: "due", Next: *nextRotation, LastRotation: rec.LastRotationDate}
			if !nextRotation.After(now) {
				d.State = "overdue"
			}
			if d.Services, err = s.store.CredentialServices(ctx, rec.ID); err != nil {
				return nil, err
			}
			out = append(out, d)
		}
		if next == "" {
			break
		}
		token = next
	}
	slices.SortFunc(out, func(a, b DueCredential) int {
		if c := a.Next.Compare(b.Next); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// RotationReminder is one reminder the relay is to post.
type RotationReminder struct {
	Due       DueCredential
	Key       string
	Team, Bot string
	Channels  []string
}

// reminderKeyPrefix starts the claim keys of reminders (kept beside the login nonces, with expiry).
const reminderKeyPrefix = "rotation-reminder/"

// reminderScan caches the due list between polls: reading every credential each relay poll would
// cost a full scan every few seconds.
type reminderScan struct {
	mu   sync.Mutex
	at   time.Time
	list []DueCredential
}

// reminderScanEvery is how often the due list is read again for reminders.
const reminderScanEvery = time.Minute

// ListRotationReminders returns the reminders to post now: one per due or overdue credential per
// day, not claimed yet.
func (s *Service) ListRotationReminders(ctx context.Context) ([]RotationReminder, error) {
	if err := s.checkRelay(ctx, "list-reminders"); err != nil {
		return nil, err
	}
	r := s.approvals.reminders
	if r == nil {
		return nil, nil
	}
	s.reminders.mu.Lock()
	defer s.reminders.mu.Unlock()
	now := s.now()
	if s.reminders.list == nil || now.Sub(s.reminders.at) >= reminderScanEvery || now.Before(s.reminders.at) {
		list, err := s.dueCredentials(ctx, r.BeforeDays)
		if err != nil {
			return nil, err
		}
		s.reminders.list, s.reminders.at = list, now
	}
	var out []RotationReminder
	for _, d := range s.reminders.list {
		key := reminderKey(d, now)
		claimed, err := s.store.LoginNonceClaimed(ctx, key)
		if err != nil {
			return nil, err
		}
		if claimed {
			continue
		}
		out = append(out, RotationReminder{Due: d, Key: key, Team: s.approvals.slack.Team, Bot: s.approvals.slack.Bot, Channels: r.channelsFor(d.Services)})
		if len(out) == maxNotices {
			break
		}
	}
	return out, nil
}

func reminderKey(d DueCredential, now time.Time) string {
	return reminderKeyPrefix + d.ID + "/" + d.State + "/" + now.Format("2006-01-02")
}

// ClaimRotationReminder claims a reminder's key for the day: true for the first claim only.
func (s *Service) ClaimRotationReminder(ctx context.Context, key string) (bool, error) {
	if err := s.checkRelay(ctx, "claim-reminder"); err != nil {
		return false, err
	}
	rest, ok := strings.CutPrefix(key, reminderKeyPrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || checkID("credential", parts[0]) != nil || (parts[1] != "due" && parts[1] != "overdue") || strings.ContainsRune(key, 0) {
		return false, invalid("key is not a rotation reminder key")
	}
	if _, err := time.Parse("2006-01-02", parts[2]); err != nil {
		return false, invalid("key is not a rotation reminder key")
	}
	return s.store.ClaimLoginNonce(ctx, key, s.now().Add(48*time.Hour))
}
