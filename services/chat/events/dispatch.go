package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/services/chat/queue"
)

// maxCallbackReply bounds what is read of a backend's answer.
const maxCallbackReply = 1 << 20

// reply is a backend's answer (Omnibot's callback result).
type reply struct {
	Actions   []json.RawMessage `json:"actions"`
	Responses []map[string]any  `json:"responses"`
}

type action struct {
	Action string         `json:"action"`
	Kwargs map[string]any `json:"kwargs"`
}

// Run dispatches queued requests with cfg.Workers workers until ctx ends, then waits for the
// dispatches in flight: each finishes and is settled (a finished call acked, so it is not made again
// after a restart), or, still running cfg.ShutdownGrace after ctx ended, is abandoned: cancelled,
// logged, and released to be dispatched again at once. Run returns when no dispatch runs, so the
// queue may be closed after it.
func (in *Inbound) Run(ctx context.Context) error {
	// Dispatches outlive ctx by up to the grace: they run under abandon, which ends only then.
	abandon, abandonNow := context.WithCancel(context.WithoutCancel(ctx))
	defer abandonNow()
	var wg sync.WaitGroup
	var inFlight atomic.Int32
	for range in.cfg.Workers {
		wg.Go(func() { in.work(ctx, abandon, &inFlight) })
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
	}
	if n := inFlight.Load(); n > 0 {
		in.logger.Info("stopping: waiting for the dispatches in flight", zap.Int32("dispatches", n), zap.Duration("grace", in.cfg.ShutdownGrace))
	}
	grace := time.NewTimer(in.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-stopped:
		return nil
	case <-grace.C:
	}
	abandonNow()
	<-stopped
	return nil
}

