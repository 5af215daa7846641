package events

import (
	"context"
	"fmt"
)

// compileHelp is what answers a message directed at a bot that no handler matched (Omnibot's
// _handle_help): the help_callback setting's callback, else, unless default_to_help is false,
// Omnibot's built-in help_callback. nil: such messages are ignored.
func compileHelp(h Handlers) (*handler, error) {
	switch {
	case h.HelpCallback != nil:
		urls, _, err := callbackURLs([]Callback{h.HelpCallback.Callback})
		if err != nil {
			return nil, fmt.Errorf("help_callback: %w", err)
		}
		return &handler{kind: "help", name: "help", urls: urls, sync: -1}, nil
	case h.DefaultToHelp == nil || *h.DefaultToHelp: // Omnibot's default is true
		return &handler{kind: "help", name: "help", urls: []string{helpURL}, sync: -1}, nil
	}
	return nil, nil
}

// dispatchHelp adds the help callback's call for a message no handler matched, if it is directed
// at the bot (an IM, or the text starts with @bot); others are ignored, as Omnibot does.
func (in *Inbound) dispatchHelp(ctx context.Context, b *Bot, p, ev map[string]any, eventID string, calls *plan) {
	if in.help == nil {
		return
	}
	unmatched := p == nil // no handler looked at it: counted ignored, as without help
	if unmatched {
		p = in.messagePayload(ctx, b, ev, eventID)
	}
	if directed, _ := p["directed"].(bool); !directed {
		if unmatched {
			in.count(KindEvent, "ignored")
		}
		return
	}
	in.count(KindEvent, "defaulted")
	calls.add(in, b, in.help, p, "", ev)
}

// helpReply is Omnibot's built-in help_callback (omnibot/callbacks/message_callbacks.py): one
// chat.postMessage whose attachments list the bot's command handlers ("Commands:") and regex
// handlers ("Regex matches:"), each a field titled with its match and valued with its description,
// in the configuration's order; a list with no handlers is left out. The bot is the payload's, as
// Omnibot finds it (by team and bot name).
func (in *Inbound) helpReply(body any) []byte {
	p, _ := body.(map[string]any)
	team, _ := p["team"].(map[string]any)
	bot, _ := p["bot"].(map[string]any)
	teamName, _ := team["name"].(string)
	botName, _ := bot["name"].(string)
	commands, regexes := []any{}, []any{}
	for _, h := range in.handlers[teamName+"/"+botName] {
		if h.msg == nil {
			continue
		}
		field := map[string]any{"title": h.msg.Match, "value": h.msg.Description, "short": false}
		switch h.kind {
		case "command":
			commands = append(commands, field)
		case "regex":
			regexes = append(regexes, field)
		}
	}
	attachments := []any{}
	if len(commands) > 0 {
		attachments = append(attachments, map[string]any{"title": "Commands:", "fields": commands})
	}
	if len(regexes) > 0 {
		attachments = append(attachments, map[string]any{"title": "Regex matches:", "fields": regexes})
	}
	return jsonBody(map[string]any{"actions": []any{map[string]any{"action": "chat.postMessage", "kwargs": map[string]any{"attachments": attachments}}}})
}
