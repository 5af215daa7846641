package events

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// Slack's markup in message text, as Omnibot's parser reads it (\w widened to Unicode, as Python's).
var (
	reUser    = regexp.MustCompile(`<@([UW][\p{L}\p{N}_]+)(?:\|([\p{L}\p{N}_.-]+))?>`)
	reChannel = regexp.MustCompile(`<#(C[\p{L}\p{N}_]+)(?:\|([\p{L}\p{N}_-]*))?>`)
	reSpecial = regexp.MustCompile(`<!([\p{L}\p{N}_]+)(?:\|@[\p{L}\p{N}_-]+)?>`)
	reEmoji   = regexp.MustCompile(`:([a-z0-9_+\-]+):`)
	reEmail   = regexp.MustCompile(`<mailto:([^>]*)>`)
	reURL     = regexp.MustCompile(`<(https?://[^>]*)>`)
)

// cacheTTL bounds how long a looked-up user name or channel is reused.
const cacheTTL = 10 * time.Minute

// lookup returns Slack's answer to method for a key, from the cache while fresh.
func (in *Inbound) lookup(ctx context.Context, cache map[string]cached, b *Bot, key, method string, kwargs map[string]any, field string) json.RawMessage {
	ck := b.Team + "/" + key
	in.mu.Lock()
	c, ok := cache[ck]
	in.mu.Unlock()
	if ok && in.now().Sub(c.at) < cacheTTL {
		return c.val
	}
	raw, err := in.slack.Call(ctx, b.Team, b.Name, method, kwargs)
	if err != nil {
		return nil
	}
	var ans map[string]json.RawMessage
	if json.Unmarshal(raw, &ans) != nil || string(ans["ok"]) != "true" {
		return nil
	}
	in.mu.Lock()
	cache[ck] = cached{val: ans[field], at: in.now()}
	in.mu.Unlock()
	return ans[field]
}

// botUserID is the bot's own user id (auth.test, Omnibot PR #106), "" when Slack does not say.
func (in *Inbound) botUserID(ctx context.Context, b *Bot) string {
	key := b.Team + "/" + b.Name
	in.mu.Lock()
	id, ok := in.botUser[key]
	in.mu.Unlock()
	if ok {
		return id
	}
	raw, err := in.slack.Call(ctx, b.Team, b.Name, "auth.test", map[string]any{})
	if err != nil {
		return ""
	}
	var ans struct {
		OK     bool   `json:"ok"`
		UserID string `json:"user_id"`
	}
	if json.Unmarshal(raw, &ans) != nil || !ans.OK {
		return ""
	}
	in.mu.Lock()
	in.botUser[key] = ans.UserID
	in.mu.Unlock()
	return ans.UserID
}

func (in *Inbound) userNameOf(ctx context.Context, b *Bot, id string) (string, json.RawMessage) {
	raw := in.lookup(ctx, in.userName, b, id, "users.info", map[string]any{"user": id}, "user")
	var u struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(raw, &u)
	return u.Name, raw
}

func (in *Inbound) channelOf(ctx context.Context, b *Bot, id string) map[string]any {
	raw := in.lookup(ctx, in.chanInfo, b, id, "conversations.info", map[string]any{"channel": id}, "channel")
	var ch map[string]any
	_ = json.Unmarshal(raw, &ch)
	return ch
}

