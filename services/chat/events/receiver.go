package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/slacksig"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

// Kinds of Slack request, as the queue and the stats name them (Omnibot's SQS message types).
const (
	KindEvent       = "event"
	KindSlash       = "slash_command"
	KindInteractive = "interactive_component"
)

// Request is Slack's HTTP request as it arrived.
type Request struct {
	Kind                 string
	Body                 []byte
	Signature, Timestamp string
	RetryNum             int
	RetryReason          string
}

// Response is the answer Slack gets: a 200 with an optional JSON body.
type Response struct {
	Body []byte // nil: empty 200
}

// envelope is what the queue holds.
type envelope struct {
	Kind       string          `json:"kind"`
	AppID      string          `json:"app_id"`
	ReceivedAt int64           `json:"received_at"` // Unix nanoseconds
	EventTime  int64           `json:"event_time"`  // Unix seconds of Slack's event, 0 if unknown
	Handler    string          `json:"handler,omitempty"`
	Payload    json.RawMessage `json:"payload"`
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Receive verifies and answers one Slack request, storing what the dispatcher must handle.
func (in *Inbound) Receive(ctx context.Context, r Request) (Response, error) {
	kind := r.Kind
	in.count(kind, "received")
	if r.RetryNum > 0 {
		in.count(kind, "slack_retries")
	}
	payload, appID, err := decode(kind, r.Body)
	if err != nil {
		in.count(kind, "rejected")
		return Response{}, err
	}
	if kind == KindSlash && payload["ssl_check"] == "1" && payload["command"] == nil {
		// Slack checks a slash command URL's certificate with a POST that names no app and carries
		// no command: it wants a 200, and nothing is done with it.
		return Response{}, nil
	}
	b, err := in.authenticate(appID, payload, r)
	if err != nil {
		in.count(kind, "rejected")
		// The app id is the request's own (unverified) value: cut, and the refusals sampled, so a
		// flood of forged requests cannot flood the log.
		in.refusals.Info(refusalKind(err), "refused a Slack request", zap.String("kind", kind), logging.Untrusted("app_id", appID), zap.Error(err))
		return Response{}, err
	}
	in.count(kind, "verified")
	switch kind {
	case KindEvent:
		return in.receiveEvent(ctx, b, payload, r)
	case KindSlash:
		return in.receiveSlash(ctx, b, payload)
	default:
		return in.receiveInteractive(ctx, b, payload)
	}
}

// refusalKind names a refusal for the sampled log: the fixed set the sampler counts by.
func refusalKind(err error) string {
	var e *Error
	if errors.As(err, &e) {
		switch e.Message {
		case slacksig.ErrMissing.Error():
			return "missing_signature"
		case slacksig.ErrTimestamp.Error():
			return "bad_timestamp"
		case slacksig.ErrStale.Error():
			return "stale_timestamp"
		}
	}
	return "bad_signature"
}

// decode reads the body of a kind and the app id it names. Slash commands become a JSON object of
// their form fields, so every payload is JSON from here on.
func decode(kind string, body []byte) (map[string]any, string, error) {
	var payload map[string]any
	switch kind {
	case KindEvent:
		if err := json.Unmarshal(body, &payload); err != nil {
			return nil, "", errf(ErrBadRequest, "body is not a JSON object")
		}
	case KindSlash, KindInteractive:
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, "", errf(ErrBadRequest, "body is not a form")
		}
		if kind == KindInteractive {
			if err := json.Unmarshal([]byte(form.Get("payload")), &payload); err != nil {
				return nil, "", errf(ErrBadRequest, "payload is not a JSON object")
			}
		} else {
			payload = map[string]any{}
			for k := range form {
				payload[k] = form.Get(k)
			}
		}
	default:
		return nil, "", errf(ErrBadRequest, "unknown receiver")
	}
	if payload == nil {
		return nil, "", errf(ErrBadRequest, "body is not a JSON object")
	}
	appID, _ := payload["api_app_id"].(string)
	return payload, appID, nil
}