// work receives and dispatches until ctx ends; a dispatch runs under abandon (see Run).
func (in *Inbound) work(ctx, abandon context.Context, inFlight *atomic.Int32) {
	for ctx.Err() == nil {
		ds, err := in.queue.Receive(ctx, 1, in.cfg.VisibilityTimeout, 5*time.Second)
		if err != nil {
			if errors.Is(err, queue.ErrClosed) {
				return
			}
			in.logger.Warn("receiving from the queue failed", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, d := range ds {
			inFlight.Add(1)
			in.deliver(abandon, d)
			inFlight.Add(-1)
		}
	}
}

// deliver dispatches one message and settles it: ack on success, a retry with backoff on failure,
// the dead letter after MaxAttempts failures.
//
// A message is one backend call, so attempts and dead letters are per handler: a request that
// matches several handlers (or a handler with several callbacks) is fanned out at its first
// dispatch into one message per call, each retried and dead-lettered on its own. A healthy handler
// is then called once and its reply posted once, whatever another handler answers.
func (in *Inbound) deliver(ctx context.Context, d queue.Delivery) {
	// A dispatch has the callback timeout and 9/10 of the visibility timeout besides (for the
	// lookups before the call and the actions after it), so a backend that answers just within the
	// callback timeout still has its reply carried out. Its lease is kept alive while it works
	// (keepLeased), so the dispatcher that holds the message settles it even when the dispatch began
	// late or a backend answered at its very end. Settling has a context of its own: a backend that
	// used up the dispatch's time but answered is acked, not called again.
	dctx, cancel := context.WithTimeout(ctx, in.cfg.CallbackTimeout+in.cfg.VisibilityTimeout*9/10)
	defer cancel()
	var env envelope
	err := json.Unmarshal(d.Body, &env)
	kind := env.Kind
	var c *callTask
	switch {
	case err != nil || kind == "":
		kind, err = "unknown", errors.New("unreadable queue message")
	case kind == kindCall:
		c = new(callTask)
		if err = json.Unmarshal(env.Payload, c); err != nil || c.Kind == "" {
			kind, err = "unknown", errors.New("unreadable queue message")
		} else {
			kind = c.Kind
		}
	}
	if err == nil && in.cfg.MaxAge > 0 && env.ReceivedAt > 0 {
		if age := in.now().Sub(time.Unix(0, env.ReceivedAt)); age > in.cfg.MaxAge {
			// Too late to answer: a reply minutes after the message confuses more than it helps. Kept
			// in the dead letter, where an operator can redrive it.
			in.count(kind, "expired")
			if err := in.settled(ctx, in.queue.DeadLetter, d.Receipt); err != nil {
				in.logger.Warn("dead-lettering an expired request failed", zap.String("kind", kind), zap.Error(err))
				return
			}
			in.count(kind, "dead_lettered")
			in.logger.Warn("request waited longer than -chat-inbound-max-age: moved to the dead letter undelivered",
				zap.String("kind", kind), zap.String("key", d.Key), zap.Duration("age", age))
			return
		}
	}
	// The lease is counted from the receive, and a loaded machine may start this dispatch late or
	// end it late (a backend's answer at the very end, its reply posted after): the lease is kept
	// alive while the dispatch works, and the heartbeat ends before the message is settled.
	stopHeartbeat := in.keepLeased(ctx, d, cancel)
	defer stopHeartbeat()
	if err == nil {
		if c != nil {
			err = in.runCall(dctx, d, env, c)
		} else {
			var calls []call
			if calls, err = in.dispatch(dctx, env); err == nil {
				err = in.run(dctx, d, env, calls)
			}
		}
	}
	stopHeartbeat()
	if err != nil && ctx.Err() != nil {
		// The service is stopping and its grace is over: release the request, so a replica (or
		// this one after its restart) dispatches it again at once rather than when the lease ends.
		in.count(kind, "abandoned")
		in.logger.Warn("stopping: a dispatch still running after -shutdown-timeout was abandoned; its request will be dispatched again",
			zap.String("kind", kind), zap.String("key", d.Key), zap.Error(err))
		if err := in.settled(ctx, func(ctx context.Context, r string) error { return in.queue.Retry(ctx, r, 0) }, d.Receipt); err != nil {
			in.logger.Warn("releasing an abandoned request failed; it comes back when its lease ends", zap.String("key", d.Key), zap.Error(err))
		}
		return
	}
	if err == nil {
		in.count(kind, "dispatched")
		in.stats.Histogram("chat.inbound." + kind + ".receive_to_dispatch").Record(in.now().Sub(time.Unix(0, env.ReceivedAt)))
		if lag := in.sinceEvent(env.EventTime); lag >= 0 {
			in.stats.Histogram("chat.inbound." + kind + ".event_to_dispatch").Record(lag)
		}
		if err := in.settled(ctx, in.queue.Ack, d.Receipt); err != nil {
			in.logger.Warn("ack failed; the request may be dispatched again", zap.String("kind", kind), zap.Error(err))
		}
		return
	}
	in.count(kind, "failed")
	if !retryable(err) {
		// The backend may have acted on the call (it timed out, or failed after the request reached
		// it): sending it again could act twice, so it is not, unless its handler opted in
		// (retry_on_timeout). Kept in the dead letter, where an operator can redrive it: the backend
		// then gets the same delivery id (X-Gantry-Delivery-Id) and can tell it has seen it.
		if err := in.settled(ctx, in.queue.DeadLetter, d.Receipt); err != nil {
			in.logger.Warn("dead-lettering failed; the lease will run out and the request come back", zap.String("kind", kind), zap.Error(err))
			return
		}
		in.count(kind, "dead_lettered")
		in.logger.Warn("handler call failed after the backend may have received it: not sent again, moved to the dead letter",
			zap.String("kind", kind), zap.String("key", d.Key), zap.Int("attempts", d.Attempts), zap.Error(err))
		return
	}
	if d.Attempts >= in.cfg.MaxAttempts {
		// Counted once the queue holds it there, so dead_lettered never runs ahead of the queue's
		// own dead letter count (TestInboundPoisonDeadLetter saw the counter at 1 and the queue at 0).
		if err := in.settled(ctx, in.queue.DeadLetter, d.Receipt); err != nil {
			in.logger.Warn("dead-lettering failed; the lease will run out and the request come back", zap.String("kind", kind), zap.Error(err))
			return
		}
		in.count(kind, "dead_lettered")
		in.logger.Error("dispatch failed for the last time: moved to the dead letter", zap.String("kind", kind), zap.String("key", d.Key), zap.Int("attempts", d.Attempts), zap.Error(err))
		return
	}
	in.count(kind, "retried")
	delay := min(max(in.cfg.RetryBackoff<<(d.Attempts-1), retryAfter(err)), time.Minute)
	in.logger.Warn("dispatch failed: will retry", zap.String("kind", kind), zap.String("key", d.Key), zap.Int("attempt", d.Attempts), zap.Duration("in", delay), zap.Error(err))
	if err := in.settled(ctx, func(ctx context.Context, r string) error { return in.queue.Retry(ctx, r, delay) }, d.Receipt); err != nil {
		in.logger.Warn("retry failed; the lease will run out instead", zap.Error(err))
	}
}

// keepLeased extends d's lease by the visibility timeout every third of it until the returned stop
// is called; stop returns once no extension is in flight, so none lands after a settling call (an
// extension after a Retry would undo its backoff). A lease that could not be extended has ended:
// the message may be with another dispatcher by now, so the dispatch is cancelled.
func (in *Inbound) keepLeased(ctx context.Context, d queue.Delivery, cancelDispatch context.CancelFunc) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(in.cfg.VisibilityTimeout / 3)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			err := in.settled(ctx, func(ctx context.Context, r string) error {
				return in.queue.Extend(ctx, r, in.cfg.VisibilityTimeout)
			}, d.Receipt)
			switch {
			case errors.Is(err, queue.ErrStaleReceipt):
				in.logger.Warn("the lease ran out during the dispatch; stopping it, the request may be dispatched again", zap.String("key", d.Key))
				cancelDispatch()
				return
			case err != nil:
				// A passing fault (the next tick tries again; the lease still has two thirds left).
				in.logger.Warn("extending the lease failed", zap.String("key", d.Key), zap.Error(err))
			}
		}
	}()
	return func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-done
	}
}

