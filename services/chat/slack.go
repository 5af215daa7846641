package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// userTokenRetryErrors are Slack errors after which a call is made once more with the user token:
// the bot token lacks a scope, or the bot is not in the channel (Omnibot PRs #50/#51).
var userTokenRetryErrors = map[string]bool{
	"missing_scope": true, "not_allowed_token_type": true, "channel_not_found": true, "not_in_channel": true,
}

// maxSlackBody bounds what is read of one Slack answer.
const maxSlackBody = 8 << 20

// ActionResult is Slack's answer to a pass-through call.
type ActionResult struct {
	// Body is Slack's JSON, unchanged.
	Body []byte
	// OK is Slack's ok field; Error its error code when not ok.
	OK    bool
	Error string
	// RateLimited is set when Slack still answered 429 after the retries the request could afford;
	// RetryAfter is Slack's Retry-After.
	RateLimited bool
	RetryAfter  time.Duration
}

// retryPolicy bounds the retries of one Slack call.
type retryPolicy struct {
	retries       int
	maxRetryAfter time.Duration
}

// slackClient calls the Slack Web API as one bot: typed calls through slack-go, and the raw
// pass-through of the action route through a small form POST, because slack-go has no exported
// "call any method" API and its typed results would lose Slack's JSON.
type slackClient struct {
	tokens  BotTokens
	api     *slack.Client // typed calls, with the bot token (or the user token when there is none)
	http    *http.Client
	baseURL string
	logger  *zap.Logger
	// limits holds Slack's rate-limit windows, shared by every client of the service.
	limits *rateLimits
}

func newSlackClient(cfg Config, tokens BotTokens, httpClient *http.Client, limits *rateLimits, logger *zap.Logger) *slackClient {
	return &slackClient{
		limits:  limits,
		tokens:  tokens,
		api:     slack.New(tokens.primary(), slack.OptionAPIURL(cfg.apiURL()), slack.OptionHTTPClient(httpClient)),
		http:    httpClient,
		baseURL: cfg.apiURL(),
		logger:  logger,
	}
}

// encodeKwargs form-encodes the arguments of a Web API method: strings as they are, everything else
// JSON-encoded (attachments, blocks, booleans, numbers), as Omnibot's Python client sent them. A
// null is left out, and a caller-supplied token is dropped: calls always use the bot's tokens.
func encodeKwargs(kwargs map[string]any) (url.Values, error) {
	form := url.Values{}
	for k, v := range kwargs {
		if k == "token" || v == nil {
			continue
		}
		if s, ok := v.(string); ok {
			form.Set(k, s)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: kwargs.%s cannot be encoded: %v", ErrBadRequest, k, err)
		}
		form.Set(k, string(b))
	}
	return form, nil
}

