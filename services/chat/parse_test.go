package chat

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// mapLookup is a fixed set of channels and users by name.
type mapLookup struct{ channels, users map[string][2]string }

func (m mapLookup) channelMention(name string) (string, string, bool) {
	v, ok := m.channels[name]
	return v[0], v[1], ok
}

func (m mapLookup) userMention(name string) (string, string, bool) {
	v, ok := m.users[name]
	return v[0], v[1], ok
}

var testLookup = mapLookup{
	channels: map[string][2]string{"general": {"C123", "general"}, "dev-ops": {"C456", "dev-ops"}, "café": {"C789", "café"}},
	users:    map[string][2]string{"alice": {"U1", "Alice A"}, "bob_2": {"U2", "bob_2"}, "here": {"U3", "here"}},
}

func TestParseText(t *testing.T) {
	all := []string{"users", "channels", "specials"}
	tests := []struct {
		name, in string
		kinds    []string
		want     string
	}{
		{"omnibot example", "@alice see #general and use @here", all, "<@U1|Alice A> see <#C123|general> and use <!here|here>"},
		{"specials anywhere", "x@here.com @channels @everyone", []string{"specials"}, "x<!here|here>.com <!channel|channel>s <!everyone|everyone>"},
		{"order is fixed: specials before users", "@here", []string{"users", "specials"}, "<!here|here>"},
		{"without specials @here is a user name", "@here", []string{"users"}, "<@U3|here>"},
		{"only at start or after a space", "a#general b\t#general (#general", []string{"channels"}, "a#general b\t#general (#general"},
		{"unknown names left as typed", "#random @carol", all, "#random @carol"},
		{"name with dash and underscore", "#dev-ops @bob_2!", all, "<#C456|dev-ops> <@U2|bob_2>!"},
		{"longer name is another channel", "#general-x", []string{"channels"}, "#general-x"},
		{"unicode names", "#café ok", []string{"channels"}, "<#C789|café> ok"},
		{"kind not requested", "#general @alice", []string{"specials"}, "#general @alice"},
		{"unknown kind ignored", "#general", []string{"emoji"}, "#general"},
		{"bare sigils", "# @ #", all, "# @ #"},
		{"repeated mention", "@alice @alice", all, "<@U1|Alice A> <@U1|Alice A>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseText(tt.in, tt.kinds, testLookup); got != tt.want {
				t.Errorf("parseText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestApplyParse(t *testing.T) {
	kwargs := map[string]any{"text": "@alice", "channel": "C1"}
	if err := applyParse(kwargs, map[string][]string{"text": {"users"}}, testLookup); err != nil || kwargs["text"] != "<@U1|Alice A>" {
		t.Fatalf("got %v, %v", kwargs, err)
	}
	for _, tt := range []struct {
		kwargs map[string]any
		spec   map[string][]string
		want   string
	}{
		{map[string]any{}, map[string][]string{"text": {"users"}}, "not in kwargs"},
		{map[string]any{"text": 3.0}, map[string][]string{"text": {"users"}}, "not a string"},
	} {
		err := applyParse(tt.kwargs, tt.spec, testLookup)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errorsIsBadRequest(err) {
			t.Errorf("applyParse(%v) = %v, want a bad request %q", tt.kwargs, err, tt.want)
		}
	}
	for _, raw := range []any{"x", map[string]any{"text": "users"}, map[string]any{"text": []any{1.0}}} {
		if _, err := parseSpec(raw); !errorsIsBadRequest(err) {
			t.Errorf("parseSpec(%v) = %v, want a bad request", raw, err)
		}
	}
}

func errorsIsBadRequest(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Kind == ErrBadRequest
}

// FuzzParseText checks that parsing never panics, keeps valid UTF-8 valid, and leaves text without
// sigils alone. The seed corpus runs with the normal tests.
func FuzzParseText(f *testing.F) {
	for _, s := range []string{"@alice see #general and use @here", "", "#", "@", " #general-x @bob_2", "\xff#general", "#café @here@channel"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := parseText(in, []string{"specials", "channels", "users"}, testLookup)
		if utf8.ValidString(in) && !utf8.ValidString(out) {
			t.Fatalf("parseText(%q) = %q is not valid UTF-8", in, out)
		}
		if !strings.ContainsAny(in, "#@") && out != in {
			t.Fatalf("parseText(%q) = %q changed text without mentions", in, out)
		}
	})
}

// BenchmarkParseText parses a 4 KB message with 50 mentions (channels, users and specials).
func BenchmarkParseText(b *testing.B) {
	var sb strings.Builder
	mentions := []string{"@alice", "#general", "@here", "@bob_2", "#dev-ops", "@carol", "#random"}
	for i := 0; sb.Len() < 4096; i++ {
		if i < 50 {
			fmt.Fprintf(&sb, "%s please look at item %d of the plan. ", mentions[i%len(mentions)], i)
		} else {
			sb.WriteString("plain words without any mention at all here. ")
		}
	}
	text := sb.String()[:4096]
	kinds := []string{"specials", "channels", "users"}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		parseText(text, kinds, testLookup)
	}
}
