package chat

import "strings"

// DemoWorkspace is the Slack workspace of -chat-demo, held in memory and served on a loopback port so
// chat can be tried without a Slack app (internal/stack serves slacktest.NewDemo). It accepts any
// token.
type DemoWorkspace interface {
	// APIURL is the base URL of its Slack Web API.
	APIURL() string
	// Close stops it.
	Close()
}

// demoTokenPrefix starts the made-up bot tokens chat sends the demo workspace.
const demoTokenPrefix = "xoxb-demo-"

// hasSlackToken reports whether any configured bot has a real token; then -chat-demo stays off.
func hasSlackToken(fc *FileConfig, creds Credentials) bool {
	for _, bots := range fc.Bots {
		for _, app := range bots {
			if creds.tokensFor(app).usable() {
				return true
			}
		}
	}
	return false
}

// demoTokens gives every configured bot a made-up token for the demo workspace, by variable name.
func demoTokens(fc *FileConfig) map[string]string {
	tokens := map[string]string{}
	for _, bots := range fc.Bots {
		for _, app := range bots {
			tokens[envBotToken+strings.ToUpper(app)] = demoTokenPrefix + strings.ToLower(app)
		}
	}
	return tokens
}
