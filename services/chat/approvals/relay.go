package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// Secrets is the secrets service as the relay uses it, authenticated as the chat service's own
// service principal (chat adapts its gRPC client). Errors wrap ErrRefused or ErrUnavailable where the
// secrets service said so.
type Secrets interface {
	// ListChangeNotices returns the change requests whose message is missing or shows an older status.
	ListChangeNotices(ctx context.Context) ([]*secretsv1.ChangeNotice, error)
	// RecordChangeNotice records the message posted or updated for a change request.
	RecordChangeNotice(ctx context.Context, r *secretsv1.RecordChangeNoticeRequest) error
	// ListRotationReminders returns the rotation reminders to post now.
	ListRotationReminders(ctx context.Context) ([]*secretsv1.RotationReminder, error)
	// ClaimRotationReminder claims a reminder: true when this call claimed it first.
	ClaimRotationReminder(ctx context.Context, key string) (bool, error)
	// DecideChangeFromSlack relays a button press.
	DecideChangeFromSlack(ctx context.Context, r *secretsv1.DecideChangeFromSlackRequest) (*secretsv1.DecideChangeFromSlackResponse, error)
}

var (
	// ErrRefused is the secrets service refusing the relay: it does not implement the relay yet, its
	// approval policy names another relay service or no Slack at all, or the service token is not
	// accepted. Asking again soon will not change that.
	ErrRefused = errors.New("the secrets service refuses the Slack relay")
	// ErrUnavailable is a secrets service that could not be reached or did not answer in time.
	ErrUnavailable = errors.New("the secrets service is unavailable")
)

// Slack calls the Slack Web API as a configured team and bot, with the bot's own token (chat's
// client, tokens and retries), and returns Slack's JSON answer.
type Slack interface {
	Post(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error)
}

// Config configures the relay.
type Config struct {
	// PollInterval is how often the relay asks the secrets service for messages to post
	// (-chat-approvals-poll-interval); 0 turns the polling off (presses are still relayed).
	PollInterval time.Duration
	// RefusedRetry is how long the relay waits before asking again once the secrets service refused
	// it (ErrRefused). Zero is a minute.
	RefusedRetry time.Duration
	// MaxSlackBackoff bounds the wait before the message of a change request that Slack keeps
	// refusing (a channel the bot is not in, an unknown bot) is tried again. Zero is five minutes.
	MaxSlackBackoff time.Duration
}

// callTimeout bounds one call to the secrets service.
const callTimeout = 10 * time.Second

// Relay posts the change requests and rotation reminders of the secrets service to Slack, and relays
// the presses of the messages' buttons back. Run it once per chat replica.
type Relay struct {
	cfg     Config
	secrets Secrets
	slack   Slack
	logger  *zap.Logger
	now     func() time.Time
	// kick asks Run for a pass at once (a press changed a request).
	kick chan struct{}

	// Owned by Run's goroutine.
	notices, reminders part
	// unrecorded are messages posted or updated whose record the secrets service did not take: the
	// next pass updates them instead of posting the request again.
	unrecorded map[string]messageRef
	// slackFailures are the change requests whose message Slack refused, and when to try again.
	slackFailures map[string]slackFailure
}

// part is one of the relay's two polls (change notices, rotation reminders), which the secrets
// service may refuse independently.
type part struct {
	name string
	// due is when to ask again; zero: at the next tick.
	due time.Time
	// trouble is the failure last logged ("" while the secrets service answers), so that a failure
	// that lasts is logged once.
	trouble string
}

// messageRef is a posted Slack message.
type messageRef struct{ channel, ts string }

type slackFailure struct {
	attempts int
	next     time.Time
}

// New returns a relay over the secrets service and Slack. Run runs its polls; Decide relays presses.
func New(cfg Config, secrets Secrets, slack Slack, logger *zap.Logger) *Relay {
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.RefusedRetry <= 0 {
		cfg.RefusedRetry = time.Minute
	}
	if cfg.MaxSlackBackoff <= 0 {
		cfg.MaxSlackBackoff = 5 * time.Minute
	}
	return &Relay{
		cfg: cfg, secrets: secrets, slack: slack, logger: logger, now: time.Now, kick: make(chan struct{}, 1),
		notices: part{name: "change requests"}, reminders: part{name: "rotation reminders"},
		unrecorded: map[string]messageRef{}, slackFailures: map[string]slackFailure{},
	}
}

// Kick asks for a pass over the change requests at once, without waiting for the poll interval: a
// press was decided, and its message should show it. It never blocks; kicks during a pass make one
// more pass.
func (r *Relay) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run polls until ctx ends, every PollInterval and at each Kick; with no PollInterval it returns at
// once. A failure is logged when it starts and when it ends, never each time, and never stops the
// loop: a refusal is asked about again after RefusedRetry, anything else at the next tick.
func (r *Relay) Run(ctx context.Context) error {
	if r.cfg.PollInterval <= 0 {
		r.logger.Info("the approval relay's polling is off (-chat-approvals-poll-interval=0): no change request is posted to Slack by this replica")
		return nil
	}
	r.logger.Info("relaying change requests and rotation reminders to Slack", zap.Duration("poll_interval", r.cfg.PollInterval))
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-r.kick:
			r.notices.due = time.Time{}
		}
		r.pass(ctx)
		tick.Reset(r.cfg.PollInterval)
	}
}

