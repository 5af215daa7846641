package events

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/stats"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

// Slack performs Web API calls as a configured bot, with chat's tokens, retries and omnibot_parse
// (kwargs.omnibot_parse is applied). It returns Slack's JSON answer.
type Slack interface {
	// Call makes an action a backend asked for (Omnibot's _handle_action): another try with the
	// installing user's token when the bot's lacks a scope, except for a reply (chat.postMessage).
	Call(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error)
	// Lookup reads what the dispatcher needs to know (auth.test, users.info, conversations.info,
	// conversations.history) with the bot's own token only, as Omnibot's read-through did: never
	// with a person's token on the bot's behalf.
	Lookup(ctx context.Context, team, bot, method string, kwargs map[string]any) (json.RawMessage, error)
}

// Bot is a configured Slack app and its credentials. Secrets are never logged.
type Bot struct {
	Team, TeamID, Name, AppID string
	// SigningSecret verifies requests (CREDENTIALS_SLACK_SIGNING_SECRET_<APPID>).
	SigningSecret string
	// VerificationToken is the legacy token (CREDENTIALS_SLACK_VERIFICATION_TOKEN_<APPID>).
	VerificationToken string
}

// Inbound is the receiving and dispatching of Slack requests of one chat replica.
type Inbound struct {
	cfg      Config
	bots     map[string]*Bot // by app id
	handlers map[string][]*handler
	help     *handler // answers directed messages no handler matched; nil: none
	queue    queue.Queue
	slack    Slack
	http     *http.Client
	stats    *stats.Store
	logger   *zap.Logger
	refusals *logging.Sampler // refused requests: the first few per kind and interval, then a count
	now      func() time.Time
	prefixes []string
	// approvals decides the presses of change request buttons; nil: none are decided here.
	approvals Approvals

	mu       sync.Mutex
	userName map[string]cached // team/user id -> name
	chanInfo map[string]cached // team/channel id -> conversations.info channel
	botUser  map[string]string // team/bot -> the bot's user id (auth.test)
}

type cached struct {
	val json.RawMessage
	at  time.Time
}

// New returns the inbound direction over a queue. st may be shared with the gateway of the process,
// so the counters show in /stats; nil makes a private one.
func New(cfg Config, bots []Bot, h Handlers, q queue.Queue, slack Slack, st *stats.Store, logger *zap.Logger) (*Inbound, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if st == nil {
		st = stats.New()
	}
	compiled, warnings, err := compileHandlers(h)
	if err != nil {
		return nil, fmt.Errorf("handlers: %w", err)
	}
	help, err := compileHelp(h)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		logger.Warn("handlers: " + w)
	}
	in := &Inbound{
		cfg: cfg, bots: map[string]*Bot{}, handlers: compiled, help: help, queue: q, slack: slack, stats: st, logger: logger, now: time.Now,
		refusals: logging.NewSampler(logger, 0, 0),
		http:     &http.Client{Timeout: cfg.CallbackTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		prefixes: cfg.responsePrefixes(),
		userName: map[string]cached{}, chanInfo: map[string]cached{}, botUser: map[string]string{},
	}
	for i := range bots {
		b := bots[i]
		in.bots[strings.ToUpper(b.AppID)] = &b
		if b.SigningSecret == "" && !(cfg.AllowVerificationToken && b.VerificationToken != "") {
			logger.Warn("bot has no signing secret: its Slack requests are refused (set CREDENTIALS_SLACK_SIGNING_SECRET_"+strings.ToUpper(b.AppID)+")",
				zap.String("team", b.Team), zap.String("bot", b.Name))
		}
	}
	st.GaugeFunc("chat.inbound.queue.ready", func() int64 { d, _ := q.Depth(context.Background()); return int64(d.Ready) })
	st.GaugeFunc("chat.inbound.queue.in_flight", func() int64 { d, _ := q.Depth(context.Background()); return int64(d.InFlight) })
	st.GaugeFunc("chat.inbound.queue.dead_letter", func() int64 { d, _ := q.Depth(context.Background()); return int64(d.Dead) })
	st.GaugeFunc("chat.inbound.queue.depth", func() int64 { d, _ := q.Depth(context.Background()); return int64(d.Ready + d.InFlight) })
	st.GaugeFunc("chat.inbound.queue.oldest_age_seconds", func() int64 { return int64(in.oldestAge() / time.Second) })
	return in, nil
}

// Close closes the queue.
func (in *Inbound) Close() error { return in.queue.Close() }

func (in *Inbound) count(kind, what string) {
	in.stats.Counter("chat.inbound." + kind + "." + what).Inc()
}

func (in *Inbound) handlersOf(b *Bot) []*handler { return in.handlers[b.Team+"/"+b.Name] }
