package freeport

// CleanupTB is the part of testing.TB that Refused needs.
type CleanupTB interface {
	TB
	Cleanup(func())
}

// Refused returns a 127.0.0.1:port address that refuses every connection until the test ends: the
// address of a host that is down. Closing a listener and dialling its old port does not give one:
// the kernel hands the port to the next listener that asks for port 0, and under a parallel suite
// that is another test's server, which then answers (TestAccessLog got a 501 from one instead of
// its connect failure). Here a TCP socket stays bound to the port without listening, so the port
// cannot be taken and a connect is answered with a reset.
func Refused(tb CleanupTB) string {
	tb.Helper()
	addr, release, err := boundNotListening()
	if err != nil {
		tb.Fatalf("freeport: a refusing address: %v", err)
	}
	tb.Cleanup(release)
	return addr
}
