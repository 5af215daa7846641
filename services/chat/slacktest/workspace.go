package slacktest

// TestingT is the part of testing.TB StartWorkspace uses; the package does not import testing, so the
// gantry binary can serve the fake as its demo workspace.
type TestingT interface {
	Helper()
	Cleanup(func())
}

// StartWorkspace starts a fake Slack holding the small workspace the chat tests share: alice (display
// name "Alice A", with an IM), bob, a deleted user, and a public, a private and a multi-person channel.
// It is closed when the test ends.
func StartWorkspace(tb TestingT) *Server {
	tb.Helper()
	f := New()
	tb.Cleanup(f.Close)
	f.AddUser(User{ID: "U0ALICE01", Name: "alice", DisplayName: "Alice A", Email: "alice@example.com"})
	f.AddUser(User{ID: "U0BOB0001", Name: "bob", Email: "bob@example.com"})
	f.AddUser(User{ID: "U0GONE001", Name: "gone", Email: "gone@example.com", Deleted: true})
	f.AddChannel(Channel{ID: "C0GENERAL", Name: "general", Kind: "public_channel", Members: []string{"U0ALICE01"}, Topic: "all things"})
	f.AddChannel(Channel{ID: "G0SECRET1", Name: "secret", Kind: "private_channel"})
	f.AddChannel(Channel{ID: "C0MPIM001", Name: "mpdm-alice--bob-1", Kind: "mpim"})
	f.AddChannel(Channel{ID: "D0ALICE01", Kind: "im", User: "U0ALICE01"})
	return f
}