// validMethod reports whether action is shaped like a Web API method name, so it cannot walk the URL.
func validMethod(action string) bool {
	if action == "" || len(action) > 100 {
		return false
	}
	for _, r := range action {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// Perform calls a Web API method with the bot token, and once more with the user token when Slack
// answers one of userTokenRetryErrors and the bot has a user token.
func (c *slackClient) Perform(ctx context.Context, pol retryPolicy, method string, form url.Values) (ActionResult, error) {
	return c.PerformRetryingOn(ctx, pol, method, form, userTokenRetryErrors)
}

// PerformRetryingOn is Perform with its own set of Slack errors that make a second call with the
// user token (none: the bot token only).
func (c *slackClient) PerformRetryingOn(ctx context.Context, pol retryPolicy, method string, form url.Values, userRetry map[string]bool) (ActionResult, error) {
	res, err := c.post(ctx, pol, method, form, c.tokens.primary())
	if err != nil || res.OK || res.RateLimited || !userRetry[res.Error] || c.tokens.User == "" || c.tokens.Bot == "" {
		return res, err
	}
	c.logger.Info("retrying with the user token", zap.String("method", method), zap.String("slack_error", res.Error))
	return c.post(ctx, pol, method, form, c.tokens.User)
}

// post sends one method call under the retry rules of call. When Slack still rate-limits at the end,
// the result is its 429 answer (the caller answers 429 with Slack's body and Retry-After).
func (c *slackClient) post(ctx context.Context, pol retryPolicy, method string, form url.Values, token string) (ActionResult, error) {
	body := form.Encode()
	var last ActionResult
	limitedFor, err := c.call(ctx, pol, method, newRateKey(token, method, rateScope(method, form)), func(ctx context.Context) attemptOutcome {
		res, retryAfter, err := c.postOnce(ctx, method, body, token)
		last = res
		return attemptOutcome{retryAfter: retryAfter, err: err, final: errors.Is(err, errBadSlackAnswer)}
	})
	switch {
	case err != nil:
		return ActionResult{}, err
	case limitedFor > 0:
		if !last.RateLimited {
			// Not called: another request's 429 still holds. Slack's answer to it, as Slack words it.
			last = ActionResult{Body: []byte(`{"ok":false,"error":"ratelimited"}`), Error: "ratelimited", RateLimited: true}
		}
		last.RetryAfter = limitedFor
		return last, nil
	}
	return last, nil
}

// postOnce makes one HTTP call. A 429 returns its Retry-After (at least one second) and the
// rate-limited result; network errors and 5xx return an error to retry.
func (c *slackClient) postOnce(ctx context.Context, method, body, token string) (ActionResult, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+method, strings.NewReader(body))
	if err != nil {
		return ActionResult{}, 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		return ActionResult{}, 0, redactURL(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSlackBody))
	if err != nil {
		return ActionResult{}, 0, redactURL(err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		ra := parseRetryAfter(resp.Header.Get(wirekeys.RetryAfter))
		if !json.Valid(data) {
			data = []byte(`{"ok":false,"error":"ratelimited"}`)
		}
		return ActionResult{Body: data, Error: "ratelimited", RateLimited: true, RetryAfter: ra}, ra, nil
	case resp.StatusCode >= 500:
		return ActionResult{}, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if bytes.HasPrefix(data, slackOKTrue) && json.Valid(data) {
		// Slack's answers start with "ok"; a successful one has no error to read, so the common case
		// is checked, not decoded.
		return ActionResult{Body: data, OK: true}, 0, nil
	}
	var head struct {
		OK    *bool  `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(data, &head); err != nil || head.OK == nil {
		// Not Slack's JSON (a proxy's page, a 404 of a wrong API URL): nothing to pass through.
		return ActionResult{}, 0, fmt.Errorf("%w: HTTP %d with a body that is not a Slack answer", errBadSlackAnswer, resp.StatusCode)
	}
	return ActionResult{Body: data, OK: *head.OK, Error: head.Error}, 0, nil
}

// errBadSlackAnswer is an answer that is not Slack's JSON; it is not retried, and answered 502.
var errBadSlackAnswer = fmt.Errorf("%w: bad answer", ErrSlackUnavailable)

// redactURL drops the URL from a transport error: it is the configured API URL, which the log may
// show but a client need not.
func redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		n = 1
	}
	return time.Duration(n) * time.Second
}

// backoff is 100 ms doubling per attempt, capped at 2 s, with jitter so replicas do not retry in step.
func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 5)
	d = min(d, 2*time.Second)
	return d/2 + rand.N(d/2+1)
}

func fitsDeadline(ctx context.Context, wait time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > wait
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ctxError turns an ended context into the domain error: the Slack budget ran out (504), or the
// client went away.
func ctxError(ctx context.Context, last error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if last != nil {
			return fmt.Errorf("%w (last error: %v)", ErrSlackTimeout, last)
		}
		return ErrSlackTimeout
	}
	return ctx.Err()
}

// typed runs a slack-go call under the retry rules of call. Slack's ok:false answers return at once
// as slack-go's error, so callers can read Slack's error code.
func (c *slackClient) typed(ctx context.Context, pol retryPolicy, method string, do func(context.Context) error) error {
	var answer error
	limitedFor, err := c.call(ctx, pol, method, newRateKey(c.tokens.primary(), method, ""), func(ctx context.Context) attemptOutcome {
		err := do(ctx)
		answer = err
		var slackErr slack.SlackErrorResponse
		var rl *slack.RateLimitedError
		var sc slack.StatusCodeError
		switch {
		case err == nil, errors.As(err, &slackErr):
			return attemptOutcome{}
		case errors.As(err, &rl):
			return attemptOutcome{retryAfter: max(rl.RetryAfter, time.Second)}
		case errors.As(err, &sc) && sc.Code < 500:
			return attemptOutcome{err: fmt.Errorf("%w: HTTP %d", errBadSlackAnswer, sc.Code), final: true}
		}
		return attemptOutcome{err: redactURL(err)}
	})
	switch {
	case err != nil:
		return err
	case limitedFor > 0:
		return &rateLimitError{method: method, after: limitedFor}
	}
	return answer
}

// attemptOutcome is what one HTTP call to Slack came to.
type attemptOutcome struct {
	// retryAfter is set when Slack answered 429: it refused the call, which was not performed.
	retryAfter time.Duration
	// err is set when there is no usable answer: a network error, a timeout, a 5xx.
	err error
	// final marks an err no retry can fix (an answer that is not Slack's JSON).
	final bool
}

// call runs attempt with bounded retries, and returns how long Slack still rate-limits the method
// when it gives up on a 429, or the error of a failure. Which failures are retried depends on whether
// the call may have been performed: see retryable. A 429 is always retried (Slack refused the call)
// after its Retry-After when that is at most pol.maxRetryAfter and fits the deadline; other failures
// back off exponentially. Rate limits are shared (rateLimits): a call of a window (key: token,
// method, and the channel of chat.postMessage) Slack is rate-limiting waits for the same deadline as
// the others, or gives up at once when it may not wait that long. ctx's deadline bounds everything.
func (c *slackClient) call(ctx context.Context, pol retryPolicy, method string, key rateKey, attempt func(context.Context) attemptOutcome) (time.Duration, error) {
	var lastErr error
	for n := 0; ; n++ {
		probe, limitedFor, err := c.limits.admit(ctx, key, pol.maxRetryAfter)
		if err != nil {
			return 0, ctxError(ctx, lastErr)
		}
		if limitedFor > 0 {
			return limitedFor, nil
		}
		o := attempt(ctx)
		c.limits.done(key, probe, o.err == nil, o.retryAfter)
		if o.err == nil && o.retryAfter == 0 {
			return 0, nil
		}
		if o.final {
			return 0, fmt.Errorf("%s: %w", method, o.err)
		}
		if ctx.Err() != nil {
			return 0, ctxError(ctx, lastErr)
		}
		if o.retryAfter > 0 {
			if o.retryAfter > pol.maxRetryAfter || n >= pol.retries || !fitsDeadline(ctx, o.retryAfter) {
				return o.retryAfter, nil
			}
			// admit waits out the window this 429 opened, with every other request of the token.
			c.logger.Warn("Slack rate limit, waiting", zap.String("method", method), zap.Duration("retry_after", o.retryAfter))
			continue
		}
		if !retryable(method, o.err) {
			return 0, notRetried(method, o.err)
		}
		wait := backoff(n)
		if n >= pol.retries || !fitsDeadline(ctx, wait) {
			return 0, fmt.Errorf("%w: %s: %v", ErrSlackUnavailable, method, o.err)
		}
		lastErr = o.err
		c.logger.Warn("Slack call failed, retrying", zap.String("method", method), zap.Int("attempt", n+1), zap.Duration("wait", wait), zap.Error(o.err))
		if err := sleep(ctx, wait); err != nil {
			return 0, ctxError(ctx, lastErr)
		}
	}
}

// rateLimitError is a typed call Slack kept rate-limiting; the caller is told when to come back.
type rateLimitError struct {
	method string
	after  time.Duration
}

func (e *rateLimitError) Error() string {
	return fmt.Sprintf("%s: %s for %v", ErrSlackRateLimited, e.method, e.after)
}

func (e *rateLimitError) Unwrap() error { return ErrSlackRateLimited }

// slackErrorCode returns Slack's error code of an ok:false answer, or "".
func slackErrorCode(err error) string {
	var slackErr slack.SlackErrorResponse
	if errors.As(err, &slackErr) {
		return slackErr.Err
	}
	return ""
}

// listUsers pages through users.list.
func (c *slackClient) listUsers(ctx context.Context, pol retryPolicy, teamID string, pageSize int) ([]slack.User, error) {
	var all []slack.User
	p := c.api.GetUsersPaginated(slack.GetUsersOptionLimit(pageSize), slack.GetUsersOptionTeamID(teamID))
	for {
		var next slack.UserPagination
		done := false
		err := c.typed(ctx, pol, "users.list", func(ctx context.Context) error {
			var err error
			next, err = p.Next(ctx)
			if p.Done(err) {
				done = true
				return nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if done {
			return all, nil
		}
		all = append(all, next.Users...)
		p = next
	}
}

// Conversation is a Slack conversation: slack-go's typed view, and the object as Slack sent it,
// because Omnibot answers get_channel and get_ims with every field Slack gave.
type Conversation struct {
	slack.Channel
	// Raw is Slack's JSON object; nil for a conversation known by its id only.
	Raw json.RawMessage
}

// UnmarshalJSON keeps Slack's object beside the typed view.
func (c *Conversation) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &c.Channel); err != nil {
		return err
	}
	c.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// callJSON makes one Web API call through post (its retries) and decodes Slack's answer into out, for
// the conversation calls whose answers slack-go's types would cut down to the fields they know. An
// ok:false answer is a slack.SlackErrorResponse and a rate limit beyond what the request can wait a
// rateLimitError, as typed calls return them.
func (c *slackClient) callJSON(ctx context.Context, pol retryPolicy, method string, form url.Values, out any) error {
	res, err := c.post(ctx, pol, method, form, c.tokens.primary())
	switch {
	case err != nil:
		return err
	case res.RateLimited:
		return &rateLimitError{method: method, after: res.RetryAfter}
	case !res.OK:
		return slack.SlackErrorResponse{Err: res.Error}
	}
	if err := json.Unmarshal(res.Body, out); err != nil {
		return fmt.Errorf("%w: %s: %v", errBadSlackAnswer, method, err)
	}
	return nil
}

// listConversations pages through conversations.list for the given types.
func (c *slackClient) listConversations(ctx context.Context, pol retryPolicy, teamID string, types []string, pageSize int) ([]Conversation, error) {
	form := url.Values{"exclude_archived": {"true"}, "limit": {strconv.Itoa(pageSize)}, "types": {strings.Join(types, ",")}}
	if teamID != "" {
		form.Set("team_id", teamID)
	}
	var all []Conversation
	for {
		var page struct {
			Channels         []Conversation `json:"channels"`
			ResponseMetadata struct {
				NextCursor string `json:"next_cursor"`
			} `json:"response_metadata"`
		}
		if err := c.callJSON(ctx, pol, "conversations.list", form, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Channels...)
		if page.ResponseMetadata.NextCursor == "" {
			return all, nil
		}
		form.Set("cursor", page.ResponseMetadata.NextCursor)
	}
}

func (c *slackClient) lookupByEmail(ctx context.Context, pol retryPolicy, email string) (*slack.User, error) {
	var u *slack.User
	err := c.typed(ctx, pol, "users.lookupByEmail", func(ctx context.Context) error {
		var err error
		u, err = c.api.GetUserByEmailContext(ctx, email)
		return err
	})
	return u, err
}

func (c *slackClient) conversationInfo(ctx context.Context, pol retryPolicy, id string) (Conversation, error) {
	var answer struct {
		Channel *Conversation `json:"channel"`
	}
	form := url.Values{"channel": {id}, "include_num_members": {"true"}}
	if err := c.callJSON(ctx, pol, "conversations.info", form, &answer); err != nil {
		return Conversation{}, err
	}
	if answer.Channel == nil {
		return Conversation{}, fmt.Errorf("%w: conversations.info without a channel", errBadSlackAnswer)
	}
	return *answer.Channel, nil
}

// openIM opens (or finds) the bot's IM with a user. return_im asks Slack for the whole IM object,
// created included; without it Slack gives the id alone.
func (c *slackClient) openIM(ctx context.Context, pol retryPolicy, userID string) (Conversation, error) {
	var answer struct {
		Channel *Conversation `json:"channel"`
	}
	if err := c.callJSON(ctx, pol, "conversations.open", url.Values{"users": {userID}, "return_im": {"true"}}, &answer); err != nil {
		return Conversation{}, err
	}
	if answer.Channel == nil || answer.Channel.ID == "" {
		return Conversation{}, fmt.Errorf("%w: conversations.open without a channel id", errBadSlackAnswer)
	}
	return *answer.Channel, nil
}

// sortedKeys is used where map order would make logs or results unstable.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
