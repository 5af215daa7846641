package chat

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The things omnibot_parse can resolve in a text argument.
const (
	parseSpecials = "specials"
	parseChannels = "channels"
	parseUsers    = "users"
)

// specialsReplacer turns special mentions into Slack markup wherever they appear, as Omnibot does
// (no word boundary). @everyone is included; Omnibot forgot it.
var specialsReplacer = strings.NewReplacer(
	"@here", "<!here|here>",
	"@channel", "<!channel|channel>",
	"@everyone", "<!everyone|everyone>",
)

// mentionLookup resolves names for omnibot_parse. Lookups are cache-only, like Omnibot's Redis-only
// ones: parsing never calls Slack.
type mentionLookup interface {
	// channelMention returns the id and stored name of a channel called name.
	channelMention(name string) (id, label string, ok bool)
	// userMention returns the id and display name (or name) of a user called name.
	userMention(name string) (id, label string, ok bool)
}

// parseText applies the requested kinds in Omnibot's fixed order (specials, channels, users),
// whatever order the list gives. Unknown kinds are ignored, unknown names left as typed.
func parseText(text string, kinds []string, look mentionLookup) string {
	var specials, channels, users bool
	for _, k := range kinds {
		switch k {
		case parseSpecials:
			specials = true
		case parseChannels:
			channels = true
		case parseUsers:
			users = true
		}
	}
	if specials {
		text = specialsReplacer.Replace(text)
	}
	if channels {
		text = replaceMentions(text, '#', func(name string) (string, bool) {
			id, label, ok := look.channelMention(name)
			return "<#" + id + "|" + label + ">", ok
		})
	}
	if users {
		text = replaceMentions(text, '@', func(name string) (string, bool) {
			id, label, ok := look.userMention(name)
			return "<@" + id + "|" + label + ">", ok
		})
	}
	return text
}

// isNameRune is Python's Unicode \w plus the dash, the characters of Omnibot's (#|@)[\w\-_]+.
func isNameRune(r rune) bool {
	return r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// replaceMentions replaces sigil+name where it starts the text or follows a space (Omnibot's
// (^#name| #name) candidates) and resolve knows the name. Unlike Omnibot's global substring
// replacement, only the mention itself is replaced, so "#general-x" or "a#general" never turn into
// half-markup. One pass, no regexp: it runs on every parsed message.
func replaceMentions(text string, sigil byte, resolve func(name string) (string, bool)) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(text); i++ {
		if text[i] != sigil || (i > 0 && text[i-1] != ' ') {
			continue
		}
		j := i + 1
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if !isNameRune(r) {
				break
			}
			j += size
		}
		if j == i+1 {
			continue
		}
		repl, ok := resolve(text[i+1 : j])
		if !ok {
			i = j - 1
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(text) + 64)
		}
		b.WriteString(text[last:i])
		b.WriteString(repl)
		last = j
		i = j - 1
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// parseSpec reads omnibot_parse: a map of kwarg name to a list of kinds.
func parseSpec(raw any) (map[string][]string, error) {
	if raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, newError(ErrBadRequest, "omnibot_parse must be an object mapping a kwarg name to a list of: specials, channels, users")
	}
	out := make(map[string][]string, len(m))
	for field, v := range m {
		list, ok := v.([]any)
		if !ok {
			return nil, newError(ErrBadRequest, fmt.Sprintf("omnibot_parse.%s must be a list of: specials, channels, users", field))
		}
		for _, k := range list {
			s, ok := k.(string)
			if !ok {
				return nil, newError(ErrBadRequest, fmt.Sprintf("omnibot_parse.%s must be a list of strings", field))
			}
			out[field] = append(out[field], s)
		}
	}
	return out, nil
}

// applyParse resolves mentions in the kwargs named by spec. A named kwarg that is missing, or not a
// string, is the caller's mistake: 400 (Omnibot answered 500).
func applyParse(kwargs map[string]any, spec map[string][]string, look mentionLookup) error {
	for _, field := range sortedKeys(spec) {
		v, ok := kwargs[field]
		if !ok {
			return newError(ErrBadRequest, fmt.Sprintf("omnibot_parse names kwargs.%s, which is not in kwargs", field))
		}
		s, ok := v.(string)
		if !ok {
			return newError(ErrBadRequest, fmt.Sprintf("omnibot_parse names kwargs.%s, which is not a string", field))
		}
		kwargs[field] = parseText(s, spec[field], look)
	}
	return nil
}
