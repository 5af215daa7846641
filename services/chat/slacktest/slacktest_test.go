package slacktest

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func post(t *testing.T, s *Server, method string, form url.Values) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.APIURL()+method, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer xoxb-test")
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestAnswersPutOKFirst: Slack writes "ok" as the first key of every answer, and chat's readers
// take their quick path on it; the fake must answer as Slack does or it measures the slow one.
func TestAnswersPutOKFirst(t *testing.T) {
	s := New()
	t.Cleanup(s.Close)
	s.AddChannel(Channel{ID: "C0GENERAL", Name: "general", Kind: "public_channel"})
	for _, tc := range []struct{ method, prefix string }{
		{"chat.postMessage", `{"ok":true,"channel":"C0GENERAL","message":{`},
		{"reactions.add", `{"ok":true}`},
		{"conversations.history", `{"ok":true,"has_more":false,"messages":[`},
		{"no.such.method", `{"ok":false,"error":"unknown_method"`},
	} {
		if got := post(t, s, tc.method, url.Values{"channel": {"C0GENERAL"}, "text": {"hi"}}); !strings.HasPrefix(got, tc.prefix) {
			t.Errorf("%s answered %q, want it to start %q", tc.method, got, tc.prefix)
		}
	}
}

// TestDemoRetainsTheNewest: the demo workspace keeps a bounded history, the newest entries.
func TestDemoRetainsTheNewest(t *testing.T) {
	s := NewDemo(map[string]string{"example-team": "T0DEMO001"}, zap.NewNop())
	t.Cleanup(s.Close)
	s.Retain = 3 // before the first call, as the field says
	for i := range 10 {
		post(t, s, "chat.postMessage", url.Values{"channel": {"C0GENERAL"}, "text": {"m" + string(rune('0'+i))}})
	}
	msgs := s.Messages("C0GENERAL")
	if len(msgs) < 3 || len(msgs) > 6 || msgs[len(msgs)-1].Text != "m9" {
		t.Fatalf("kept %d messages ending %+v; want between 3 and 6 (trimmed at twice the bound), the newest last", len(msgs), msgs[len(msgs)-1])
	}
	if n := len(s.Requests("")); n < 3 || n > 6 {
		t.Fatalf("kept %d requests, want between 3 and 6", n)
	}
}
