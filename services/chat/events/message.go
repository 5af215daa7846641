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
	raw, err := in.slack.Lookup(ctx, b.Team, b.Name, method, kwargs)
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
	raw, err := in.slack.Lookup(ctx, b.Team, b.Name, "auth.test", map[string]any{})
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

// parsedText is Slack's markup of a text resolved as Omnibot's parser does (services/slack/parser.py):
// the users, channels, specials, emojis, emails and urls it holds, each mapped from its markup to its
// label, and the text with them replaced, in Omnibot's order.
type parsedText struct {
	text                                            string
	users, channels, specials, emojis, emails, urls map[string]any
}

func (in *Inbound) parseText(ctx context.Context, b *Bot, text string) parsedText {
	botUser := ""
	if reUser.MatchString(text) {
		botUser = in.botUserID(ctx, b)
	}
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
	return parsedText{text: parsed, users: users, channels: channels, specials: specials, emojis: emojis, emails: emails, urls: urls}
}

// into sets the parsed fields on p, as Omnibot's payloads name them; subteams is always empty
// (Omnibot's extract_subteams parses nothing).
func (pt parsedText) into(p map[string]any) {
	p["parsed_text"], p["users"], p["channels"], p["specials"], p["emojis"], p["emails"], p["urls"] = pt.text, pt.users, pt.channels, pt.specials, pt.emojis, pt.emails, pt.urls
	p["subteams"] = map[string]any{}
}

// parsedUser is Omnibot's parsed_user: Slack's users.info user, {} when Slack does not answer
// (Omnibot's get_user), nil for no user.
func (in *Inbound) parsedUser(ctx context.Context, b *Bot, id string) any {
	if id == "" {
		return nil
	}
	if _, raw := in.userNameOf(ctx, b, id); raw != nil {
		return raw
	}
	return map[string]any{}
}

// channelObject is Omnibot's get_channel: Slack's conversations.info channel, {} when Slack does
// not answer.
func (in *Inbound) channelObject(ctx context.Context, b *Bot, id string) map[string]any {
	if id != "" {
		if ch := in.channelOf(ctx, b, id); ch != nil {
			return ch
		}
	}
	return map[string]any{}
}

