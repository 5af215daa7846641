package events

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// verifySignature checks Slack's v0 request signature: HMAC-SHA256 of "v0:<timestamp>:<body>" with
// the app's signing secret, hex-encoded after "v0=", compared in constant time. The timestamp must
// be within skew of now, so a captured request cannot be replayed later.
func verifySignature(secret string, body []byte, timestamp, signature string, now time.Time, skew time.Duration) error {
	if secret == "" || timestamp == "" || signature == "" {
		return errf(ErrUnauthenticated, "missing Slack request signature")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errf(ErrUnauthenticated, "bad X-Slack-Request-Timestamp")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > skew || d < -skew {
		return errf(ErrUnauthenticated, "X-Slack-Request-Timestamp is outside the allowed window")
	}
	hexSig, ok := strings.CutPrefix(signature, "v0=")
	if !ok {
		return errf(ErrUnauthenticated, "unsupported signature version")
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return errf(ErrUnauthenticated, "invalid signature")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errf(ErrUnauthenticated, "invalid signature")
	}
	return nil
}

// Sign returns the X-Slack-Signature Slack would send for body at timestamp: for tests, benchmarks
// and tools that stand in for Slack.
func Sign(secret string, timestamp int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + strconv.FormatInt(timestamp, 10) + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// tokenEqual compares a legacy verification token in constant time.
func tokenEqual(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
