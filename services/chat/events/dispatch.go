package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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

// Run dispatches queued requests with cfg.Workers workers until ctx ends.
func (in *Inbound) Run(ctx context.Context) error {
	done := make(chan struct{}, in.cfg.Workers)
	for range in.cfg.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			in.work(ctx)
		}()
	}
	for range in.cfg.Workers {
		<-done
	}
	return nil
}

func (in *Inbound) work(ctx context.Context) {
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
			in.deliver(ctx, d)
		}
	}
}

// deliver dispatches one message and settles it: ack on success, a retry with backoff on failure,
// the dead letter after MaxAttempts failures.
func (in *Inbound) deliver(ctx context.Context, d queue.Delivery) {
	// The lease ends at the visibility timeout; stop the dispatch a little before, so the message is
	// settled by the dispatcher that holds it.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.VisibilityTimeout*9/10)
	defer cancel()
	var env envelope
	err := json.Unmarshal(d.Body, &env)
	kind := env.Kind
	if err != nil || kind == "" {
		kind, err = "unknown", errors.New("unreadable queue message")
	} else {
		err = in.dispatch(dctx, env)
	}
	if err == nil {
		in.count(kind, "dispatched")
		in.stats.Histogram("chat.inbound." + kind + ".receive_to_dispatch").Record(in.now().Sub(time.Unix(0, env.ReceivedAt)))
		if lag := in.sinceEvent(env.EventTime); lag >= 0 {
			in.stats.Histogram("chat.inbound." + kind + ".event_to_dispatch").Record(lag)
		}
		if err := in.queue.Ack(dctx, d.Receipt); err != nil {
			in.logger.Warn("ack failed; the request may be dispatched again", zap.String("kind", kind), zap.Error(err))
		}
		return
	}
	in.count(kind, "failed")
	if d.Attempts >= in.cfg.MaxAttempts {
		// Counted once the queue holds it there, so dead_lettered never runs ahead of the queue's
		// own dead letter count (TestInboundPoisonDeadLetter saw the counter at 1 and the queue at 0).
		if err := in.queue.DeadLetter(dctx, d.Receipt); err != nil {
			in.logger.Warn("dead-lettering failed; the lease will run out and the request come back", zap.String("kind", kind), zap.Error(err))
			return
		}
		in.count(kind, "dead_lettered")
		in.logger.Error("dispatch failed for the last time: moved to the dead letter", zap.String("kind", kind), zap.String("key", d.Key), zap.Int("attempts", d.Attempts), zap.Error(err))
		return
	}
	in.count(kind, "retried")
	delay := min(in.cfg.RetryBackoff<<(d.Attempts-1), time.Minute)
	in.logger.Warn("dispatch failed: will retry", zap.String("kind", kind), zap.String("key", d.Key), zap.Int("attempt", d.Attempts), zap.Duration("in", delay), zap.Error(err))
	if err := in.queue.Retry(dctx, d.Receipt, delay); err != nil {
		in.logger.Warn("retry failed; the lease will run out instead", zap.Error(err))
	}
}

func (in *Inbound) dispatch(ctx context.Context, env envelope) error {
	b, ok := in.bots[strings.ToUpper(env.AppID)]
	if !ok {
		in.logger.Info("dropped a request of a bot no longer configured", zap.String("app_id", env.AppID))
		return nil
	}
	var p map[string]any
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	switch env.Kind {
	case KindEvent:
		return in.dispatchEvent(ctx, b, p)
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
				return in.callHandler(ctx, b, h, payload, responseType(rt), p)
			}
		}
		return nil // the handler was removed from the configuration since
	}
	return fmt.Errorf("unknown kind %q", env.Kind)
}

