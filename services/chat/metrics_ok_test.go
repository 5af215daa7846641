package chat

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestSlackOK: the ok of an answer is read from its first bytes when Slack's usual prefix says it,
// by parsing otherwise, and the client still reads the whole body.
func TestSlackOK(t *testing.T) {
	long := `{"members":[` + strings.Repeat(`"x",`, maxSlackStatsBody/4) + `"y"],"ok":false}`
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"ok":true,"channel":"C1","ts":"1.2"}`, true},
		{`{"ok":true}`, true},
		{`{"ok":false,"error":"channel_not_found"}`, false},
		{`{"ok":false}`, false},
		{`{ "ok": true }`, true},
		{`{"channel":"C1","ok":false}`, false},
		{`{"channel":"C1","ok":true}`, true},
		{`{}`, false},
		{``, false},
		{`{"ok":1}`, false},
		{`not json at all`, false},
		{long, true}, // "ok" beyond the bytes read: counted ok
	} {
		resp := &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(tc.body))}
		if got := slackOK(resp); got != tc.ok {
			t.Errorf("%.60q: ok %v, want %v", tc.body, got, tc.ok)
		}
		rest, err := io.ReadAll(resp.Body)
		if err != nil || string(rest) != tc.body {
			t.Errorf("%.60q: the client reads %.60q (%v)", tc.body, rest, err)
		}
	}
}
