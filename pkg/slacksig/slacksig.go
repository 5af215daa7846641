// Package slacksig is Slack's v0 request signature: the header checks that need no secret (done by
// the gateway before it reads a body) and the HMAC check over the body (done by the chat service,
// which holds the signing secrets). Both sides use the same checks, so a request refused before its
// body is read gets the same answer as one refused after.
package slacksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"
)

// The header names Slack signs requests with.
const (
	HeaderSignature = "X-Slack-Signature"
	HeaderTimestamp = "X-Slack-Request-Timestamp"
)

// Refusals. Their messages are what Slack (and a prober) sees in the JSON answer.
var (
	ErrMissing    = errors.New("missing Slack request signature")
	ErrTimestamp  = errors.New("bad X-Slack-Request-Timestamp")
	ErrStale      = errors.New("X-Slack-Request-Timestamp is outside the allowed window")
	ErrVersion    = errors.New("unsupported signature version")
	ErrSignature  = errors.New("invalid signature")
	sigHexLen     = hex.EncodedLen(sha256.Size)
	maxTimestampN = 12 // digits: Unix seconds until the year 33658
)

// CheckHeaders checks what can be checked without the secret and the body: both headers present,
// the timestamp decimal Unix seconds within skew of now, the signature "v0=" and 64 hex digits. It
// returns the timestamp.
func CheckHeaders(timestamp, signature string, now time.Time, skew time.Duration) (int64, error) {
	if timestamp == "" || signature == "" {
		return 0, ErrMissing
	}
	if len(timestamp) > maxTimestampN {
		return 0, ErrTimestamp
	}
	for _, c := range []byte(timestamp) {
		if c < '0' || c > '9' {
			return 0, ErrTimestamp
		}
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return 0, ErrTimestamp
	}
	if d := now.Sub(time.Unix(ts, 0)); d > skew || d < -skew {
		return 0, ErrStale
	}
	if len(signature) < 3 || signature[:3] != "v0=" {
		return 0, ErrVersion
	}
	if len(signature) != 3+sigHexLen {
		return 0, ErrSignature
	}
	if _, err := hex.DecodeString(signature[3:]); err != nil {
		return 0, ErrSignature
	}
	return ts, nil
}

// Verify checks Slack's v0 signature of body: the headers as CheckHeaders does, then HMAC-SHA256 of
// "v0:<timestamp>:<body>" with the app's signing secret, compared in constant time. The timestamp
// must be within skew of now, so a captured request cannot be replayed later.
func Verify(secret string, body []byte, timestamp, signature string, now time.Time, skew time.Duration) error {
	if secret == "" {
		return ErrMissing
	}
	if _, err := CheckHeaders(timestamp, signature, now, skew); err != nil {
		return err
	}
	got, _ := hex.DecodeString(signature[3:])
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrSignature
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
