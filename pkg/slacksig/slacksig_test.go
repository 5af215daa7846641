package slacksig

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckHeaders(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	good := Sign("s", now.Unix(), []byte("{}"))
	for _, tc := range []struct {
		name, ts, sig string
		want          error
	}{
		{"valid", "1700000000", good, nil},
		{"no timestamp", "", good, ErrMissing},
		{"no signature", "1700000000", "", ErrMissing},
		{"signed number", "+1700000000", good, ErrTimestamp},
		{"not a number", "17000000x0", good, ErrTimestamp},
		{"huge", strings.Repeat("9", 500000), good, ErrTimestamp},
		{"old", "1699999000", good, ErrStale},
		{"future", "1700001000", good, ErrStale},
		{"version", "1700000000", "v1=" + good[3:], ErrVersion},
		{"short", "1700000000", good[:10], ErrSignature},
		{"long", "1700000000", good + strings.Repeat("0", 500000), ErrSignature},
		{"not hex", "1700000000", "v0=" + strings.Repeat("z", 64), ErrSignature},
	} {
		_, err := CheckHeaders(tc.ts, tc.sig, now, 5*time.Minute)
		if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := Verify("s", []byte("{}"), "1700000000", good, now, 5*time.Minute); err != nil {
		t.Errorf("valid signature: %v", err)
	}
	if err := Verify("other", []byte("{}"), "1700000000", good, now, 5*time.Minute); !errors.Is(err, ErrSignature) {
		t.Errorf("wrong secret: %v", err)
	}
}