// settled runs one settling call (ack, retry, dead letter) within the last tenth of the lease,
// counted from now: not the dispatch's context, which a slow backend may have used up.
func (in *Inbound) settled(ctx context.Context, op func(context.Context, string) error, receipt string) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.VisibilityTimeout/10)
	defer cancel()
	return op(sctx, receipt)
}

// kindCall is a queue message holding one backend call of a request that matched several.
const kindCall = "call"

// call is one backend call a request asks for: a handler's callback URL, the payload it is sent,
// and what its answer's actions and responses need.
type call struct {
	h       *handler
	index   int // of h in handlersOf(bot)
	url     int // index in h.urls
	payload map[string]any
	rt      string
	origin  map[string]any
	// delivery is the call's DeliveryIDHeader.
	delivery string
}

// callTask is a call as a queue message holds it (envelope kind "call").
type callTask struct {
	Kind         string         `json:"kind"` // of the request: event, slash_command, interactive_component
	Handler      string         `json:"handler"`
	Index        int            `json:"index"`
	URL          int            `json:"url"`
	ResponseType string         `json:"response_type,omitempty"`
	Payload      map[string]any `json:"payload"`
	Origin       map[string]any `json:"origin"`
}

// plan collects the calls of one request.
type plan []call

func (p *plan) add(in *Inbound, b *Bot, h *handler, payload map[string]any, rt string, origin map[string]any) {
	index := slices.Index(in.handlersOf(b), h)
	for i := range h.urls {
		// A copy: the dispatcher goes on setting match fields for the next handler.
		*p = append(*p, call{h: h, index: index, url: i, payload: maps.Clone(payload), rt: rt, origin: origin})
	}
}

// run carries out the calls of a request: a single one at once; several are fanned out into one
// queue message each, keyed by the request's key, handler and callback, so a retry of the fan-out
// (an enqueue failed) stores none twice.
func (in *Inbound) run(ctx context.Context, d queue.Delivery, env envelope, calls []call) error {
	b := in.bots[strings.ToUpper(env.AppID)]
	switch len(calls) {
	case 0:
		return nil
	case 1:
		c := calls[0]
		c.delivery = deliveryID(d.Key, c.index, c.url)
		return in.execute(ctx, b, c)
	}
	// The enqueues are settling too: bounded like settled's calls, counted from now.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.VisibilityTimeout/10)
	defer cancel()
	for _, c := range calls {
		task := callTask{Kind: env.Kind, Handler: c.h.name, Index: c.index, URL: c.url, ResponseType: c.rt, Payload: c.payload, Origin: c.origin}
		raw, err := json.Marshal(task)
		if err != nil {
			return fmt.Errorf("handler %s: payload: %w", c.h.name, err)
		}
		child := env
		child.Kind, child.Handler, child.Payload = kindCall, c.h.name, raw
		key := deliveryID(d.Key, c.index, c.url)
		if _, err := in.queue.Enqueue(sctx, key, jsonBody(child)); err != nil {
			return fmt.Errorf("fanning out to handler %s: %w", c.h.name, err)
		}
	}
	in.count(env.Kind, "fanned_out")
	return nil
}

