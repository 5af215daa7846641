package slacktest

import (
	"encoding/json"

	"go.uber.org/zap"
)

// The demo workspace's people and conversations. Its ids look like Slack's so that get_channel by id
// and omnibot_parse work on them as on a real workspace.
var (
	demoUsers = []User{
		{ID: "U0ALICE01", Name: "alice", DisplayName: "Alice A", Email: "alice@example.com", EmailConfirmed: new(true)},
		{ID: "U0BOB0001", Name: "bob", DisplayName: "Bob B", Email: "bob@example.com", EmailConfirmed: new(true)},
		{ID: "U0CAROL01", Name: "carol", DisplayName: "Carol C", Email: "carol@example.com", EmailConfirmed: new(true)},
	}
	demoChannels = []Channel{
		{ID: "C0GENERAL", Name: "general", Kind: "public_channel", Members: []string{"U0ALICE01", "U0BOB0001", "U0CAROL01"}, Topic: "everyone", Purpose: "company-wide announcements"},
		{ID: "C0ALERTS1", Name: "alerts", Kind: "public_channel", Members: []string{"U0ALICE01", "U0BOB0001"}, Topic: "pages and deploys"},
		{ID: "G0OPS0001", Name: "ops", Kind: "private_channel", Members: []string{"U0ALICE01"}},
		{ID: "D0ALICE01", Kind: "im", User: "U0ALICE01"},
	}
)

// demoRetain is how many requests, and messages per channel, the demo workspace keeps: enough to
// read back what a try posted, bounded so a long-running demo does not grow without end.
const demoRetain = 1000

// NewDemo serves the demo workspace of -chat-demo: a Slack workspace held in memory on a loopback
// port, so chat can be tried without a Slack app. teams are the configured teams (name → Slack id);
// with exactly one, the workspace is that team. The newest demoRetain posted messages of each channel
// are kept, and every one is logged, as posted and as each chat.update leaves it: its channel, ts and
// text, and its buttons (block_id/action_id=value), which a request signed by hand can press
// (docs/chat-inbound.md); tokens never are. Close stops it.
func NewDemo(teams map[string]string, logger *zap.Logger) *Server {
	fake := New()
	fake.BotName = "gantry-demo"
	fake.Retain = demoRetain
	if len(teams) == 1 {
		for _, id := range teams {
			fake.TeamID = id
		}
	}
	for _, u := range demoUsers {
		fake.AddUser(u)
	}
	for _, c := range demoChannels {
		fake.AddChannel(c)
	}
	fake.OnPost = func(m Message) {
		logger.Info("demo workspace: message posted", demoMessageFields(m)...)
	}
	fake.OnUpdate = func(m Message) {
		logger.Info("demo workspace: message updated", demoMessageFields(m)...)
	}
	emails := make([]string, len(demoUsers))
	for i, u := range demoUsers {
		emails[i] = u.Email
	}
	logger.Info("chat uses the built-in demo Slack workspace (-chat-demo, no Slack token configured): messages stay in memory",
		zap.String("slack_api", fake.APIURL()), zap.Strings("users", emails), zap.Strings("channels", []string{"#general", "#alerts", "#ops (private)"}))
	return fake
}

// demoMessageFields are what the demo logs of a message: where it is, its text, and its buttons when
// it has any.
func demoMessageFields(m Message) []zap.Field {
	fields := []zap.Field{zap.String("channel", m.Channel), zap.String("ts", m.TS), zap.String("text", m.Text)}
	if buttons := buttonsOf(m.Blocks); len(buttons) > 0 {
		fields = append(fields, zap.Strings("buttons", buttons))
	}
	return fields
}

// buttonsOf lists the buttons of a message's blocks as block_id/action_id=value: what a block_actions
// payload pressing one carries.
func buttonsOf(blocks string) []string {
	var parsed []struct {
		Type     string `json:"type"`
		BlockID  string `json:"block_id"`
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if blocks == "" || json.Unmarshal([]byte(blocks), &parsed) != nil {
		return nil
	}
	var out []string
	for _, b := range parsed {
		for _, e := range b.Elements {
			if b.Type == "actions" && e.Type == "button" {
				out = append(out, b.BlockID+"/"+e.ActionID+"="+e.Value)
			}
		}
	}
	return out
}
