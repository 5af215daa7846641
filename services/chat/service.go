package chat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/services/chat/approvals"
	"github.com/gantry-dev/gantry/services/chat/events"
	"github.com/gantry-dev/gantry/services/chat/queue"
)

// listPageSize is the page size of users.list and conversations.list (Omnibot's 1000).
const listPageSize = 1000

// conversationTypes are refreshed into the team cache; IMs are listed per bot.
var conversationTypes = []string{"public_channel", "private_channel", "mpim"}

// conversationID matches Slack conversation ids (public C, private G, IM D), which get_channel also
// accepts in place of a name.
var conversationID = regexp.MustCompile(`^[CGD][A-Z0-9]{6,}$`)

// userID matches Slack user ids: get_channel with one finds the bot's IM with that user (Omnibot
// keyed IMs by user id).
var userID = regexp.MustCompile(`^[UW][A-Z0-9]{6,}$`)

// Service holds the chat domain logic: configured teams and bots, access control, the cache and the
// Slack calls.
type Service struct {
	cfg    Config
	fc     *FileConfig
	acl    *acl
	teams  map[string]*team
	logger *zap.Logger
	now    func() time.Time
	// request is the retry policy of calls made for a request; background the one of the refresher,
	// which may wait out longer rate limits.
	request, background retryPolicy
	// inbound receives and dispatches Slack's requests; nil when no queue is configured.
	inbound *events.Inbound
	// demo is the in-memory Slack workspace of -chat-demo, nil against a real Slack; Close closes it.
	demo DemoWorkspace
	// secrets is the connection to the secrets service of -chat-secrets-service, nil without one;
	// Close closes it.
	secrets *secretsConn
	// approvals relays change requests and rotation reminders to Slack and presses back; nil without
	// a connection to the secrets service.
	approvals *approvals.Relay
}

// SlackAPIURL is the Slack Web API the service calls: the configured one, or the demo workspace's.
func (s *Service) SlackAPIURL() string { return s.cfg.SlackAPIURL }

type team struct {
	name, id string
	bots     map[string]*bot
	reader   *bot // lists users and conversations: the primary bot, else the first bot with a token
	cache    *teamCache
	// flights coalesces concurrent identical Slack lookups (see coalesce).
	flights singleflight.Group
}

type bot struct {
	name, appID string
	client      *slackClient
}

// Deps are what the chat service is given rather than opens itself: internal/stack opens them from the
// process's settings.
type Deps struct {
	// Queue holds Slack's requests between the receivers and their dispatch (boltqueue or sqsqueue,
	// from -chat-inbound-queue); New takes it over, so Close closes it, and so does a failed New. nil:
	// the receivers answer 503 (the service run alone, in tests).
	Queue queue.Queue
	// StartDemo serves the demo workspace of -chat-demo for the configured teams (name → Slack id).
	// New calls it only with -chat-demo, teams configured and no bot holding a real token, and talks
	// to the workspace instead of -chat-slack-api-url; Close stops it.
	StartDemo func(teams map[string]string) DemoWorkspace
	// Logger is the service's logger; nil logs nothing.
	Logger *zap.Logger
}

// New builds the service of a validated configuration: it loads the file and the bot tokens (the
// environment, and the secrets service when configured).
func New(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	s, err := build(ctx, cfg, deps)
	if err != nil && deps.Queue != nil {
		_ = deps.Queue.Close()
	}
	return s, err
}

// build is New but for closing deps.Queue when it fails, which New does on every way out.
func build(ctx context.Context, cfg Config, deps Deps) (*Service, error) {
	fc, err := cfg.Load()
	if err != nil {
		return nil, err
	}
	logger := deps.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	env := cfg.Credentials
	if env == nil {
		env = EnvCredentials()
	}
	creds, conn, err := loadCredentials(ctx, cfg, env, logger)
	if err != nil {
		return nil, err
	}
	s, err := buildOver(cfg, fc, creds, deps, logger)
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, err
	}
	s.secrets = conn
	if conn != nil {
		s.approvals = approvals.New(approvals.Config{PollInterval: cfg.ApprovalsPollInterval}, approvalSecrets{conn.client}, s, logger.Named("approvals"))
		if s.inbound != nil {
			s.inbound.HandleApprovals(s.approvals)
		}
	}
	return s, nil
}