// runCall carries out one fanned-out call; its queue key is its delivery id.
func (in *Inbound) runCall(ctx context.Context, d queue.Delivery, env envelope, t *callTask) error {
	b, ok := in.bots[strings.ToUpper(env.AppID)]
	if !ok {
		in.logger.Info("dropped a request of a bot no longer configured", zap.String("app_id", env.AppID))
		return nil
	}
	if t.Index == -1 && in.help != nil && t.Handler == in.help.name && t.URL >= 0 && t.URL < len(in.help.urls) {
		return in.execute(ctx, b, call{h: in.help, index: -1, url: t.URL, payload: t.Payload, rt: t.ResponseType, origin: t.Origin, delivery: d.Key})
	}
	hs := in.handlersOf(b)
	if t.Index < 0 || t.Index >= len(hs) || hs[t.Index].name != t.Handler || t.URL < 0 || t.URL >= len(hs[t.Index].urls) {
		in.logger.Info("dropped a call of a handler removed from the configuration since", zap.String("handler", t.Handler))
		return nil
	}
	return in.execute(ctx, b, call{h: hs[t.Index], index: t.Index, url: t.URL, payload: t.Payload, rt: t.ResponseType, origin: t.Origin, delivery: d.Key})
}

func (in *Inbound) dispatch(ctx context.Context, env envelope) ([]call, error) {
	b, ok := in.bots[strings.ToUpper(env.AppID)]
	if !ok {
		in.logger.Info("dropped a request of a bot no longer configured", zap.String("app_id", env.AppID))
		return nil, nil
	}
	var p map[string]any
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	var calls plan
	switch env.Kind {
	case KindEvent:
		in.dispatchEvent(ctx, b, p, &calls)
		return calls, nil
	case KindSlash, KindInteractive:
		for _, h := range in.handlersOf(b) {
			if h.name == env.Handler {
				rt := ""
				if h.slash != nil {
					rt = h.slash.ResponseType
				} else {
					rt = h.component.ResponseType
				}
				payload := in.componentPayload(ctx, b, p)
				calls.add(in, b, h, payload, responseType(rt), p)
				return calls, nil
			}
		}
		return nil, nil // the handler was removed from the configuration since
	}
	return nil, fmt.Errorf("unknown kind %q", env.Kind)
}

func (in *Inbound) dispatchEvent(ctx context.Context, b *Bot, p map[string]any, calls *plan) {
	ev, _ := p["event"].(map[string]any)
	eventID, _ := p["event_id"].(string)
	switch ev["type"] {
	case "message", "app_mention":
		in.dispatchMessage(ctx, b, ev, eventID, calls)
		return
	case "reaction_added", "reaction_removed":
		in.dispatchReaction(ctx, b, ev, eventID, calls)
		return
	}
	in.count(KindEvent, "ignored")
}

// ignoredMessage applies Omnibot's rules: bot messages, Slackbot and message subtypes are not
// handled; thread replies only by handlers with match_reply.
func ignoredMessage(ev map[string]any) (ignore, reply bool) {
	if s, _ := ev["bot_id"].(string); s != "" {
		return true, false
	}
	if ev["user"] == "USLACKBOT" {
		return true, false
	}
	if s, _ := ev["subtype"].(string); s != "" {
		return true, false
	}
	ts, _ := ev["thread_ts"].(string)
	return false, ts != "" && ts != ev["ts"]
}

func (in *Inbound) dispatchMessage(ctx context.Context, b *Bot, ev map[string]any, eventID string, calls *plan) {
	ignore, isReply := ignoredMessage(ev)
	if ignore {
		in.count(KindEvent, "ignored")
		return
	}
	var p map[string]any
	commandMatched, called := false, false
	for _, h := range in.handlersOf(b) {
		if h.kind != "command" && h.kind != "regex" {
			continue
		}
		if isReply && !h.reply {
			continue
		}
		if p == nil {
			p = in.messagePayload(ctx, b, ev, eventID)
		}
		call := false
		switch h.kind {
		case "command":
			directed, _ := p["directed"].(bool)
			mentioned, _ := p["mentioned"].(bool)
			cmd, _ := p["command_text"].(string)
			if commandMatched || !(directed || (h.mention && mentioned)) || !strings.HasPrefix(cmd, h.match) {
				continue
			}
			commandMatched, call = true, true
			p["match_type"], p["command"], p["args"] = "command", h.match, strings.TrimSpace(cmd[len(h.match):])
		case "regex":
			text, _ := p["parsed_text"].(string)
			if h.re.MatchString(text) != h.absence {
				call = true
				p["match_type"], p["regex"] = "regex", h.match
			}
		}
		if call {
			called = true
			calls.add(in, b, h, p, "", ev)
		}
	}
	if !called && in.help != nil {
		in.dispatchHelp(ctx, b, p, ev, eventID, calls)
	} else if p == nil {
		in.count(KindEvent, "ignored")
	}
}