// authenticate finds the app of the request and checks its signature; an app without a signing
// secret may use its legacy verification token where -chat-inbound-allow-verification-token says so.
func (in *Inbound) authenticate(appID string, payload map[string]any, r Request) (*Bot, error) {
	if appID == "" {
		b, err := in.authenticateUnnamed(r, payload)
		if err != nil {
			return nil, err
		}
		return b, checkTeam(b, payload)
	}
	b, ok := in.bots[strings.ToUpper(appID)]
	if !ok || appID == "" {
		// Nothing to check the signature with: refused like a bad signature, so a prober learns
		// nothing about which apps are configured.
		return nil, errf(ErrUnauthenticated, "invalid signature")
	}
	if b.SigningSecret != "" {
		if err := verifySignature(b.SigningSecret, r.Body, r.Timestamp, r.Signature, in.now(), in.cfg.MaxSkew); err != nil {
			return nil, err
		}
	} else {
		tok, _ := payload["token"].(string)
		if !in.cfg.AllowVerificationToken || !tokenEqual(b.VerificationToken, tok) {
			return nil, errf(ErrUnauthenticated, "invalid signature")
		}
	}
	return b, checkTeam(b, payload)
}

// checkTeam refuses a request whose payload names another team than its app's.
func checkTeam(b *Bot, payload map[string]any) error {
	if team := teamOf(payload); team != "" && team != b.TeamID {
		return errf(ErrUnauthenticated, "request is for another team than its app's")
	}
	return nil
}

