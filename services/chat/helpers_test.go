package chat

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/chat/slacktest"
)

// Tokens of the test bots. The fake accepts any token and records which one a call used.
const (
	botToken  = "xoxb-test-bot"
	userToken = "xoxp-test-user"
	bot2Token = "xoxb-test-bot2"
)

const testFile = `
teams:
  acme: T0FAKE001
bots:
  acme:
    pingbot: A0PING001
    otherbot: A0OTHER01
    notoken: A0NOTOKEN
primary_bot:
  acme: pingbot
authorization:
  checks:
    - module: "omnibot.authnz:allowed_paths"
      kwargs: {paths: ["/api/v1/chat/", "/api/v2/chat/"]}
`

var testCreds = Credentials(func(name string) string {
	return map[string]string{
		"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0PING001": botToken,
		"CREDENTIALS_SLACK_OAUTH_TOKEN_A0PING001":     userToken,
		"CREDENTIALS_SLACK_OAUTH_BOT_TOKEN_A0OTHER01": bot2Token,
	}[name]
})

// newTestService returns a service against the fake; mutate may change the configuration.
func newTestService(t testing.TB, f *slacktest.Server, mutate func(*Config)) *Service {
	t.Helper()
	fc, err := ParseFileConfig([]byte(testFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SlackAPIURL = f.APIURL()
	cfg.SlackAttemptTimeout = 5 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := NewService(cfg, fc, testCreds, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