// buildOver is build once the credentials are read: the demo workspace when it stands in, the
// service, and its receivers.
func buildOver(cfg Config, fc *FileConfig, creds Credentials, deps Deps, logger *zap.Logger) (*Service, error) {
	var demo DemoWorkspace
	if cfg.Demo && len(fc.Teams) > 0 && !hasSlackToken(fc, creds) {
		if deps.StartDemo == nil {
			return nil, settings.Invalid("chat-demo", "this build serves no demo workspace")
		}
		demo = deps.StartDemo(fc.Teams)
		cfg.SlackAPIURL = demo.APIURL()
		creds = creds.overlay(demoTokens(fc))
	}
	s, err := NewService(cfg, fc, creds, logger)
	if err != nil {
		if demo != nil {
			demo.Close()
		}
		return nil, err
	}
	s.demo = demo
	if err := s.openInbound(deps.Queue, creds); err != nil {
		s.closeDemo()
		return nil, err
	}
	return s, nil
}

// openInbound starts the receivers of Slack's requests on q. Without a queue (the service run alone,
// in tests) the receivers answer 503.
func (s *Service) openInbound(q queue.Queue, creds Credentials) error {
	if q == nil {
		s.logger.Warn("no -chat-inbound-queue-path: Slack's requests are refused (503)")
		return nil
	}
	var bots []events.Bot
	for _, teamName := range sortedKeys(s.fc.Bots) {
		for _, botName := range sortedKeys(s.fc.Bots[teamName]) {
			app := s.fc.Bots[teamName][botName]
			tok := creds.tokensFor(app)
			bots = append(bots, events.Bot{Team: teamName, TeamID: s.fc.Teams[teamName], Name: botName, AppID: app,
				SigningSecret: tok.SigningSecret, VerificationToken: tok.Verification})
		}
	}
	in, err := events.New(s.cfg.Inbound, bots, s.fc.Handlers, q, s, s.cfg.Stats, s.logger.Named("inbound"))
	if err != nil {
		return settings.Invalid("chat-config", "%w", err)
	}
	s.inbound = in
	return nil
}

// closeDemo stops the demo workspace; without one (no -chat-demo) there is nothing to stop.
func (s *Service) closeDemo() {
	if s.demo != nil {
		s.demo.Close()
	}
}

// Close releases the inbound queue, stops the demo workspace and closes the connection to the
// secrets service.
func (s *Service) Close() error {
	s.closeDemo()
	if s.secrets != nil {
		_ = s.secrets.Close()
	}
	if s.inbound == nil {
		return nil
	}
	return s.inbound.Close()
}

// ReceiveSlack verifies, answers and queues one request Slack sent.
func (s *Service) ReceiveSlack(ctx context.Context, r events.Request) (events.Response, error) {
	if s.inbound == nil {
		return events.Response{}, &events.Error{Kind: events.ErrUnavailable, Message: "the Slack receivers are not configured"}
	}
	return s.inbound.Receive(ctx, r)
}