// dispatchReaction calls reaction handlers for reactions to this bot's own messages (Omnibot PRs
// #112-#114). As Omnibot does, the event's item_user says whose message it is, compared with the
// bot's user (auth.test); only when Slack leaves it out is the message read (conversations.history,
// with the bot's token). A reaction whose message cannot be told the bot's is dropped with a
// warning that says why.
func (in *Inbound) dispatchReaction(ctx context.Context, b *Bot, ev map[string]any, eventID string, calls *plan) {
	item, _ := ev["item"].(map[string]any)
	ch, _ := item["channel"].(string)
	ts, _ := item["ts"].(string)
	reaction, _ := ev["reaction"].(string)
	var hs []*handler
	for _, h := range in.handlersOf(b) {
		if h.kind == "reaction" && h.re.MatchString(reaction) != h.absence {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		in.count(KindEvent, "ignored")
		return
	}
	mine, why := in.reactedToBot(ctx, b, ev, ch, ts)
	if why != "" {
		in.count(KindEvent, "reaction_dropped")
		in.logger.Warn("reaction dropped: cannot tell whether the reacted message is the bot's",
			zap.String("bot", b.Name), zap.String("event_id", eventID), zap.String("channel", ch), zap.String("reason", why))
		return
	}
	if !mine {
		in.count(KindEvent, "ignored")
		return
	}
	for _, h := range hs {
		p := in.reactionPayload(ctx, b, ev, eventID, h.match)
		calls.add(in, b, h, p, "", map[string]any{"channel": ch, "ts": ts})
	}
}

// reactedToBot reports whether a reaction is on this bot's message, or, when that cannot be told,
// why not.
func (in *Inbound) reactedToBot(ctx context.Context, b *Bot, ev map[string]any, channel, ts string) (bool, string) {
	if itemUser, ok := ev["item_user"].(string); ok && itemUser != "" {
		botUser, why := in.botUserOrWhy(ctx, b)
		if why != "" {
			return false, why
		}
		return itemUser == botUser, ""
	}
	return in.fromBot(ctx, b, channel, ts)
}

// botUserOrWhy is the bot's user id, or why it is not known.
func (in *Inbound) botUserOrWhy(ctx context.Context, b *Bot) (string, string) {
	if id := in.botUserID(ctx, b); id != "" {
		return id, ""
	}
	return "", "auth.test did not give the bot's user id"
}

// fromBot reports whether the message at channel/ts was posted by this bot's app, asking Slack
// with the bot's token, or why it cannot tell (Slack's error: missing_scope when the bot may not
// read the channel's history, not_in_channel, ...).
func (in *Inbound) fromBot(ctx context.Context, b *Bot, channel, ts string) (bool, string) {
	raw, err := in.slack.Lookup(ctx, b.Team, b.Name, "conversations.history", map[string]any{"channel": channel, "latest": ts, "limit": 1, "inclusive": true})
	if err != nil {
		return false, "conversations.history failed: " + err.Error()
	}
	var hist struct {
		OK       bool   `json:"ok"`
		Error    string `json:"error"`
		Needed   string `json:"needed"`
		Messages []struct {
			BotID      string `json:"bot_id"`
			AppID      string `json:"app_id"`
			BotProfile struct {
				AppID string `json:"app_id"`
			} `json:"bot_profile"`
		} `json:"messages"`
	}
	switch {
	case json.Unmarshal(raw, &hist) != nil:
		return false, "conversations.history: Slack's answer is not JSON"
	case !hist.OK && hist.Needed != "":
		return false, fmt.Sprintf("conversations.history: %s (the bot's token needs %s; the event carried no item_user)", hist.Error, hist.Needed)
	case !hist.OK:
		return false, "conversations.history: " + hist.Error + " (the event carried no item_user)"
	case len(hist.Messages) == 0:
		return false, "conversations.history: the reacted message was not found"
	}
	m := hist.Messages[0]
	app := m.AppID
	if app == "" {
		app = m.BotProfile.AppID
	}
	return m.BotID != "" && strings.EqualFold(app, b.AppID), ""
}

// execute POSTs a call's payload to its backend and carries out the answer. Only a backend that
// fails makes the call fail (and be retried): the actions of an answer are carried out once, their
// Slack failures logged, since retrying would post twice.
func (in *Inbound) execute(ctx context.Context, b *Bot, c call) error {
	h := c.h
	raw, err := in.post(ctx, h.urls[c.url], c.payload, c.delivery)
	if ce := (*callError)(nil); errors.As(err, &ce) {
		ce.retryOnTimeout = h.retryOnTimeout
	}
	if err != nil {
		in.count("handler."+h.name, "failed")
		return fmt.Errorf("handler %s: %w", h.name, err)
	}
	in.count("handler."+h.name, "dispatched")
	in.logger.Debug("handler called", zap.String("handler", h.name), zap.String("bot", b.Name))
	var r reply
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &r); err != nil {
			in.logger.Warn("backend answer is not a JSON object; nothing to carry out", zap.String("handler", h.name))
			return nil
		}
	}
	in.perform(ctx, b, h, r, c.rt, c.origin)
	return nil
}

