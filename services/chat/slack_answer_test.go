package chat

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"
)

// TestPostOnceReadsSlackAnswers holds the one-call reader to what it must decide from Slack's body,
// on the quick path (an answer starting {"ok":true) and the decoding one alike: truncated or foreign
// bodies are bad answers, never passed through.
func TestPostOnceReadsSlackAnswers(t *testing.T) {
	for _, tc := range []struct {
		body      string
		ok        bool
		slackErr  string
		badAnswer bool
	}{
		{body: `{"ok":true,"channel":"C1","ts":"1.2"}`, ok: true},
		{body: `{"ok":true}`, ok: true},
		{body: `{ "ok": true }`, ok: true},
		{body: `{"channel":"C1","ok":true}`, ok: true},
		{body: `{"ok":false,"error":"channel_not_found"}`, slackErr: "channel_not_found"},
		{body: `{"ok":true,"channel":`, badAnswer: true},
		{body: `{"ok":trueish}`, badAnswer: true},
		{body: `{"ok":true} trailing`, badAnswer: true},
		{body: `<html>502 Bad Gateway</html>`, badAnswer: true},
		{body: `{"channel":"C1"}`, badAnswer: true},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(tc.body))
		}))
		c := &slackClient{http: srv.Client(), baseURL: srv.URL + "/", logger: zap.NewNop()}
		res, _, err := c.postOnce(context.Background(), "chat.postMessage", "channel=C1", "xoxb-test")
		srv.Close()
		if tc.badAnswer {
			if !errors.Is(err, errBadSlackAnswer) {
				t.Errorf("%q: %+v, %v; want a bad answer", tc.body, res, err)
			}
			continue
		}
		if err != nil || res.OK != tc.ok || res.Error != tc.slackErr || string(res.Body) != tc.body {
			t.Errorf("%q: ok %v error %q body %q (%v); want ok %v error %q and the body as it came", tc.body, res.OK, res.Error, res.Body, err, tc.ok, tc.slackErr)
		}
	}
}
