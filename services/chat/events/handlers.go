package events

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Handlers is Omnibot's handlers section, read unchanged from its configuration file.
type Handlers struct {
	MessageHandlers              []MessageHandler     `yaml:"message_handlers"`
	SlashCommandHandlers         []SlashHandler       `yaml:"slash_command_handlers"`
	InteractiveComponentHandlers []InteractiveHandler `yaml:"interactive_component_handlers"`

	// HelpCallback and DefaultToHelp are Omnibot's top-level help_callback and default_to_help,
	// copied here by the configuration file's parser: what answers a message directed at a bot
	// that no handler matched. HelpCallback's callback wins; else, unless DefaultToHelp is false
	// (Omnibot's default is true), Omnibot's built-in help_callback lists the bot's command and
	// regex handlers.
	HelpCallback  *HelpCallback `yaml:"-"`
	DefaultToHelp *bool         `yaml:"-"`
}

// HelpCallback is Omnibot's help_callback setting: {callback: {module, kwargs}}.
type HelpCallback struct {
	Callback Callback       `yaml:"callback"`
	Extra    map[string]any `yaml:",inline"`
}

// Callback is one of a handler's callbacks. Only Omnibot's HTTP callback is supported
// (omnibot.callbacks.network_callbacks:http_callback, or the older
// omnibot.handlers.network_handlers:http_handler): its URL is kwargs.request_kwargs.url (or path).
//
// Omnibot's built-in help callback (omnibot.callbacks.message_callbacks:help_callback, or the older
// omnibot.handlers.message_handlers:help_handler) is answered by gantry itself.
type Callback struct {
	Module string `yaml:"module"`
	Kwargs struct {
		RequestKwargs map[string]any `yaml:"request_kwargs"`
		ClientKwargs  map[string]any `yaml:"client_kwargs"`
		Extra         map[string]any `yaml:",inline"`
	} `yaml:"kwargs"`
	// Synchronous, on an interactive component's callback, calls it while Slack waits and answers
	// Slack with its reply (within -chat-inbound-sync-timeout) instead of queueing the component,
	// as Omnibot reads it (c.get("synchronous") in omnibot/routes/api.py). The first such callback
	// is the one called.
	Synchronous bool           `yaml:"synchronous"`
	Extra       map[string]any `yaml:",inline"`
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
	MatchReply bool `yaml:"match_reply"`
	// RetryOnTimeout (gantry's) sends a call that timed out again, as a call the backend never got
	// is: for a backend that acts at most once per X-Gantry-Delivery-Id. Off (the default), a call
	// that may have reached the backend is made once.
	RetryOnTimeout bool                `yaml:"retry_on_timeout"`
	Description    string              `yaml:"description"`
	Bots           map[string][]string `yaml:"bots"`
	Callbacks      []Callback          `yaml:"callbacks"`
	Extra          map[string]any      `yaml:",inline"`
}

// SlashHandler handles one slash command.
type SlashHandler struct {
	Command        string         `yaml:"command"`
	ResponseType   string         `yaml:"response_type"`
	CannedResponse string         `yaml:"canned_response"`
	Dialog         map[string]any `yaml:"dialog"`
	// RetryOnTimeout (gantry's) sends a call that timed out again, as a call the backend never got
	// is: for a backend that acts at most once per X-Gantry-Delivery-Id. Off (the default), a call
	// that may have reached the backend is made once.
	RetryOnTimeout bool                `yaml:"retry_on_timeout"`
	Description    string              `yaml:"description"`
	Bots           map[string][]string `yaml:"bots"`
	Callbacks      []Callback          `yaml:"callbacks"`
	Extra          map[string]any      `yaml:",inline"`
}

