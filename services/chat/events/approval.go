package events

import (
	"context"
	"encoding/json"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/logging"
)

// ApprovalBlockID is the block_id of the Approve and Reject buttons of a change request message that
// chat's approval relay posts: a press of one is decided in-process (Approvals), never looked up among
// the configured interactive handlers.
const ApprovalBlockID = "gantry_change"

// The action_ids of the two buttons, as the press names them.
const (
	ApprovalApprove = "approve"
	ApprovalReject  = "reject"
)

// approvalUnreachable is the presser's answer when the decision could not be relayed: nothing was
// decided, and pressing again may work.
const approvalUnreachable = "could not reach the secrets service, try again"

// ApprovalPress is an Approve or Reject button of a change request message pressed in Slack. Every
// field comes from the request Slack signed, except Email, which Slack answered about the presser.
type ApprovalPress struct {
	// ChangeID is the change request's id (the button's value).
	ChangeID string
	// Decision is the button's action_id: ApprovalApprove or ApprovalReject.
	Decision string
	// TeamID and UserID are the presser's Slack team and user ids (team.id, user.id).
	TeamID, UserID string
	// Email is the presser's email when Slack reports it confirmed (users.info is_email_confirmed),
	// else "": an unconfirmed address proves nothing about who pressed.
	Email string
}

// Approvals decides the presses of change request buttons (chat's approval relay, which asks the
// secrets service). Decide returns the reason the decision was refused, for the presser alone, or
// "" when it was taken; an error means the secrets service could not be asked.
type Approvals interface {
	Decide(ctx context.Context, p ApprovalPress) (refused string, err error)
}

// HandleApprovals routes the presses of change request buttons (block_id ApprovalBlockID) to a.
// Without it they are looked up among the configured handlers like any other component. Call it
// before the first Receive.
func (in *Inbound) HandleApprovals(a Approvals) { in.approvals = a }

// isApprovalPress reports whether a verified interactive payload is a press of a change request
// button this replica decides itself.
func (in *Inbound) isApprovalPress(p map[string]any) bool {
	return in.approvals != nil && p["type"] == "block_actions" && callbackID(p) == ApprovalBlockID
}

// receiveApprovalPress decides a press of a change request button within -chat-inbound-sync-timeout
// (Slack waits 3 s) and answers the presser: nothing (an empty 200; the relay updates the message),
// or an ephemeral reply saying why nothing happened. A replayed press (the same trigger_id within
// the deduplication window) changes nothing and gets the empty 200.
func (in *Inbound) receiveApprovalPress(ctx context.Context, b *Bot, p map[string]any) (Response, error) {
	if first, err := in.firstTime(ctx, p); err != nil || !first {
		return Response{}, err
	}
	in.count(KindInteractive, "approval_press")
	press, ok := approvalPressOf(p)
	if !ok {
		in.logger.Info("ignored a change request button press without a known action, id or user", zap.String("bot", b.Name))
		return ephemeral("this button is not one gantry knows"), nil
	}
	ctx, cancel := context.WithTimeout(ctx, in.cfg.SyncTimeout)
	defer cancel()
	// The lookup gets half the time at most, so a slow Slack leaves the secrets service time to answer.
	lookupCtx, cancelLookup := context.WithTimeout(ctx, in.cfg.SyncTimeout/2)
	press.Email = in.confirmedEmail(lookupCtx, b, press.UserID)
	cancelLookup()
	refused, err := in.approvals.Decide(ctx, press)
	if err != nil {
		in.count(KindInteractive, "approval_failed")
		in.logger.Warn("could not relay a change request decision to the secrets service",
			logging.Untrusted("change_id", press.ChangeID), zap.String("decision", press.Decision), zap.Error(err))
		refused = approvalUnreachable
	}
	if refused != "" {
		in.tellPresser(ctx, b, p, press.UserID, refused)
		return ephemeral(refused), nil
	}
	return Response{}, nil
}

// tellPresser shows text to the presser alone with chat.postEphemeral: Slack ignores the body of
// the answer to a block_actions press, so the ephemeral answer above only reaches clients of legacy
// interactive messages. Best effort: the press itself changed nothing either way.
func (in *Inbound) tellPresser(ctx context.Context, b *Bot, p map[string]any, userID, text string) {
	channel, _ := p["channel"].(map[string]any)
	id, _ := channel["id"].(string)
	if id == "" {
		return
	}
	if _, err := in.slack.Call(ctx, b.Team, b.Name, "chat.postEphemeral", map[string]any{"channel": id, "user": userID, "text": text}); err != nil {
		in.logger.Info("could not tell a presser why nothing happened", zap.String("bot", b.Name), zap.Error(err))
	}
}

// approvalPressOf reads a press from a block_actions payload: its first action (the one callbackID
// matched), the presser and their team. ok is false when the action or the presser is missing.
func approvalPressOf(p map[string]any) (ApprovalPress, bool) {
	field := func(m map[string]any, k string) string {
		s, _ := m[k].(string)
		return s
	}
	acts, _ := p["actions"].([]any)
	if len(acts) == 0 {
		return ApprovalPress{}, false
	}
	act, _ := acts[0].(map[string]any)
	user, _ := p["user"].(map[string]any)
	team, _ := p["team"].(map[string]any)
	press := ApprovalPress{ChangeID: field(act, "value"), Decision: field(act, "action_id"), UserID: field(user, "id"), TeamID: field(team, "id")}
	if press.TeamID == "" {
		// teamOf's rule, which authenticate checked against the app's team.
		press.TeamID = teamOf(p)
	}
	known := press.Decision == ApprovalApprove || press.Decision == ApprovalReject
	return press, known && press.ChangeID != "" && press.UserID != "" && press.TeamID != ""
}

// confirmedEmail is the email of a user that Slack reports confirmed (users.info with the bot's own
// token, through the dispatcher's cache), "" otherwise or when Slack does not answer.
func (in *Inbound) confirmedEmail(ctx context.Context, b *Bot, userID string) string {
	raw := in.lookup(ctx, in.userName, b, userID, "users.info", map[string]any{"user": userID}, "user")
	var u struct {
		Confirmed bool `json:"is_email_confirmed"`
		Profile   struct {
			Email string `json:"email"`
		} `json:"profile"`
	}
	if raw == nil || json.Unmarshal(raw, &u) != nil || !u.Confirmed {
		return ""
	}
	return u.Profile.Email
}

// ephemeral is an answer only the presser sees, leaving the message as it is.
func ephemeral(text string) Response {
	return Response{Body: jsonBody(map[string]any{"response_type": "ephemeral", "replace_original": false, "text": text})}
}
