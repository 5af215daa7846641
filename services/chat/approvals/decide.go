package approvals

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/logging"
	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/events"
)

// refusedRelay is the presser's answer when the secrets service does not take decisions from this
// relay (no approval policy naming it, or a secrets service without change requests).
const refusedRelay = "the secrets service does not take approvals from this Slack app"

// Decide implements events.Approvals: it relays a press, whose signature the receiver verified, to
// the secrets service, which maps the Slack user to a principal and approves or rejects as that
// principal may. It returns the secrets service's refusal for the presser, or "" once the decision
// was taken, and then kicks the relay so the message shows it. An error is a secrets service that
// could not be asked.
func (r *Relay) Decide(ctx context.Context, p events.ApprovalPress) (string, error) {
	resp, err := r.secrets.DecideChangeFromSlack(ctx, &secretsv1.DecideChangeFromSlackRequest{
		Id: p.ChangeID, Decision: p.Decision, SlackTeamId: p.TeamID, SlackUserId: p.UserID, SlackEmail: p.Email,
	})
	log := r.logger.With(logging.Untrusted("change_id", p.ChangeID), zap.String("decision", p.Decision),
		logging.Untrusted("slack_team_id", p.TeamID), logging.Untrusted("slack_user_id", p.UserID))
	switch {
	case errors.Is(err, ErrRefused):
		log.Info("the secrets service refused a decision relayed from Slack", zap.Error(err))
		return refusedRelay, nil
	case err != nil:
		return "", err
	case resp.GetRefused() != "":
		log.Info("a decision pressed in Slack was refused", zap.String("refused", logging.Truncate(resp.GetRefused())), zap.String("principal", resp.GetPrincipal()))
		return resp.GetRefused(), nil
	}
	log.Info("a change request was decided in Slack", zap.String("principal", resp.GetPrincipal()),
		zap.String("status", resp.GetChangeRequest().GetStatus()))
	r.Kick()
	return "", nil
}