// pass runs each poll that is due.
func (r *Relay) pass(ctx context.Context) {
	if !r.now().Before(r.notices.due) {
		r.relayNotices(ctx)
	}
	if ctx.Err() == nil && !r.now().Before(r.reminders.due) {
		r.postReminders(ctx)
	}
}

// relayNotices posts or updates the message of every change request the secrets service lists, and
// records each one back.
func (r *Relay) relayNotices(ctx context.Context) {
	notices, err := call(ctx, r.secrets.ListChangeNotices)
	if err != nil {
		r.failed(ctx, &r.notices, err)
		return
	}
	listed := map[string]bool{}
	for _, n := range notices {
		if ctx.Err() != nil {
			return
		}
		id := n.GetChangeRequest().GetId()
		if id == "" {
			continue // nothing to record it under
		}
		listed[id] = true
		if f, ok := r.slackFailures[id]; ok && r.now().Before(f.next) {
			continue
		}
		ref, err := r.show(ctx, n)
		if err != nil {
			r.slackFailed(ctx, n, err)
			continue
		}
		delete(r.slackFailures, id)
		rec := &secretsv1.RecordChangeNoticeRequest{Id: id, NoticeChannel: ref.channel, NoticeTs: ref.ts, Status: n.GetChangeRequest().GetStatus()}
		if _, err := call(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, r.secrets.RecordChangeNotice(ctx, rec) }); err != nil {
			r.unrecorded[id] = ref
			r.failed(ctx, &r.notices, err)
			return
		}
		delete(r.unrecorded, id)
	}
	r.answered(&r.notices)
	// A request the secrets service no longer lists needs nothing more.
	for id := range r.unrecorded {
		if !listed[id] {
			delete(r.unrecorded, id)
		}
	}
	for id := range r.slackFailures {
		if !listed[id] {
			delete(r.slackFailures, id)
		}
	}
}

// show posts a change request's message, or updates the one posted before, and returns where it is.
// A message that is gone (deleted, or its channel archived) is posted again.
func (r *Relay) show(ctx context.Context, n *secretsv1.ChangeNotice) (messageRef, error) {
	cr := n.GetChangeRequest()
	msg := RenderChange(cr)
	at := messageRef{channel: n.GetNoticeChannel(), ts: n.GetNoticeTs()}
	if prev, ok := r.unrecorded[cr.GetId()]; ok && at.ts == "" {
		at = prev // posted before, but the secrets service did not take the record
	}
	if at.ts != "" {
		ref, err := r.postAs(ctx, n.GetTeam(), n.GetBot(), "chat.update", map[string]any{"channel": at.channel, "ts": at.ts, "text": msg.Text, "blocks": msg.Blocks})
		if err == nil {
			r.logger.Info("updated a change request's Slack message", zap.String("change_id", cr.GetId()), zap.String("status", cr.GetStatus()), zap.String("channel", ref.channel))
			return ref, nil
		}
		var se *slackError
		if !errors.As(err, &se) || !messageGone[se.code] {
			return messageRef{}, err
		}
		r.logger.Info("a change request's Slack message is gone: posting it again", zap.String("change_id", cr.GetId()), zap.String("slack_error", se.code))
	}
	ref, err := r.postAs(ctx, n.GetTeam(), n.GetBot(), "chat.postMessage", map[string]any{"channel": n.GetChannel(), "text": msg.Text, "blocks": msg.Blocks, "unfurl_links": false})
	if err == nil {
		r.logger.Info("posted a change request to Slack", zap.String("change_id", cr.GetId()), zap.String("status", cr.GetStatus()), zap.String("channel", ref.channel))
	}
	return ref, err
}

// messageGone are chat.update's answers for a message that cannot be updated any more.
var messageGone = map[string]bool{"message_not_found": true, "channel_not_found": true, "cant_update_message": true, "is_archived": true}

// slackFailed logs a message Slack refused and puts its request off, longer each time (up to
// MaxSlackBackoff), so a channel the bot cannot post in is not tried every tick.
func (r *Relay) slackFailed(ctx context.Context, n *secretsv1.ChangeNotice, err error) {
	if ctx.Err() != nil {
		return
	}
	id := n.GetChangeRequest().GetId()
	f := r.slackFailures[id]
	f.attempts++
	wait := min(r.cfg.PollInterval<<min(f.attempts, 16), r.cfg.MaxSlackBackoff)
	f.next = r.now().Add(wait)
	r.slackFailures[id] = f
	r.logger.Warn("could not post a change request to Slack; trying again later", zap.String("change_id", id),
		zap.String("team", n.GetTeam()), zap.String("bot", n.GetBot()), zap.String("channel", n.GetChannel()),
		zap.Int("attempts", f.attempts), zap.Duration("retry_in", wait), zap.Error(err))
}

