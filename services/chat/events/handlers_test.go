package events

import (
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"go.yaml.in/yaml/v3"
)

const handlersYAML = `
message_handlers:
  - match: "ping"
    match_type: "command"
    match_replies: true
    bots: {acme: [pingbot]}
    callbacks:
      - module: "omnibot.callbacks.network_callbacks:http_callback"
        kwargs: {request_kwargs: {url: "http://127.0.0.1:1/m", timeout: 5}}
interactive_component_handlers:
  - callback_id: "modal"
    bots: {acme: [pingbot]}
    callbacks:
      - module: "omnibot.callbacks.network_callbacks:http_callback"
        synchronus: true
        kwargs: {request_kwargs: {url: "http://127.0.0.1:1/a"}}
      - module: "omnibot.callbacks.network_callbacks:http_callback"
        synchronous: true
        kwargs: {request_kwargs: {url: "http://127.0.0.1:1/b"}}
  - callback_id: "approve"
    synchronous: true
    description: "gantry's earlier spelling"
    bots: {acme: [pingbot]}
    callbacks:
      - module: "omnibot.callbacks.network_callbacks:http_callback"
        kwargs: {request_kwargs: {url: "http://127.0.0.1:1/c"}}
      - module: "omnibot.callbacks.network_callbacks:http_callback"
        kwargs: {request_kwargs: {url: "http://127.0.0.1:1/d"}}
slash_command_handlers:
  - command: "/echo"
    bots: {acme: [pingbot]}
    callbacks:
      - module: "omnibot.callbacks.message_callbacks:help_callback"
`

// TestHandlersSynchronousAndUnknownKeys: synchronous is read on each callback (the first one set is
// called) and on the handler as an alias (its first callback); keys neither Omnibot nor gantry
// reads are warned about at start, and the file still loads.
func TestHandlersSynchronousAndUnknownKeys(t *testing.T) {
	var h Handlers
	if err := yaml.Unmarshal([]byte(handlersYAML), &h); err != nil {
		t.Fatal(err)
	}
	if err := CheckHandlers(h); err != nil {
		t.Fatalf("a file with unknown keys must load: %v", err)
	}
	core, logs := observer.New(zap.WarnLevel)
	in, err := New(DefaultConfig(), []Bot{{Team: "acme", TeamID: "T0FAKE001", Name: "pingbot", AppID: testAppID, SigningSecret: "s"}}, h, nil, nil, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	b := in.bots[testAppID]
	for _, tc := range []struct {
		id, url string
	}{{"modal", "http://127.0.0.1:1/b"}, {"approve", "http://127.0.0.1:1/c"}} {
		hd := in.findHandler(b, "interactive", tc.id)
		if hd.sync < 0 || hd.urls[hd.sync] != tc.url {
			t.Errorf("%s: synchronous callback %d of %v, want %s", tc.id, hd.sync, hd.urls, tc.url)
		}
	}
	if hd := in.findHandler(b, "slash", "echo"); hd.sync != -1 || hd.urls[0] != helpURL {
		t.Errorf("/echo: %+v, want the built-in help callback, not synchronous", hd)
	}
	want := []string{
		`handlers: message_handlers[0]: unknown key "match_replies" is ignored`,
		`handlers: message_handlers[0].callbacks[0].kwargs.request_kwargs: "timeout" is not passed to the request (gantry sends the payload as JSON with -chat-inbound-callback-timeout)`,
		`handlers: interactive_component_handlers[0].callbacks[0]: unknown key "synchronus" is ignored`,
	}
	var got []string
	for _, e := range logs.All() {
		if e.Message != "bot has no signing secret" {
			got = append(got, e.Message)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings at start:\n%q\nwant\n%q", got, want)
	}
}