func (in *Inbound) dispatchEvent(ctx context.Context, b *Bot, p map[string]any) error {
	ev, _ := p["event"].(map[string]any)
	eventID, _ := p["event_id"].(string)
	switch ev["type"] {
	case "message", "app_mention":
		return in.dispatchMessage(ctx, b, ev, eventID)
	case "reaction_added", "reaction_removed":
		return in.dispatchReaction(ctx, b, ev, eventID)
	}
	in.count(KindEvent, "ignored")
	return nil
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

func (in *Inbound) dispatchMessage(ctx context.Context, b *Bot, ev map[string]any, eventID string) error {
	ignore, isReply := ignoredMessage(ev)
	if ignore {
		in.count(KindEvent, "ignored")
		return nil
	}
	var p map[string]any
	commandMatched, called := false, false
	var errs []error
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
			if err := in.callHandler(ctx, b, h, p, "", ev); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if !called && in.help != nil {
		errs = append(errs, in.dispatchHelp(ctx, b, p, ev, eventID))
	} else if p == nil {
		in.count(KindEvent, "ignored")
	}
	return errors.Join(errs...)
}

// dispatchReaction calls reaction handlers for reactions to this bot's own messages (Omnibot PRs
// #112-#114).
func (in *Inbound) dispatchReaction(ctx context.Context, b *Bot, ev map[string]any, eventID string) error {
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
	if len(hs) == 0 || !in.fromBot(ctx, b, ch, ts) {
		in.count(KindEvent, "ignored")
		return nil
	}
	var errs []error
	for _, h := range hs {
		p := in.reactionPayload(ctx, b, ev, eventID, h.match)
		if err := in.callHandler(ctx, b, h, p, "", map[string]any{"channel": ch, "ts": ts}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fromBot reports whether the message at channel/ts was posted by this bot's app.
func (in *Inbound) fromBot(ctx context.Context, b *Bot, channel, ts string) bool {
	raw, err := in.slack.Call(ctx, b.Team, b.Name, "conversations.history", map[string]any{"channel": channel, "latest": ts, "limit": 1, "inclusive": true})
	if err != nil {
		return false
	}
	var hist struct {
		Messages []struct {
			BotID      string `json:"bot_id"`
			AppID      string `json:"app_id"`
			BotProfile struct {
				AppID string `json:"app_id"`
			} `json:"bot_profile"`
		} `json:"messages"`
	}
	if json.Unmarshal(raw, &hist) != nil || len(hist.Messages) == 0 {
		return false
	}
	m := hist.Messages[0]
	app := m.AppID
	if app == "" {
		app = m.BotProfile.AppID
	}
	return m.BotID != "" && strings.EqualFold(app, b.AppID)
}

// callHandler POSTs the payload to each of the handler's backends and carries out their answers.
// Only a backend that fails makes the dispatch fail (and be retried): the actions of an answer are
// carried out once, their Slack failures logged, since retrying would post twice.
func (in *Inbound) callHandler(ctx context.Context, b *Bot, h *handler, payload map[string]any, rt string, origin map[string]any) error {
	var errs []error
	for _, u := range h.urls {
		raw, err := in.post(ctx, u, payload)
		if err != nil {
			in.count("handler."+h.name, "failed")
			errs = append(errs, fmt.Errorf("handler %s: %w", h.name, err))
			continue
		}
		in.count("handler."+h.name, "dispatched")
		in.logger.Debug("handler called", zap.String("handler", h.name), zap.String("bot", b.Name))
		var r reply
		if len(bytes.TrimSpace(raw)) > 0 {
			if err := json.Unmarshal(raw, &r); err != nil {
				in.logger.Warn("backend answer is not a JSON object; nothing to carry out", zap.String("handler", h.name))
				continue
			}
		}
		in.perform(ctx, b, h, r, rt, origin)
	}
	return errors.Join(errs...)
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
		if _, err := in.post(ctx, responseURL, resp); err != nil {
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

// fillPostMessage gives chat.postMessage the origin's channel and, outside IMs, its thread, unless
// the backend chose them (Omnibot's _handle_post_message).
func fillPostMessage(kwargs, origin map[string]any, im bool) {
	if _, ok := kwargs["channel"]; !ok {
		if ch, ok := origin["channel"].(string); ok {
			kwargs["channel"] = ch
		} else if ch, ok := origin["channel"].(map[string]any); ok { // components: channel {id, name}
			kwargs["channel"] = ch["id"]
		}
	}
	if _, ok := kwargs["thread_ts"]; !ok && !im {
		ts, _ := origin["thread_ts"].(string)
		if ts == "" {
			ts, _ = origin["ts"].(string)
		}
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

// post sends a JSON body and returns the answer's body; a transport error or a non-2xx answer is an
// error.
func (in *Inbound) post(ctx context.Context, url string, body any) ([]byte, error) {
	if url == helpURL {
		return in.helpReply(body), nil
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, in.cfg.CallbackTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := in.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxCallbackReply))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("backend answered %d", resp.StatusCode)
	}
	return raw, nil
}