// postReminders claims every rotation reminder the secrets service lists and posts the ones it
// claimed to each of their channels. A reminder another replica (or an earlier pass) claimed is not
// posted; one whose post fails after the claim waits for the next day's.
func (r *Relay) postReminders(ctx context.Context) {
	reminders, err := call(ctx, r.secrets.ListRotationReminders)
	if err != nil {
		r.failed(ctx, &r.reminders, err)
		return
	}
	for _, rem := range reminders {
		if ctx.Err() != nil {
			return
		}
		claimed, err := call(ctx, func(ctx context.Context) (bool, error) { return r.secrets.ClaimRotationReminder(ctx, rem.GetKey()) })
		if err != nil {
			r.failed(ctx, &r.reminders, err)
			return
		}
		if !claimed {
			continue
		}
		msg := RenderReminder(rem.GetCredential())
		for _, ch := range rem.GetChannels() {
			_, err := r.postAs(ctx, rem.GetTeam(), rem.GetBot(), "chat.postMessage", map[string]any{"channel": ch, "text": msg.Text, "blocks": msg.Blocks, "unfurl_links": false})
			if err != nil {
				r.logger.Warn("could not post a rotation reminder to Slack; it is claimed for today", zap.String("credential_id", rem.GetCredential().GetId()),
					zap.String("team", rem.GetTeam()), zap.String("bot", rem.GetBot()), zap.String("channel", ch), zap.Error(err))
				continue
			}
			r.logger.Info("posted a rotation reminder to Slack", zap.String("credential_id", rem.GetCredential().GetId()), zap.String("state", rem.GetCredential().GetState()), zap.String("channel", ch))
		}
	}
	r.answered(&r.reminders)
}

// slackError is Slack's ok:false answer.
type slackError struct{ code string }

func (e *slackError) Error() string { return "Slack answered " + e.code }

// postAs makes a chat.postMessage or chat.update call as a team's bot and returns the message Slack
// answered with: its channel id and ts.
func (r *Relay) postAs(ctx context.Context, team, bot, method string, kwargs map[string]any) (messageRef, error) {
	raw, err := r.slack.Post(ctx, team, bot, method, kwargs)
	if err != nil {
		return messageRef{}, err
	}
	var ans struct {
		OK      bool   `json:"ok"`
		Error   string `json:"error"`
		Channel string `json:"channel"`
		TS      string `json:"ts"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return messageRef{}, fmt.Errorf("%s: Slack's answer is not JSON: %w", method, err)
	}
	if !ans.OK {
		return messageRef{}, &slackError{code: ans.Error}
	}
	if ans.Channel == "" || ans.TS == "" {
		return messageRef{}, fmt.Errorf("%s: Slack's answer names no channel and ts", method)
	}
	return messageRef{channel: ans.Channel, ts: ans.TS}, nil
}

// failed notes that the secrets service did not answer a poll: a refusal is asked about again after
// RefusedRetry, anything else at the next tick. Each kind of failure is logged once, when it starts
// (a refusal at info: it is how a secrets service without approvals answers), however many polls
// it affects; the stop of the process is not a failure.
func (r *Relay) failed(ctx context.Context, p *part, err error) {
	if ctx.Err() != nil {
		return
	}
	trouble := "failing"
	switch {
	case errors.Is(err, ErrRefused):
		trouble = "refused"
		p.due = r.now().Add(r.cfg.RefusedRetry)
	case errors.Is(err, ErrUnavailable):
		trouble = "unavailable"
		p.due = time.Time{}
	default:
		p.due = time.Time{}
	}
	if p.trouble == trouble {
		return
	}
	p.trouble = trouble
	if r.otherPart(p).trouble == trouble {
		return // said already
	}
	switch trouble {
	case "refused":
		r.logger.Info("the secrets service does not take this Slack relay: no change request or rotation reminder is posted; asking again later",
			zap.Duration("retry_every", r.cfg.RefusedRetry), zap.Error(err))
	case "unavailable":
		r.logger.Warn("the secrets service is unreachable; the Slack relay asks again at each poll", zap.Error(err))
	default:
		r.logger.Warn("relaying "+p.name+" to Slack failed; asking again at each poll", zap.Error(err))
	}
}

// answered notes that the secrets service answered a poll, logging the end of a failure once both
// polls are past it.
func (r *Relay) answered(p *part) {
	p.due = time.Time{}
	if p.trouble == "" {
		return
	}
	ended := p.trouble
	p.trouble = ""
	if r.otherPart(p).trouble != ended {
		r.logger.Info("the secrets service answers the Slack relay again", zap.String("after", ended))
	}
}

func (r *Relay) otherPart(p *part) *part {
	if p == &r.notices {
		return &r.reminders
	}
	return &r.notices
}

// call makes one call to the secrets service within callTimeout.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return f(ctx)
}
