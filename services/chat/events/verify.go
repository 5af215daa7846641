package events

import (
	"crypto/subtle"
	"time"

	"github.com/gantry-dev/gantry/pkg/slacksig"
)

// verifySignature checks Slack's v0 request signature (package slacksig: the gateway runs the same
// header checks before it reads the body, so both refuse alike) and maps a refusal to
// ErrUnauthenticated with slacksig's message.
func verifySignature(secret string, body []byte, timestamp, signature string, now time.Time, skew time.Duration) error {
	if err := slacksig.Verify(secret, body, timestamp, signature, now, skew); err != nil {
		return errf(ErrUnauthenticated, "%s", err.Error())
	}
	return nil
}

// Sign returns the X-Slack-Signature Slack would send for body at timestamp: for tests, benchmarks
// and tools that stand in for Slack.
func Sign(secret string, timestamp int64, body []byte) string {
	return slacksig.Sign(secret, timestamp, body)
}

// tokenEqual compares a legacy verification token in constant time.
func tokenEqual(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