// InteractiveHandler handles the interactive components of one callback_id.
type InteractiveHandler struct {
	CallbackID        string `yaml:"callback_id"`
	ResponseType      string `yaml:"response_type"`
	CannedResponse    string `yaml:"canned_response"`
	NoMessageResponse bool   `yaml:"no_message_response"`
	// RetryOnTimeout (gantry's) sends a call that timed out again, as a call the backend never got
	// is: for a backend that acts at most once per X-Gantry-Delivery-Id. Off (the default), a call
	// that may have reached the backend is made once.
	RetryOnTimeout bool `yaml:"retry_on_timeout"`
	// Synchronous is gantry's earlier spelling of a callback's synchronous, kept as an alias: here
	// it makes the handler's first callback synchronous.
	Synchronous bool                `yaml:"synchronous"`
	Dialog      map[string]any      `yaml:"dialog"`
	Description string              `yaml:"description"`
	Bots        map[string][]string `yaml:"bots"`
	Callbacks   []Callback          `yaml:"callbacks"`
	Extra       map[string]any      `yaml:",inline"`
}

// compiled handlers, per team and bot name.
type handler struct {
	name    string // for stats and logs: kind and match
	kind    string // command, regex, reaction, slash, interactive
	match   string
	re      *regexp.Regexp
	absence bool
	mention bool
	reply   bool
	urls    []string
	sync    int // index in urls of the synchronous callback, -1 for none
	// retryOnTimeout is the handler's retry_on_timeout.
	retryOnTimeout bool
	msg            *MessageHandler
	slash          *SlashHandler
	component      *InteractiveHandler
}

// helpURL stands, among a handler's callback URLs, for Omnibot's built-in help callback, which
// gantry answers itself (post never sends it anywhere).
const helpURL = "gantry-internal:help_callback"

// isHelpModule reports Omnibot's built-in help callback, in its current and older spelling.
func isHelpModule(module string) bool {
	return module == "omnibot.callbacks.message_callbacks:help_callback" || module == "omnibot.handlers.message_handlers:help_handler"
}

// callbackURLs is the URL of each callback and the index of the first synchronous one (-1: none).
func callbackURLs(cbs []Callback) ([]string, int, error) {
	var out []string
	sync := -1
	for i, cb := range cbs {
		if cb.Synchronous && sync < 0 {
			sync = i
		}
		if isHelpModule(cb.Module) {
			out = append(out, helpURL)
			continue
		}
		fn := cb.Module
		if j := strings.LastIndexByte(fn, ':'); j >= 0 {
			fn = fn[j+1:]
		}
		if fn != "http_callback" && fn != "http_handler" {
			return nil, -1, fmt.Errorf("callbacks[%d]: module %q is not supported (gantry calls backends with http_callback, and answers Omnibot's help_callback itself)", i, cb.Module)
		}
		raw, _ := cb.Kwargs.RequestKwargs["url"].(string)
		if raw == "" {
			raw, _ = cb.Kwargs.RequestKwargs["path"].(string)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, -1, fmt.Errorf("callbacks[%d]: kwargs.request_kwargs.url must be an http(s) URL", i)
		}
		out = append(out, raw)
	}
	return out, sync, nil
}

// unknownKeys lists, as warnings, the keys of a handler and its callbacks that neither Omnibot nor
// gantry reads: a misspelt key (synchronus, match_replies) would otherwise change what the handler
// does without a word. They are warnings, not errors, so an Omnibot file that carries keys Omnibot
// itself ignores still loads.
func unknownKeys(where string, extra map[string]any, cbs []Callback) []string {
	var out []string
	add := func(at string, m map[string]any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, fmt.Sprintf("%s: unknown key %q is ignored", at, k))
		}
	}
	add(where, extra)
	for i, cb := range cbs {
		at := fmt.Sprintf("%s.callbacks[%d]", where, i)
		add(at, cb.Extra)
		if isHelpModule(cb.Module) {
			add(at+".kwargs", cb.Kwargs.Extra)
			if cb.Kwargs.RequestKwargs != nil || cb.Kwargs.ClientKwargs != nil {
				out = append(out, fmt.Sprintf("%s.kwargs: the help callback takes no arguments; they are ignored", at))
			}
			continue
		}
		add(at+".kwargs", cb.Kwargs.Extra)
		for _, k := range slices.Sorted(maps.Keys(cb.Kwargs.RequestKwargs)) {
			if k != "url" && k != "path" {
				out = append(out, fmt.Sprintf("%s.kwargs.request_kwargs: %q is not passed to the request (gantry sends the payload as JSON with -chat-inbound-callback-timeout)", at, k))
			}
		}
	}
	return out
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
	_, _, err := compileHandlers(h)
	return err
}

