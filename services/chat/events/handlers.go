package events

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Handlers is Omnibot's handlers section, read unchanged from its configuration file.
type Handlers struct {
	MessageHandlers              []MessageHandler     `yaml:"message_handlers"`
	SlashCommandHandlers         []SlashHandler       `yaml:"slash_command_handlers"`
	InteractiveComponentHandlers []InteractiveHandler `yaml:"interactive_component_handlers"`
}

// Callback is one of a handler's callbacks. Only Omnibot's HTTP callback is supported
// (omnibot.callbacks.network_callbacks:http_callback, or the older
// omnibot.handlers.network_handlers:http_handler): its URL is kwargs.request_kwargs.url (or path).
type Callback struct {
	Module string `yaml:"module"`
	Kwargs struct {
		RequestKwargs map[string]any `yaml:"request_kwargs"`
		ClientKwargs  map[string]any `yaml:"client_kwargs"`
	} `yaml:"kwargs"`
}

// MessageHandler matches message and reaction events.
type MessageHandler struct {
	// MatchType is command, regex or reaction.
	MatchType string `yaml:"match_type"`
	// Match is the command prefix, or the regular expression.
	Match string `yaml:"match"`
	// RegexType absence calls back when the regex does not match.
	RegexType string `yaml:"regex_type"`
	// MatchMention lets a command match a message that mentions the bot anywhere, not only one
	// directed at it.
	MatchMention bool `yaml:"match_mention"`
	// MatchReply lets the handler see thread replies, which are ignored otherwise.
	MatchReply  bool                `yaml:"match_reply"`
	Description string              `yaml:"description"`
	Bots        map[string][]string `yaml:"bots"`
	Callbacks   []Callback          `yaml:"callbacks"`
}

// SlashHandler handles one slash command.
type SlashHandler struct {
	Command        string              `yaml:"command"`
	ResponseType   string              `yaml:"response_type"`
	CannedResponse string              `yaml:"canned_response"`
	Dialog         map[string]any      `yaml:"dialog"`
	Bots           map[string][]string `yaml:"bots"`
	Callbacks      []Callback          `yaml:"callbacks"`
}

// InteractiveHandler handles the interactive components of one callback_id.
type InteractiveHandler struct {
	CallbackID        string `yaml:"callback_id"`
	ResponseType      string `yaml:"response_type"`
	CannedResponse    string `yaml:"canned_response"`
	NoMessageResponse bool   `yaml:"no_message_response"`
	// Synchronous returns the callback's answer to Slack as the HTTP response (within
	// -chat-inbound-sync-timeout) instead of queueing the component.
	Synchronous bool                `yaml:"synchronous"`
	Dialog      map[string]any      `yaml:"dialog"`
	Bots        map[string][]string `yaml:"bots"`
	Callbacks   []Callback          `yaml:"callbacks"`
}

// compiled handlers, per team and bot name.
type handler struct {
	name      string // for stats and logs: kind and match
	kind      string // command, regex, reaction, slash, interactive
	match     string
	re        *regexp.Regexp
	absence   bool
	mention   bool
	reply     bool
	urls      []string
	msg       *MessageHandler
	slash     *SlashHandler
	component *InteractiveHandler
}

func callbackURLs(cbs []Callback) ([]string, error) {
	var out []string
	for i, cb := range cbs {
		fn := cb.Module
		if j := strings.LastIndexByte(fn, ':'); j >= 0 {
			fn = fn[j+1:]
		}
		if fn != "http_callback" && fn != "http_handler" {
			return nil, fmt.Errorf("callbacks[%d]: module %q is not supported (gantry calls backends with http_callback only)", i, cb.Module)
		}
		raw, _ := cb.Kwargs.RequestKwargs["url"].(string)
		if raw == "" {
			raw, _ = cb.Kwargs.RequestKwargs["path"].(string)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("callbacks[%d]: kwargs.request_kwargs.url must be an http(s) URL", i)
		}
		out = append(out, raw)
	}
	return out, nil
}

// statName makes a handler's match usable in a dotted stat name.
func statName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// CheckHandlers reports the first error of a handlers section, so a broken file stops startup.
func CheckHandlers(h Handlers) error {
	_, err := compileHandlers(h)
	return err
}

// compileHandlers checks the handlers section and groups it by "team/bot".
func compileHandlers(h Handlers) (map[string][]*handler, error) {
	out := map[string][]*handler{}
	add := func(bots map[string][]string, hd *handler) {
		for team, names := range bots {
			for _, n := range names {
				out[team+"/"+n] = append(out[team+"/"+n], hd)
			}
		}
	}
	for i := range h.MessageHandlers {
		m := &h.MessageHandlers[i]
		urls, err := callbackURLs(m.Callbacks)
		if err != nil {
			return nil, fmt.Errorf("message_handlers[%d]: %w", i, err)
		}
		hd := &handler{kind: m.MatchType, match: m.Match, absence: m.RegexType == "absence", mention: m.MatchMention, reply: m.MatchReply, urls: urls, msg: m}
		switch m.MatchType {
		case "command":
		case "regex", "reaction":
			pat := m.Match
			if m.MatchType == "reaction" {
				pat = `^(?:` + pat + `)$` // Omnibot's re.fullmatch
			}
			if hd.re, err = regexp.Compile(pat); err != nil {
				return nil, fmt.Errorf("message_handlers[%d]: match: %w", i, err)
			}
		default:
			return nil, fmt.Errorf("message_handlers[%d]: match_type %q is not command, regex or reaction", i, m.MatchType)
		}
		hd.name = m.MatchType + "." + statName(m.Match)
		add(m.Bots, hd)
	}
	for i := range h.SlashCommandHandlers {
		s := &h.SlashCommandHandlers[i]
		urls, err := callbackURLs(s.Callbacks)
		if err != nil {
			return nil, fmt.Errorf("slash_command_handlers[%d]: %w", i, err)
		}
		cmd := strings.TrimPrefix(s.Command, "/")
		if cmd == "" {
			return nil, fmt.Errorf("slash_command_handlers[%d]: command is required", i)
		}
		add(s.Bots, &handler{kind: "slash", match: cmd, name: "slash." + statName(cmd), urls: urls, slash: s})
	}
	for i := range h.InteractiveComponentHandlers {
		c := &h.InteractiveComponentHandlers[i]
		urls, err := callbackURLs(c.Callbacks)
		if err != nil {
			return nil, fmt.Errorf("interactive_component_handlers[%d]: %w", i, err)
		}
		if c.CallbackID == "" {
			return nil, fmt.Errorf("interactive_component_handlers[%d]: callback_id is required", i)
		}
		add(c.Bots, &handler{kind: "interactive", match: c.CallbackID, name: "interactive." + statName(c.CallbackID), urls: urls, component: c})
	}
	return out, nil
}