func (in *Inbound) perform(ctx context.Context, b *Bot, h *handler, r reply, rt string, origin map[string]any) {
	responseURL, _ := origin["response_url"].(string)
	for _, resp := range r.Responses {
		if _, ok := resp["response_type"]; !ok && rt != "" {
			resp["response_type"] = rt
		}
		if !in.allowedResponseURL(responseURL) {
			in.count("handler."+h.name, "response_refused")
			in.logger.Warn("response_url is not an allowed URL: response dropped", zap.String("handler", h.name))
			continue
		}
		if _, err := in.post(ctx, responseURL, resp, ""); err != nil {
			in.count("handler."+h.name, "response_failed")
			in.logger.Warn("posting to response_url failed", zap.String("handler", h.name), zap.Error(err))
		}
	}
	for _, rawAct := range r.Actions {
		var a action
		if json.Unmarshal(rawAct, &a) != nil || a.Action == "" {
			in.logger.Warn("action in a backend answer is not an object with action and kwargs", zap.String("handler", h.name))
			continue
		}
		if a.Kwargs == nil {
			a.Kwargs = map[string]any{}
		}
		if a.Action == "chat.postMessage" {
			fillPostMessage(a.Kwargs, origin, in.isIM(origin))
		}
		raw, err := in.slack.Call(ctx, b.Team, b.Name, a.Action, a.Kwargs)
		var ans struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &ans)
		switch {
		case err != nil:
			in.count("handler."+h.name, "action_failed")
			in.logger.Warn("action failed", zap.String("handler", h.name), zap.String("action", a.Action), zap.Error(err))
		case !ans.OK:
			in.count("handler."+h.name, "action_failed")
			in.logger.Warn("Slack refused an action", zap.String("handler", h.name), zap.String("action", a.Action), zap.String("slack_error", ans.Error))
		default:
			in.count("handler."+h.name, "action_ok")
		}
	}
}

func (in *Inbound) isIM(origin map[string]any) bool {
	if ch, ok := origin["channel_type"].(string); ok {
		return ch == "im"
	}
	return false
}

// fillPostMessage gives chat.postMessage the origin's channel and, outside IMs, the origin's own ts
// as thread_ts, unless the backend chose them (Omnibot's _handle_post_message: thread_ts =
// message.ts). A reply to a thread reply is given the reply's ts, as Omnibot gave it; Slack posts
// it in the same thread. (A reaction's origin is the reacted message.)
func fillPostMessage(kwargs, origin map[string]any, im bool) {
	if _, ok := kwargs["channel"]; !ok {
		if ch, ok := origin["channel"].(string); ok {
			kwargs["channel"] = ch
		} else if ch, ok := origin["channel"].(map[string]any); ok { // components: channel {id, name}
			kwargs["channel"] = ch["id"]
		}
	}
	if _, ok := kwargs["thread_ts"]; !ok && !im {
		ts, _ := origin["ts"].(string)
		if ts != "" {
			kwargs["thread_ts"] = ts
		}
	}
}

func (in *Inbound) allowedResponseURL(u string) bool {
	if u == "" {
		return false
	}
	for _, p := range in.prefixes {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}