// messagePayload is Omnibot's enriched message payload (services/slack/message.py): the event's
// fields, and text with Slack's markup resolved into parsed_text and the users, channels, specials,
// emojis, emails and urls it held; directed (an IM, or the text starts with @bot), mentioned and
// command_text (the text after @bot).
func (in *Inbound) messagePayload(ctx context.Context, b *Bot, ev map[string]any, eventID string) map[string]any {
	text, _ := ev["text"].(string)
	user, _ := ev["user"].(string)
	chID, _ := ev["channel"].(string)
	p := map[string]any{
		"omnibot_payload_type": "message",
		"bot":                  map[string]any{"name": b.Name, "bot_id": b.AppID},
		"team":                 map[string]any{"name": b.Team, "team_id": b.TeamID},
		"ts":                   ev["ts"], "thread_ts": ev["thread_ts"], "user": nilIfEmpty(user),
		"text": text, "channel_id": chID, "event_id": eventID,
		"subteams": map[string]any{},
	}
	p["parsed_user"] = nil
	if user != "" {
		if _, raw := in.userNameOf(ctx, b, user); raw != nil {
			p["parsed_user"] = raw
		}
	}
	channel := map[string]any{}
	if chID != "" {
		if ch := in.channelOf(ctx, b, chID); ch != nil {
			channel = ch
		}
	}
	p["channel"] = channel
	botUser := in.botUserID(ctx, b)
	parsed := text
	users := map[string]any{}
	for _, m := range reUser.FindAllStringSubmatch(text, -1) {
		name := m[2]
		switch {
		case name != "":
		case m[1] == botUser && botUser != "":
			name = b.Name // the bot is @<configured name>, whatever its Slack handle
		default:
			name, _ = in.userNameOf(ctx, b, m[1])
		}
		if name == "" {
			users[m[0]] = nil
			continue
		}
		users[m[0]] = name
		parsed = strings.ReplaceAll(parsed, m[0], "@"+name)
	}
	channels := map[string]any{}
	for _, m := range reChannel.FindAllStringSubmatch(text, -1) {
		name := m[2]
		if name == "" {
			if ch := in.channelOf(ctx, b, m[1]); ch != nil {
				name, _ = ch["name"].(string)
			}
		}
		if name == "" {
			continue
		}
		channels[m[0]] = name
		parsed = strings.ReplaceAll(parsed, m[0], "#"+name)
	}
	specials := map[string]any{}
	for _, m := range reSpecial.FindAllStringSubmatch(text, -1) {
		specials[m[0]] = "@" + m[1]
		parsed = strings.ReplaceAll(parsed, m[0], "@"+m[1])
	}
	emojis := map[string]any{}
	for _, m := range reEmoji.FindAllStringSubmatch(text, -1) {
		emojis[m[0]] = m[1]
	}
	emails := map[string]any{}
	for _, m := range reEmail.FindAllStringSubmatch(text, -1) {
		label, _, _ := strings.Cut(m[1], "|")
		emails[m[0]] = label
		parsed = strings.ReplaceAll(parsed, m[0], label)
	}
	urls := map[string]any{}
	for _, m := range reURL.FindAllStringSubmatch(text, -1) {
		label, _, _ := strings.Cut(m[1], "|")
		urls[m[0]] = label
		parsed = strings.ReplaceAll(parsed, m[0], label)
	}
	atMe := "@" + b.Name
	isIM, _ := channel["is_im"].(bool)
	first := strings.FieldsFunc(parsed, func(r rune) bool { return unicode.IsSpace(r) || r == '\u00a0' })
	directed := isIM || (len(first) > 0 && first[0] == atMe)
	mentioned := false
	for _, v := range users {
		if v == b.Name {
			mentioned = true
		}
	}
	command := parsed
	if strings.HasPrefix(parsed, atMe) {
		command = strings.TrimSpace(parsed[len(atMe):])
	} else if i := strings.LastIndex(parsed, atMe); i >= 0 {
		command = strings.TrimSpace(parsed[i+len(atMe):])
	}
	p["parsed_text"], p["users"], p["channels"], p["specials"], p["emojis"], p["emails"], p["urls"] = parsed, users, channels, specials, emojis, emails, urls
	p["directed"], p["mentioned"], p["command_text"] = directed, mentioned, command
	return p
}

// componentPayload is a slash command's or component's payload with Omnibot's bot and team blocks.
func (in *Inbound) componentPayload(b *Bot, p map[string]any) map[string]any {
	out := make(map[string]any, len(p)+3)
	for k, v := range p {
		if k == "token" { // the legacy verification token is a credential: backends never see it
			continue
		}
		out[k] = v
	}
	out["bot"] = map[string]any{"name": b.Name, "bot_id": b.AppID}
	out["team"] = map[string]any{"name": b.Team, "team_id": b.TeamID}
	if cmd, ok := p["command"].(string); ok {
		out["omnibot_payload_type"] = "slash_command"
		out["command"] = strings.TrimPrefix(cmd, "/")
	} else {
		out["omnibot_payload_type"] = "interactive_component"
		out["callback_id"] = callbackID(p)
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