// compileHandlers checks the handlers section and groups it by "team/bot"; the warnings name what
// it ignores.
func compileHandlers(h Handlers) (map[string][]*handler, []string, error) {
	out := map[string][]*handler{}
	var warnings []string
	add := func(bots map[string][]string, hd *handler) {
		for team, names := range bots {
			for _, n := range names {
				out[team+"/"+n] = append(out[team+"/"+n], hd)
			}
		}
	}
	for i := range h.MessageHandlers {
		m := &h.MessageHandlers[i]
		urls, _, err := callbackURLs(m.Callbacks)
		if err != nil {
			return nil, nil, fmt.Errorf("message_handlers[%d]: %w", i, err)
		}
		warnings = append(warnings, unknownKeys(fmt.Sprintf("message_handlers[%d]", i), m.Extra, m.Callbacks)...)
		hd := &handler{kind: m.MatchType, match: m.Match, absence: m.RegexType == "absence", mention: m.MatchMention, reply: m.MatchReply, urls: urls, sync: -1, msg: m, retryOnTimeout: m.RetryOnTimeout}
		switch m.MatchType {
		case "command":
		case "regex", "reaction":
			pat := m.Match
			if m.MatchType == "reaction" {
				pat = `^(?:` + pat + `)$` // Omnibot's re.fullmatch
			}
			if hd.re, err = regexp.Compile(pat); err != nil {
				return nil, nil, fmt.Errorf("message_handlers[%d]: match: %w", i, err)
			}
		default:
			return nil, nil, fmt.Errorf("message_handlers[%d]: match_type %q is not command, regex or reaction", i, m.MatchType)
		}
		hd.name = m.MatchType + "." + statName(m.Match)
		add(m.Bots, hd)
	}
	for i := range h.SlashCommandHandlers {
		s := &h.SlashCommandHandlers[i]
		urls, _, err := callbackURLs(s.Callbacks)
		if err != nil {
			return nil, nil, fmt.Errorf("slash_command_handlers[%d]: %w", i, err)
		}
		warnings = append(warnings, unknownKeys(fmt.Sprintf("slash_command_handlers[%d]", i), s.Extra, s.Callbacks)...)
		cmd := strings.TrimPrefix(s.Command, "/")
		if cmd == "" {
			return nil, nil, fmt.Errorf("slash_command_handlers[%d]: command is required", i)
		}
		add(s.Bots, &handler{kind: "slash", match: cmd, name: "slash." + statName(cmd), urls: urls, sync: -1, slash: s, retryOnTimeout: s.RetryOnTimeout})
	}
	for i := range h.InteractiveComponentHandlers {
		c := &h.InteractiveComponentHandlers[i]
		urls, sync, err := callbackURLs(c.Callbacks)
		if err != nil {
			return nil, nil, fmt.Errorf("interactive_component_handlers[%d]: %w", i, err)
		}
		if sync < 0 && c.Synchronous && len(urls) > 0 {
			sync = 0 // gantry's handler-level spelling: the first callback
		}
		warnings = append(warnings, unknownKeys(fmt.Sprintf("interactive_component_handlers[%d]", i), c.Extra, c.Callbacks)...)
		if c.CallbackID == "" {
			return nil, nil, fmt.Errorf("interactive_component_handlers[%d]: callback_id is required", i)
		}
		add(c.Bots, &handler{kind: "interactive", match: c.CallbackID, name: "interactive." + statName(c.CallbackID), urls: urls, sync: sync, component: c, retryOnTimeout: c.RetryOnTimeout})
	}
	if _, err := compileHelp(h); err != nil {
		return nil, nil, err
	}
	if h.HelpCallback != nil {
		warnings = append(warnings, unknownKeys("help_callback", h.HelpCallback.Extra, []Callback{h.HelpCallback.Callback})...)
	}
	return out, warnings, nil
}