// authenticateUnnamed finds the app of a request that names none (no api_app_id). Slack sends
// such requests: its url_verification, sent when a request URL is entered in the app's settings,
// carries only a token and the challenge; legacy interactive payloads (interactive_message,
// dialog_submission, message_action) and older slash commands carry no app id either, and Omnibot
// found their app by the verification token. Gantry finds it by the signing secret that verifies
// the request, trying every app that has one (in a fixed order, each in constant time). An unsigned
// request, where -chat-inbound-allow-verification-token allows it, is the app's without a signing
// secret whose legacy verification token it carries (Omnibot's get_bot_by_verification_token) —
// except url_verification: its token is not tried, as anyone could replay a token seen once to
// take over a request URL. No app verifies it: refused like a bad signature.
func (in *Inbound) authenticateUnnamed(r Request, payload map[string]any) (*Bot, error) {
	ids := make([]string, 0, len(in.bots))
	for id := range in.bots {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	refused := errf(ErrUnauthenticated, "invalid signature")
	if r.Signature == "" && r.Timestamp == "" {
		tok, _ := payload["token"].(string)
		if !in.cfg.AllowVerificationToken || tok == "" || (r.Kind == KindEvent && payload["type"] == "url_verification") {
			return nil, refused
		}
		var found *Bot
		for _, id := range ids {
			// Every app's token is compared, so the time taken does not tell which one matched.
			if b := in.bots[id]; b.SigningSecret == "" && tokenEqual(b.VerificationToken, tok) && found == nil {
				found = b
			}
		}
		if found == nil {
			return nil, refused
		}
		return found, nil
	}
	first := true
	for _, id := range ids {
		b := in.bots[id]
		if b.SigningSecret == "" {
			continue
		}
		err := verifySignature(b.SigningSecret, r.Body, r.Timestamp, r.Signature, in.now(), in.cfg.MaxSkew)
		if err == nil {
			return b, nil
		}
		if first {
			refused = err // a missing signature or a stale timestamp is the same for every app
			first = false
		}
	}
	return nil, refused
}

// teamOf is the team id of a payload: team_id (events, slash commands), or for interactive
// components Omnibot's _get_team_id (omnibot/routes/api.py): on an enterprise install
// (is_enterprise_install) original_message.team, else user.team_id, where the user's own workspace
// may differ from the app's; otherwise team.id, else original_message.team. Then, where those name
// none, team.team_id, user.team_id or view.team_id (enterprise grid, Omnibot PR #111).
func teamOf(p map[string]any) string {
	if s, ok := p["team_id"].(string); ok && s != "" {
		return s
	}
	field := func(k, f string) string {
		m, _ := p[k].(map[string]any)
		s, _ := m[f].(string)
		return s
	}
	var order []string
	if enterprise, _ := p["is_enterprise_install"].(bool); enterprise {
		order = []string{field("original_message", "team"), field("user", "team_id"), field("team", "id")}
	} else {
		order = []string{field("team", "id"), field("original_message", "team")}
	}
	order = append(order, field("team", "team_id"), field("user", "team_id"), field("view", "team_id"))
	for _, s := range order {
		if s != "" {
			return s
		}
	}
	return ""
}

func (in *Inbound) enqueue(ctx context.Context, kind, key string, b *Bot, payload map[string]any, eventTime int64, handler string) error {
	raw, err := json.Marshal(withoutSecrets(payload))
	if err != nil {
		return errf(ErrBadRequest, "payload cannot be stored")
	}
	env := envelope{Kind: kind, AppID: b.AppID, ReceivedAt: in.now().UnixNano(), EventTime: eventTime, Handler: handler, Payload: raw}
	if err := in.checkRoom(ctx, kind); err != nil {
		return err
	}
	stored, err := in.queue.Enqueue(ctx, key, jsonBody(env))
	if errors.Is(err, queue.ErrTooLarge) {
		in.count(kind, "too_large")
		in.logger.Error("a Slack request is too large for the queue", zap.String("kind", kind), zap.Error(err))
		return errf(ErrBadRequest, "the request cannot be queued: %v", err)
	}
	if err != nil {
		in.logger.Error("could not queue a Slack request", zap.String("kind", kind), zap.Error(err))
		return errf(ErrUnavailable, "could not queue the request")
	}
	if stored {
		in.count(kind, "queued")
	} else {
		in.count(kind, "duplicate")
	}
	return nil
}

func bodyKey(prefix string, body []byte) string {
	sum := sha256.Sum256(body)
	return prefix + hex.EncodeToString(sum[:16])
}

func (in *Inbound) receiveEvent(ctx context.Context, b *Bot, p map[string]any, r Request) (Response, error) {
	switch p["type"] {
	case "url_verification":
		ch, _ := p["challenge"].(string)
		return Response{Body: jsonBody(map[string]string{"challenge": ch})}, nil
	case "event_callback":
	default:
		return Response{Body: jsonBody(map[string]string{"status": "ignored", "warning": "Unsupported event type"})}, nil
	}
	if _, ok := p["event"].(map[string]any); !ok {
		return Response{}, errf(ErrBadRequest, "event_callback without an event")
	}
	key, _ := p["event_id"].(string)
	if key == "" {
		key = bodyKey("body:", r.Body)
	}
	var eventTime int64
	if t, ok := p["event_time"].(float64); ok {
		eventTime = int64(t)
	}
	if err := in.enqueue(ctx, KindEvent, "event:"+key, b, p, eventTime, ""); err != nil {
		return Response{}, err
	}
	return Response{Body: jsonBody(map[string]string{"status": "success"})}, nil
}

func (in *Inbound) findHandler(b *Bot, kind, match string) *handler {
	for _, h := range in.handlersOf(b) {
		if h.kind == kind && h.match == match {
			return h
		}
	}
	return nil
}

func responseType(rt string) string {
	if rt == "" {
		return "ephemeral"
	}
	return rt
}

func (in *Inbound) receiveSlash(ctx context.Context, b *Bot, p map[string]any) (Response, error) {
	cmd, _ := p["command"].(string)
	h := in.findHandler(b, "slash", strings.TrimPrefix(cmd, "/"))
	if h == nil {
		return Response{Body: jsonBody(map[string]string{"response_type": "ephemeral", "text": "This slash command does not have any omnibot handler associated with it."})}, nil
	}
	p["omnibot_bot_id"] = b.AppID
	if h.slash.Dialog != nil {
		in.openDialog(ctx, b, p, h.slash.Dialog)
	}
	if len(h.urls) > 0 {
		trigger, _ := p["trigger_id"].(string)
		key := "slash:" + trigger
		if trigger == "" {
			key = bodyKey("slash:", jsonBody(p))
		}
		if err := in.enqueue(ctx, KindSlash, key, b, p, in.now().Unix(), h.name); err != nil {
			return Response{}, err
		}
	}
	rt := responseType(h.slash.ResponseType)
	switch {
	case h.slash.CannedResponse != "":
		return Response{Body: jsonBody(map[string]string{"text": h.slash.CannedResponse, "response_type": rt})}, nil
	case rt == "in_channel":
		return Response{Body: jsonBody(map[string]string{"response_type": "in_channel"})}, nil
	}
	return Response{}, nil
}

func (in *Inbound) openDialog(ctx context.Context, b *Bot, p map[string]any, dialog map[string]any) {
	trigger, _ := p["trigger_id"].(string)
	ctx, cancel := context.WithTimeout(ctx, in.cfg.SyncTimeout)
	defer cancel()
	if _, err := in.slack.Call(ctx, b.Team, b.Name, "dialog.open", map[string]any{"trigger_id": trigger, "dialog": dialog}); err != nil {
		in.logger.Warn("dialog.open failed", zap.String("bot", b.Name), zap.Error(err))
	}
}

// interactiveTypes are the component types Omnibot accepts.
var interactiveTypes = map[string]bool{
	"interactive_message": true, "message_action": true, "dialog_submission": true, "block_actions": true, "view_submission": true,
}

// callbackID is the handler key of a component (Omnibot's get_callback_id).
func callbackID(p map[string]any) string {
	switch p["type"] {
	case "block_actions":
		if acts, ok := p["actions"].([]any); ok && len(acts) > 0 {
			if a, ok := acts[0].(map[string]any); ok {
				s, _ := a["block_id"].(string)
				return s
			}
		}
	case "view_submission":
		if v, ok := p["view"].(map[string]any); ok {
			s, _ := v["callback_id"].(string)
			return s
		}
	}
	s, _ := p["callback_id"].(string)
	return s
}

func (in *Inbound) receiveInteractive(ctx context.Context, b *Bot, p map[string]any) (Response, error) {
	typ, _ := p["type"].(string)
	if !interactiveTypes[typ] {
		return Response{}, errf(ErrBadRequest, "Unsupported type=%s", logging.Truncate(typ))
	}
	if in.isApprovalPress(p) {
		return in.receiveApprovalPress(ctx, b, p)
	}
	h := in.findHandler(b, "interactive", callbackID(p))
	if h == nil {
		return Response{Body: jsonBody(map[string]string{"response_type": "ephemeral", "text": "This interactive component does not have any omnibot handler associated with it."})}, nil
	}
	p["omnibot_bot_id"] = b.AppID
	c := h.component
	key := interactiveKey(p)
	if h.sync >= 0 {
		// A synchronous component is answered, not queued, so Enqueue's deduplication never sees it:
		// its key is claimed in the queue's deduplication store instead (the same window, kept across
		// a restart), so a signed request replayed within the replay window (or resent by Slack)
		// reaches the backend once. The replay gets the empty 200 Slack takes as "nothing to change".
		if first, err := in.firstTime(ctx, p); err != nil || !first {
			return Response{}, err
		}
		if c.Dialog != nil {
			in.openDialog(ctx, b, p, c.Dialog)
		}
		return in.synchronous(ctx, b, h, p, deliveryID(key, slices.Index(in.handlersOf(b), h), h.sync))
	}
	if c.Dialog != nil {
		in.openDialog(ctx, b, p, c.Dialog)
	}
	if len(h.urls) > 0 {
		if err := in.enqueue(ctx, KindInteractive, key, b, p, in.now().Unix(), h.name); err != nil {
			return Response{}, err
		}
	}
	rt := responseType(c.ResponseType)
	switch {
	case typ == "dialog_submission" || c.NoMessageResponse:
		return Response{}, nil
	case c.CannedResponse != "":
		return Response{Body: jsonBody(map[string]string{"text": c.CannedResponse, "response_type": rt})}, nil
	case rt == "in_channel":
		return Response{Body: jsonBody(map[string]string{"response_type": "in_channel"})}, nil
	}
	return Response{}, nil
}

// firstTime claims an interactive component's deduplication key (interactiveKey) in the queue's
// store, kept across a restart: false for a press Slack resent or someone replayed within the window,
// which is counted and must change nothing.
func (in *Inbound) firstTime(ctx context.Context, p map[string]any) (bool, error) {
	first, err := in.queue.Remember(ctx, interactiveKey(p))
	if err != nil {
		in.logger.Error("could not record a Slack request for deduplication", zap.String("kind", KindInteractive), zap.Error(err))
		return false, errf(ErrUnavailable, "could not record the request")
	}
	if !first {
		in.count(KindInteractive, "duplicate")
	}
	return first, nil
}

// interactiveKey is the deduplication key of a component: its trigger id, unique per user action and
// the same in a replay, or else the hash of the payload (as for slash commands).
func interactiveKey(p map[string]any) string {
	if trigger, _ := p["trigger_id"].(string); trigger != "" {
		return "interactive:" + trigger
	}
	return bodyKey("interactive:", jsonBody(p))
}

// synchronous calls the handler's synchronous callback within SyncTimeout and answers Slack with
// its reply (Omnibot PR #55); a backend that fails or is late gets Slack an empty 200 and is logged.
// As in Omnibot, the handler's other callbacks are not called and the component is not queued.
func (in *Inbound) synchronous(ctx context.Context, b *Bot, h *handler, p map[string]any, delivery string) (Response, error) {
	ctx, cancel := context.WithTimeout(ctx, in.cfg.SyncTimeout)
	defer cancel()
	payload := in.componentPayload(ctx, b, p)
	start := in.now()
	raw, err := in.post(ctx, h.urls[h.sync], payload, delivery)
	in.stats.Histogram("chat.inbound." + KindInteractive + ".sync_callback_time").Record(in.now().Sub(start))
	if err != nil {
		in.count("handler."+h.name, "failed")
		in.logger.Warn("synchronous interactive callback failed", zap.String("handler", h.name), zap.Error(err))
		return Response{}, nil
	}
	in.count("handler."+h.name, "dispatched")
	in.count(KindInteractive, "dispatched")
	if len(raw) == 0 {
		return Response{}, nil
	}
	return Response{Body: raw}, nil
}

// eventTimeNow is the clock as Unix seconds (slash commands and components carry no event time).
func (in *Inbound) sinceEvent(eventTime int64) time.Duration {
	if eventTime <= 0 {
		return -1
	}
	return in.now().Sub(time.Unix(eventTime, 0))
}

// storedSecrets are the fields of a Slack request that are credentials, not data: Slack's legacy
// verification token (every event, slash command and component carries it). They are checked when
// the request arrives and never stored: not in the queue, not in its dead letter.
var storedSecrets = []string{"token"}

// withoutSecrets is payload without storedSecrets (a copy; payload is not changed).
func withoutSecrets(payload map[string]any) map[string]any {
	out := maps.Clone(payload)
	for _, k := range storedSecrets {
		delete(out, k)
	}
	return out
}

// RedactStored returns a queue message with storedSecrets removed from the Slack request it holds
// (the request, or a fanned-out call's origin), for showing a message stored before they were
// stripped at enqueue (gantry queue list). A body that is not a queue message is returned as it is.
func RedactStored(body []byte) []byte {
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil || env["payload"] == nil {
		return body
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(env["payload"], &p) != nil {
		return body
	}
	changed := false
	for _, k := range storedSecrets {
		if _, ok := p[k]; ok {
			delete(p, k)
			changed = true
		}
	}
	if raw, ok := p["origin"]; ok && string(env["kind"]) == `"`+kindCall+`"` {
		var origin map[string]json.RawMessage
		if json.Unmarshal(raw, &origin) == nil {
			for _, k := range storedSecrets {
				if _, ok := origin[k]; ok {
					delete(origin, k)
					changed = true
				}
			}
			p["origin"] = jsonBody(origin)
		}
	}
	if !changed {
		return body
	}
	env["payload"] = jsonBody(p)
	return jsonBody(env)
}