// messagePayload is Omnibot's enriched message payload (services/slack/message.py): the event's
// fields, and text with Slack's markup resolved into parsed_text and the users, channels, specials,
// emojis, emails and urls it held; directed (an IM, or the text starts with @bot), mentioned and
// command_text (the text after @bot). event_id is gantry's addition.
func (in *Inbound) messagePayload(ctx context.Context, b *Bot, ev map[string]any, eventID string) map[string]any {
	text, _ := ev["text"].(string)
	user, _ := ev["user"].(string)
	chID, _ := ev["channel"].(string)
	p := map[string]any{
		"omnibot_payload_type": "message",
		"event_type":           ev["type"],
		"bot":                  map[string]any{"name": b.Name, "bot_id": b.AppID},
		"team":                 map[string]any{"name": b.Team, "team_id": b.TeamID},
		"ts":                   ev["ts"], "thread_ts": ev["thread_ts"], "parent_user_id": ev["parent_user_id"], "user": nilIfEmpty(user),
		"text": text, "channel_id": chID, "event_id": eventID,
	}
	p["parsed_user"] = in.parsedUser(ctx, b, user)
	channel := in.channelObject(ctx, b, chID)
	p["channel"] = channel
	pt := in.parseText(ctx, b, text)
	pt.into(p)
	parsed := pt.text
	atMe := "@" + b.Name
	isIM, _ := channel["is_im"].(bool)
	first := strings.FieldsFunc(parsed, func(r rune) bool { return unicode.IsSpace(r) || r == '\u00a0' })
	directed := isIM || (len(first) > 0 && first[0] == atMe)
	mentioned := false
	for _, v := range pt.users {
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
	p["directed"], p["mentioned"], p["command_text"] = directed, mentioned, command
	return p
}

// reactionPayload is Omnibot's Reaction payload (services/slack/reaction.py) with the match of a
// reaction handler (set_match("reaction", match)): reaction is the handler's match and args the
// emoji, ts the reaction's event_ts, the item flattened into item_type, item_channel, item_ts and
// item_user; event_id is gantry's addition.
func (in *Inbound) reactionPayload(ctx context.Context, b *Bot, ev map[string]any, eventID, match string) map[string]any {
	item, _ := ev["item"].(map[string]any)
	user, _ := ev["user"].(string)
	return map[string]any{
		"omnibot_payload_type": "reaction",
		"event_type":           ev["type"],
		"bot":                  map[string]any{"name": b.Name, "bot_id": b.AppID},
		"team":                 map[string]any{"name": b.Team, "team_id": b.TeamID},
		"user":                 nilIfEmpty(user), "parsed_user": in.parsedUser(ctx, b, user),
		"ts": ev["event_ts"], "emoji_name": ev["reaction"],
		"item_type": item["type"], "item_channel": item["channel"], "item_ts": item["ts"], "item_user": ev["item_user"],
		"channel_id": item["channel"],
		"match_type": "reaction", "reaction": match, "args": ev["reaction"],
		"event_id": eventID,
	}
}

// componentPayload is the payload a slash command's or an interactive component's backend gets:
// Omnibot's SlashCommand or InteractiveComponent payload, built from Slack's request.
func (in *Inbound) componentPayload(ctx context.Context, b *Bot, p map[string]any) map[string]any {
	if _, ok := p["command"].(string); ok {
		return in.slashPayload(ctx, b, p)
	}
	return in.interactivePayload(ctx, b, p)
}

// slashPayload is Omnibot's SlashCommand payload (services/slack/slash_command.py): the command
// with its leading slash, its text parsed as a message's, the user and channel looked up. The
// form's other fields (team_domain, user_name, channel_name, api_app_id, the token) are not passed,
// as Omnibot does not.
func (in *Inbound) slashPayload(ctx context.Context, b *Bot, p map[string]any) map[string]any {
	str := func(k string) string { s, _ := p[k].(string); return s }
	text := str("text")
	out := map[string]any{
		"omnibot_payload_type": "slash_command",
		"bot":                  map[string]any{"name": b.Name, "bot_id": b.AppID},
		"team":                 map[string]any{"name": b.Team, "team_id": b.TeamID},
		"enterprise_id":        p["enterprise_id"], "enterprise_name": p["enterprise_name"],
		"command": p["command"], "response_url": p["response_url"], "trigger_id": p["trigger_id"],
		"user_id": p["user_id"], "parsed_user": in.parsedUser(ctx, b, str("user_id")),
		"text": text, "channel_id": p["channel_id"], "channel": in.channelObject(ctx, b, str("channel_id")),
	}
	in.parseText(ctx, b, text).into(out)
	return out
}

// interactivePayload is Omnibot's InteractiveComponent payload
// (services/slack/interactive_component.py): the component's fields Omnibot passes, the user and
// channel looked up (parsed_user, parsed_channel, present only when the component has a user or
// channel), and the message's text parsed as a message's.
func (in *Inbound) interactivePayload(ctx context.Context, b *Bot, p map[string]any) map[string]any {
	out := map[string]any{
		"omnibot_payload_type": "interactive_component",
		"bot":                  map[string]any{"name": b.Name, "bot_id": b.AppID},
		"team":                 map[string]any{"name": b.Team, "team_id": b.TeamID},
		"type":                 p["type"], "callback_id": callbackID(p),
	}
	for _, k := range []string{"action_ts", "message_ts", "trigger_id", "response_url", "original_message", "view", "state", "user", "channel", "message", "submission", "actions"} {
		out[k] = p[k]
	}
	if u, ok := p["user"].(map[string]any); ok && len(u) > 0 {
		id, _ := u["id"].(string)
		out["parsed_user"] = in.parsedUser(ctx, b, id)
	}
	if ch, ok := p["channel"].(map[string]any); ok && len(ch) > 0 {
		id, _ := ch["id"].(string)
		out["parsed_channel"] = in.channelObject(ctx, b, id)
	}
	if m, ok := p["message"].(map[string]any); ok && len(m) > 0 {
		msg := make(map[string]any, len(m)+9)
		for k, v := range m {
			msg[k] = v
		}
		user, _ := m["user"].(string)
		msg["parsed_user"] = nil
		if user != "" {
			msg["parsed_user"] = in.parsedUser(ctx, b, user)
		}
		// Omnibot parses the text only when there is one (a KeyError stops each step otherwise).
		if text, ok := m["text"].(string); ok {
			in.parseText(ctx, b, text).into(msg)
		}
		out["message"] = msg
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