// Call implements events.Slack: a Web API call as a configured bot, with omnibot_parse applied, for
// the dispatcher's enrichment lookups and the actions of backends. It follows Omnibot's event path
// (processor.py), not its action route: a reply (chat.postMessage) uses the bot token only, so it
// never appears as the person who installed the app; another action is tried once more with the
// user token only when the bot token lacks a scope (missing_scope).
func (s *Service) Call(ctx context.Context, teamName, botName, method string, kwargs map[string]any) (json.RawMessage, error) {
	req := ActionRequest{Action: method, Kwargs: kwargs}
	if err := checkPayload(req); err != nil {
		return nil, err
	}
	t, b, err := s.resolve(teamName, botName)
	if err != nil {
		return nil, err
	}
	method, kwargs, err = s.prepare(t, req)
	if err != nil {
		return nil, err
	}
	retry := eventActionUserRetry
	if method == "chat.postMessage" {
		retry = nil
	}
	res, err := s.performRetryingOn(ctx, b, method, kwargs, retry)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// Lookup implements events.Slack: a read the dispatcher makes for itself (who the bot is, a user's
// name, a channel, whether a reacted message is the bot's) with the bot's token only, as Omnibot's
// read-through did; a person's token is never used to read on the bot's behalf.
func (s *Service) Lookup(ctx context.Context, teamName, botName, method string, kwargs map[string]any) (json.RawMessage, error) {
	return s.callAsBot(ctx, teamName, botName, method, kwargs)
}

// callAsBot calls method as a configured bot with its bot token alone, retrying as every call does.
func (s *Service) callAsBot(ctx context.Context, teamName, botName, method string, kwargs map[string]any) (json.RawMessage, error) {
	if !validMethod(method) {
		return nil, newError(ErrBadRequest, "not a Web API method")
	}
	_, b, err := s.resolve(teamName, botName)
	if err != nil {
		return nil, err
	}
	res, err := s.performRetryingOn(ctx, b, method, kwargs, nil)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// Post implements approvals.Slack: a message the service posts or updates itself (the approval
// relay's), as a configured bot with its bot token only: no omnibot_parse (the text is the service's
// own, and names in it are not mentions) and no retry with a person's token, which could not update
// the bot's message anyway.
func (s *Service) Post(ctx context.Context, teamName, botName, method string, kwargs map[string]any) (json.RawMessage, error) {
	return s.callAsBot(ctx, teamName, botName, method, kwargs)
}

// eventActionUserRetry are the Slack errors after which an action a backend asked for is made once
// more with the user token (Omnibot's _handle_action).
var eventActionUserRetry = map[string]bool{"missing_scope": true}

// NewService returns a service over a loaded configuration and credentials. A bot without a token is
// reported now, not at its first request: an error log, or a startup error with RequireTokens. Such a
// bot answers 404 like an unknown one, as in Omnibot.
func NewService(cfg Config, fc *FileConfig, creds Credentials, logger *zap.Logger) (*Service, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	a, err := compileACL(fc.Authorization)
	if err != nil {
		return nil, settings.Invalid("chat-config", "authorization: %w", err)
	}
	if len(a.checks) == 0 {
		logger.Warn("no access-control checks configured (authorization.checks): every chat route answers 403")
	}
	for _, w := range a.warnings {
		logger.Warn("authorization: " + w)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	var rt http.RoundTripper = transport
	if cfg.Stats != nil {
		rt = &slackStatsTransport{next: transport, stats: cfg.Stats, now: time.Now}
		registerCacheStats(cfg.Stats)
	}
	httpClient := &http.Client{Timeout: cfg.SlackAttemptTimeout, Transport: rt}
	s := &Service{
		cfg: cfg, fc: fc, acl: a, teams: map[string]*team{}, logger: logger, now: time.Now,
		request:    retryPolicy{retries: cfg.SlackRetries, maxRetryAfter: cfg.SlackMaxRetryAfter},
		background: retryPolicy{retries: max(cfg.SlackRetries, 5), maxRetryAfter: max(cfg.SlackMaxRetryAfter, time.Minute)},
	}
	var missing []string
	limits := newRateLimits()
	for name, id := range fc.Teams {
		t := &team{name: name, id: id, bots: map[string]*bot{}, cache: newTeamCache(cfg.negativeCacheTTL())}
		for _, botName := range sortedKeys(fc.Bots[name]) {
			app := fc.Bots[name][botName]
			tokens := creds.tokensFor(app)
			if !tokens.usable() {
				logger.Error("bot has no Slack token: set "+envBotToken+strings.ToUpper(app)+" (or "+envUserToken+strings.ToUpper(app)+"); until then it answers 404",
					zap.String("team", name), zap.String("bot", botName), zap.String("app_id", app))
				missing = append(missing, name+"/"+botName)
				continue
			}
			b := &bot{name: botName, appID: app, client: newSlackClient(cfg, tokens, httpClient, limits, logger.Named("slack").With(zap.String("team", name), zap.String("bot", botName)))}
			t.bots[botName] = b
			if t.reader == nil {
				t.reader = b
			}
		}
		if p, ok := t.bots[fc.PrimaryBot[name]]; ok {
			t.reader = p
		}
		s.teams[name] = t
	}
	if len(missing) > 0 && cfg.RequireTokens {
		sort.Strings(missing)
		return nil, settings.Invalid("chat-require-tokens", "bots without a Slack token: %s", strings.Join(missing, ", "))
	}
	return s, nil
}

// Authorize runs the configured access-control checks.
func (s *Service) Authorize(r AccessRequest) error { return s.acl.authorize(r) }

// TeamID returns the Slack team id of a configured team name.
func (s *Service) TeamID(teamName string) (string, error) {
	id, ok := s.fc.Teams[teamName]
	if !ok {
		return "", newError(ErrTeamNotFound, "provided team_name is not configured.")
	}
	return id, nil
}

func (s *Service) resolve(teamName, botName string) (*team, *bot, error) {
	t, ok := s.teams[teamName]
	if !ok {
		return nil, nil, newError(ErrTeamNotFound, "provided team name was not found.")
	}
	b, ok := t.bots[botName]
	if !ok {
		return nil, nil, newError(ErrBotNotFound, "provided bot name was not found.")
	}
	return t, b, nil
}

// slackContext bounds the Slack calls of a request to a little less than its deadline, so a Slack
// that does not answer becomes this service's clean 504 rather than the caller's own timeout.
func (s *Service) slackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeout(ctx, 30*time.Second)
	}
	margin := min(time.Until(dl)/10, time.Second)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

// GetUser returns the user with this email: from the cache while fresh, else users.lookupByEmail. A
// user that is not listable (deleted, a bot, Slackbot) is evicted and not found.
func (s *Service) GetUser(ctx context.Context, teamName, botName, email string) (User, error) {
	t, b, err := s.resolve(teamName, botName)
	if err != nil {
		return User{}, err
	}
	ctx, cancel := s.slackContext(ctx)
	defer cancel()
	return s.lookupUser(ctx, t, b, email)
}

func (s *Service) lookupUser(ctx context.Context, t *team, b *bot, email string) (User, error) {
	if email == "" {
		return User{}, newError(ErrUserNotFound, "user not found")
	}
	if u, _, fresh := t.cache.userByEmail(email, s.now(), s.cfg.CacheTTL); fresh {
		s.countCache("user", true)
		return s.teamUser(t, u), nil
	}
	s.countCache("user", false)
	u, err := coalesce(ctx, &t.flights, flightKey("users.lookupByEmail", b.name, normalEmail(email)), func(ctx context.Context) (User, error) {
		return s.readUser(ctx, t, b, email)
	})
	if err != nil {
		return User{}, err
	}
	return s.teamUser(t, u), nil
}

// readUser is the Slack side of lookupUser, made once for concurrent lookups of one email. Slack's
// "no such user" is remembered for -chat-negative-cache-ttl, a user that is not listable too.
func (s *Service) readUser(ctx context.Context, t *team, b *bot, email string) (User, error) {
	notFound := newError(ErrUserNotFound, "user not found")
	// Checked again: a lookup that ended while this one was queued may have answered it.
	cached, ok, fresh := t.cache.userByEmail(email, s.now(), s.cfg.CacheTTL)
	if fresh {
		return cached, nil
	}
	if t.cache.misses.has(emailMiss(email), s.now()) {
		return User{}, notFound
	}
	su, err := b.client.lookupByEmail(ctx, s.request, email)
	if code := slackErrorCode(err); code != "" {
		if code == "users_not_found" {
			t.cache.evictEmail(email)
			t.cache.misses.add(emailMiss(email), s.now())
		} else {
			s.logger.Warn("users.lookupByEmail failed", zap.String("team", t.name), zap.String("bot", b.name), zap.String("slack_error", code))
		}
		return User{}, notFound
	}
	if err != nil {
		if ok {
			// Slack is down or slow: a stale entry is better than no answer.
			s.logger.Warn("serving a stale cached user", zap.String("team", t.name), zap.Error(err))
			return cached, nil
		}
		return User{}, err
	}
	u := userFromSlack(su)
	if !t.cache.putUser(u, s.now()) {
		t.cache.misses.add(emailMiss(email), s.now())
		return User{}, notFound // a bot, a deleted user: Omnibot never knew them either
	}
	return u, nil
}

// teamUser reports the configured team id, as Omnibot does.
func (s *Service) teamUser(t *team, u User) User {
	u.TeamID = t.id
	return u
}

// GetChannel finds a conversation by name (leading # optional): public and private channels and
// MPIMs by name, the bot's IM with a user by user id, and any conversation by id.
func (s *Service) GetChannel(ctx context.Context, teamName, botName, name string) (Conversation, error) {
	t, b, err := s.resolve(teamName, botName)
	if err != nil {
		return Conversation{}, err
	}
	ctx, cancel := s.slackContext(ctx)
	defer cancel()
	notFound := newError(ErrChannelNotFound, "provided channel_name was not found.")
	name = strings.TrimPrefix(name, "#")
	if name == "" {
		return Conversation{}, notFound
	}
	now := s.now()
	ch, ok, fresh := t.cache.channelByName(name, now, s.cfg.CacheTTL)
	isID := conversationID.MatchString(name)
	if !ok && isID {
		ch, ok, fresh = t.cache.channelByID(b.name, name, now, s.cfg.CacheTTL)
	}
	if fresh {
		s.countCache("channel", true)
		return ch, nil
	}
	if im, ok := t.cache.imOf(b.name, name, now, s.cfg.CacheTTL); ok {
		s.countCache("channel", true)
		return im, nil
	}
	s.countCache("channel", false)
	id := ""
	switch {
	case ok:
		id = ch.ID
	case isID:
		if t.cache.misses.has(conversationMiss(b.name, name), now) {
			return Conversation{}, notFound
		}
		id = name
	}
	if id != "" {
		info, err := coalesce(ctx, &t.flights, flightKey("conversations.info", b.name, id), func(ctx context.Context) (Conversation, error) {
			return s.readConversation(ctx, t, b, id)
		})
		switch code := slackErrorCode(err); {
		case err == nil:
			return info, nil
		case code != "":
			t.cache.evictChannel(id)
			if code == "channel_not_found" {
				t.cache.misses.add(conversationMiss(b.name, id), s.now())
			}
		case ok:
			// Slack is down or slow: the cached conversation (found by name or id) will do.
			s.logger.Warn("serving a stale cached channel", zap.String("team", t.name), zap.Error(err))
			return ch, nil
		default:
			return Conversation{}, err
		}
	}
	if userID.MatchString(name) {
		// The bot's IM with this user, when its IM list was not known yet.
		if _, fresh := t.cache.imsOf(b.name, s.now(), s.cfg.CacheTTL); !fresh {
			if _, err := s.GetIMs(ctx, teamName, botName); err != nil {
				return Conversation{}, err
			}
			if im, ok := t.cache.imOf(b.name, name, s.now(), s.cfg.CacheTTL); ok {
				return im, nil
			}
		}
		return Conversation{}, notFound
	}
	if !t.cache.channelsFresh(s.now(), s.cfg.CacheTTL) {
		if err := s.fillChannels(ctx, t); err != nil {
			return Conversation{}, err
		}
		if ch, ok, _ := t.cache.channelByName(name, s.now(), s.cfg.CacheTTL); ok {
			return ch, nil
		}
	}
	return Conversation{}, notFound
}

// readConversation is the Slack side of GetChannel by id, made once for concurrent lookups of one
// id. It checks the cache again and fills it before the flight ends, so a lookup that missed the cache
// just as an earlier flight finished finds that flight's answer instead of asking Slack again.
func (s *Service) readConversation(ctx context.Context, t *team, b *bot, id string) (Conversation, error) {
	if ch, _, fresh := t.cache.channelByID(b.name, id, s.now(), s.cfg.CacheTTL); fresh {
		return ch, nil
	}
	info, err := b.client.conversationInfo(ctx, s.request, id)
	if err != nil {
		return Conversation{}, err
	}
	if info.IsIM {
		if info.User != "" {
			t.cache.putIM(b.name, info, s.now())
		}
	} else {
		t.cache.putChannel(info, s.now())
	}
	return info, nil
}

// fillChannels lists the conversations now, after a miss on a cache that is empty or stale. Concurrent
// misses share one listing.
func (s *Service) fillChannels(ctx context.Context, t *team) error {
	_, err := coalesce(ctx, &t.flights, flightKey("conversations.list"), func(ctx context.Context) (struct{}, error) {
		if t.cache.channelsFresh(s.now(), s.cfg.CacheTTL) || t.reader == nil {
			return struct{}{}, nil
		}
		l := t.cache.beginListing()
		list, err := t.reader.client.listConversations(ctx, s.request, t.id, conversationTypes, listPageSize)
		if err != nil {
			return struct{}{}, err
		}
		t.cache.setChannels(l, list, s.now())
		return struct{}{}, nil
	})
	return err
}

// GetIMs lists the bot's IM channels, refreshing the list when it is stale.
func (s *Service) GetIMs(ctx context.Context, teamName, botName string) ([]Conversation, error) {
	t, b, err := s.resolve(teamName, botName)
	if err != nil {
		return nil, err
	}
	ims, fresh := t.cache.imsOf(b.name, s.now(), s.cfg.CacheTTL)
	if fresh {
		return ims, nil
	}
	ctx, cancel := s.slackContext(ctx)
	defer cancel()
	_, err = coalesce(ctx, &t.flights, flightKey("ims", b.name), func(ctx context.Context) (struct{}, error) {
		l := t.cache.beginListing()
		list, err := b.client.listConversations(ctx, s.request, t.id, []string{"im"}, listPageSize)
		if err == nil {
			t.cache.setIMs(l, b.name, list, s.now())
		}
		return struct{}{}, err
	})
	if err != nil {
		if len(ims) > 0 {
			s.logger.Warn("serving a stale IM list", zap.String("team", t.name), zap.String("bot", b.name), zap.Error(err))
			return ims, nil
		}
		return nil, err
	}
	ims, _ = t.cache.imsOf(b.name, s.now(), s.cfg.CacheTTL)
	return ims, nil
}

// ActionRequest is the body of the action and send_im routes.
type ActionRequest struct {
	Action string
	// Kwargs are the method's arguments; nil when the body had none.
	Kwargs map[string]any
	// Parse is omnibot_parse given beside kwargs; omnibot_parse inside kwargs is read too.
	Parse any
}

// checkPayload refuses an action request without a valid action or without kwargs. It runs before
// the team and bot are resolved, so a bad payload is a 400 whatever bot it names.
func checkPayload(req ActionRequest) error {
	if req.Action == "" {
		return newError(ErrBadRequest, "action not provided in payload")
	}
	if !validMethod(req.Action) {
		return newError(ErrBadRequest, "action must be a Slack Web API method name, e.g. chat.postMessage")
	}
	if req.Kwargs == nil {
		return newError(ErrBadRequest, "kwargs not provided in payload")
	}
	return nil
}

// prepare applies omnibot_parse to a checked action request and returns the form to send.
func (s *Service) prepare(t *team, req ActionRequest) (string, map[string]any, error) {
	kwargs := make(map[string]any, len(req.Kwargs))
	for k, v := range req.Kwargs {
		kwargs[k] = v
	}
	rawParse := req.Parse
	if inner, ok := kwargs["omnibot_parse"]; ok {
		delete(kwargs, "omnibot_parse")
		if rawParse == nil {
			rawParse = inner
		}
	}
	spec, err := parseSpec(rawParse)
	if err != nil {
		return "", nil, err
	}
	if err := applyParse(kwargs, spec, teamLookup{t}); err != nil {
		return "", nil, err
	}
	return req.Action, kwargs, nil
}

// Action calls any Web API method as the bot and returns Slack's answer.
func (s *Service) Action(ctx context.Context, teamName, botName string, req ActionRequest) (ActionResult, error) {
	if err := checkPayload(req); err != nil {
		return ActionResult{}, err
	}
	t, b, err := s.resolve(teamName, botName)
	if err != nil {
		return ActionResult{}, err
	}
	method, kwargs, err := s.prepare(t, req)
	if err != nil {
		return ActionResult{}, err
	}
	return s.perform(ctx, b, method, kwargs)
}

func (s *Service) perform(ctx context.Context, b *bot, method string, kwargs map[string]any) (ActionResult, error) {
	return s.performRetryingOn(ctx, b, method, kwargs, userTokenRetryErrors)
}

func (s *Service) performRetryingOn(ctx context.Context, b *bot, method string, kwargs map[string]any, userRetry map[string]bool) (ActionResult, error) {
	form, err := encodeKwargs(kwargs)
	if err != nil {
		return ActionResult{}, newError(ErrBadRequest, err.Error())
	}
	ctx, cancel := s.slackContext(ctx)
	defer cancel()
	res, err := b.client.PerformRetryingOn(ctx, s.request, method, form, userRetry)
	if err == nil && !res.OK {
		s.logger.Info("Slack answered not ok", zap.String("method", method), zap.String("bot", b.name), zap.String("slack_error", res.Error))
	}
	return res, err
}

// SendIM performs an action in the bot's direct-message channel with the user of this email,
// opening it with conversations.open when it is not cached. kwargs.channel is overwritten.
func (s *Service) SendIM(ctx context.Context, teamName, botName, email string, req ActionRequest) (ActionResult, error) {
	if err := checkPayload(req); err != nil {
		return ActionResult{}, err
	}
	t, b, err := s.resolve(teamName, botName)
	if err != nil {
		return ActionResult{}, err
	}
	method, kwargs, err := s.prepare(t, req)
	if err != nil {
		return ActionResult{}, err
	}
	lookupCtx, cancel := s.slackContext(ctx)
	defer cancel()
	u, err := s.lookupUser(lookupCtx, t, b, email)
	if err != nil {
		if errors.Is(err, ErrUserNotFound) {
			return ActionResult{}, newError(ErrUserNotFound, "unable to find slack user for given email.")
		}
		return ActionResult{}, err
	}
	im, ok := t.cache.imOf(b.name, u.ID, s.now(), s.cfg.CacheTTL)
	if !ok {
		im, err = coalesce(lookupCtx, &t.flights, flightKey("conversations.open", b.name, u.ID), func(ctx context.Context) (Conversation, error) {
			return s.openIM(ctx, t, b, u.ID)
		})
		if code := slackErrorCode(err); code != "" {
			s.logger.Warn("conversations.open failed", zap.String("team", t.name), zap.String("bot", b.name), zap.String("slack_error", code))
			return ActionResult{}, newError(ErrIMNotFound, "unable to find IM channel.")
		}
		if err != nil {
			return ActionResult{}, err
		}
	}
	kwargs["channel"] = im.ID
	return s.perform(ctx, b, method, kwargs)
}

// openIM is the Slack side of send_im's conversations.open, made once for concurrent sends to one
// user. It checks the cache again and fills it before the flight ends (see readConversation).
func (s *Service) openIM(ctx context.Context, t *team, b *bot, userID string) (Conversation, error) {
	if im, ok := t.cache.imOf(b.name, userID, s.now(), s.cfg.CacheTTL); ok {
		return im, nil
	}
	im, err := b.client.openIM(ctx, s.request, userID)
	if err != nil {
		return Conversation{}, err
	}
	// get_ims lists the IM as Slack described it. An answer without created (Slack gives the id
	// alone unless asked for the whole IM) is not kept, as Omnibot keeps no opened IM: the next
	// refresh lists it whole, and until then send_im opens it again.
	if im.Created != 0 {
		im.IsIM, im.User = true, userID
		t.cache.putIM(b.name, im, s.now())
	}
	return im, nil
}

// Run dispatches Slack's queued requests, relays change requests to Slack (with a connection to the
// secrets service) and refreshes every team's cache until ctx ends: users, conversations and each
// bot's IMs, paged, waiting out Slack's rate limits (failures are logged; the next run tries again).
// It returns only once the dispatchers and the relay have: the dispatches in flight have finished or
// were abandoned after the inbound shutdown grace, so Close may close the queue and the connection
// after it.
func (s *Service) Run(ctx context.Context) error {
	var running sync.WaitGroup
	var dispatchErr error
	if s.inbound != nil {
		running.Go(func() { dispatchErr = s.inbound.Run(ctx) })
	}
	if s.approvals != nil {
		running.Go(func() { _ = s.approvals.Run(ctx) })
	}
	s.refresh(ctx)
	running.Wait()
	return dispatchErr
}

// refresh refreshes every team's cache every refresh interval until ctx ends.
func (s *Service) refresh(ctx context.Context) {
	interval := s.cfg.refreshInterval(s.fc)
	if interval < 0 || len(s.teams) == 0 {
		<-ctx.Done()
		return
	}
	for {
		for _, name := range sortedKeys(s.teams) {
			s.refreshTeam(ctx, s.teams[name], interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

func (s *Service) refreshTeam(ctx context.Context, t *team, budget time.Duration) {
	if t.reader == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, max(budget, time.Minute))
	defer cancel()
	log := s.logger.With(zap.String("team", t.name))
	start := s.now()
	l := t.cache.beginListing()
	users, err := t.reader.client.listUsers(ctx, s.background, t.id, listPageSize)
	if err != nil {
		log.Warn("refreshing users failed", zap.Error(err))
	} else {
		t.cache.setUsers(l, users, s.now())
	}
	l = t.cache.beginListing()
	chans, err := t.reader.client.listConversations(ctx, s.background, t.id, conversationTypes, listPageSize)
	if err != nil {
		log.Warn("refreshing conversations failed", zap.Error(err))
	} else {
		t.cache.setChannels(l, chans, s.now())
	}
	for _, name := range sortedKeys(t.bots) {
		l := t.cache.beginListing()
		ims, err := t.bots[name].client.listConversations(ctx, s.background, t.id, []string{"im"}, listPageSize)
		if err != nil {
			log.Warn("refreshing IMs failed", zap.String("bot", name), zap.Error(err))
			continue
		}
		t.cache.setIMs(l, name, ims, s.now())
	}
	log.Debug("cache refreshed", zap.Int("users", len(users)), zap.Int("conversations", len(chans)), zap.Duration("took", s.now().Sub(start)))
}

// teamLookup resolves omnibot_parse mentions from a team's cache.
type teamLookup struct{ t *team }

func (l teamLookup) channelMention(name string) (string, string, bool) {
	ch, ok, _ := l.t.cache.channelByName(name, time.Time{}, 0)
	return ch.ID, ch.Name, ok
}

func (l teamLookup) userMention(name string) (string, string, bool) {
	u, ok := l.t.cache.userByName(name)
	return u.ID, u.Name, ok
}
