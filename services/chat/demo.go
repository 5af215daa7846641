package chat

import (
	"strings"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/services/chat/slackfake"
)

// The demo workspace's people and conversations. Its ids look like Slack's so that get_channel by id
// and omnibot_parse work on them as on a real workspace.
var (
	demoUsers = []slackfake.User{
		{ID: "U0ALICE01", Name: "alice", DisplayName: "Alice A", Email: "alice@example.com"},
		{ID: "U0BOB0001", Name: "bob", DisplayName: "Bob B", Email: "bob@example.com"},
		{ID: "U0CAROL01", Name: "carol", DisplayName: "Carol C", Email: "carol@example.com"},
	}
	demoChannels = []slackfake.Channel{
		{ID: "C0GENERAL", Name: "general", Kind: "public_channel", Members: []string{"U0ALICE01", "U0BOB0001", "U0CAROL01"}, Topic: "everyone", Purpose: "company-wide announcements"},
		{ID: "C0ALERTS1", Name: "alerts", Kind: "public_channel", Members: []string{"U0ALICE01", "U0BOB0001"}, Topic: "pages and deploys"},
		{ID: "G0OPS0001", Name: "ops", Kind: "private_channel", Members: []string{"U0ALICE01"}},
		{ID: "D0ALICE01", Kind: "im", User: "U0ALICE01"},
	}
)

// demoTokenPrefix starts the made-up bot tokens of the demo workspace, which accepts any token.
const demoTokenPrefix = "xoxb-demo-"

// demoWorkspace is a Slack workspace held in memory and served on a loopback port, so chat can be
// tried without a Slack app (-chat-demo).
type demoWorkspace struct {
	fake *slackfake.Server
}

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

// startDemoWorkspace serves the demo workspace for the teams of fc; every posted message is kept
// and logged (its channel and text; tokens never are).
func startDemoWorkspace(fc *FileConfig, logger *zap.Logger) *demoWorkspace {
	fake := slackfake.New()
	fake.BotName = "gantry-demo"
	if len(fc.Teams) == 1 {
		for _, id := range fc.Teams {
			fake.TeamID = id
		}
	}
	for _, u := range demoUsers {
		fake.AddUser(u)
	}
	for _, c := range demoChannels {
		fake.AddChannel(c)
	}
	fake.OnPost = func(m slackfake.Message) {
		logger.Info("demo workspace: message posted", zap.String("channel", m.Channel), zap.String("ts", m.TS), zap.String("text", m.Text))
	}
	emails := make([]string, len(demoUsers))
	for i, u := range demoUsers {
		emails[i] = u.Email
	}
	logger.Info("chat uses the built-in demo Slack workspace (-chat-demo, no Slack token configured): messages stay in memory",
		zap.String("slack_api", fake.APIURL()), zap.Strings("users", emails), zap.Strings("channels", []string{"#general", "#alerts", "#ops (private)"}))
	return &demoWorkspace{fake: fake}
}

// tokens gives every configured bot a made-up token for the demo workspace, by variable name.
func (d *demoWorkspace) tokens(fc *FileConfig) map[string]string {
	tokens := map[string]string{}
	for _, bots := range fc.Bots {
		for _, app := range bots {
			tokens[envBotToken+strings.ToUpper(app)] = demoTokenPrefix + strings.ToLower(app)
		}
	}
	return tokens
}

// close stops the workspace; a nil workspace (no demo) has nothing to stop.
func (d *demoWorkspace) close() {
	if d != nil {
		d.fake.Close()
	}
}
