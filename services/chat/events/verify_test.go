package events

import (
	"errors"
	"testing"
	"time"
)

func TestVerifySignature(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"event_callback"}`)
	ts := "1700000000"
	good := Sign("s3cret", now.Unix(), body)
	tests := []struct {
		name, secret, ts, sig string
		body                  []byte
		ok                    bool
	}{
		{"valid", "s3cret", ts, good, body, true},
		{"wrong secret", "other", ts, good, body, false},
		{"body changed", "s3cret", ts, good, []byte(`{"type":"event_callback "}`), false},
		{"timestamp changed", "s3cret", "1700000001", good, body, false},
		{"too old", "s3cret", "1699999600", Sign("s3cret", 1699999600, body), body, false},
		{"too new", "s3cret", "1700000400", Sign("s3cret", 1700000400, body), body, false},
		{"no version", "s3cret", ts, good[3:], body, false},
		{"not hex", "s3cret", ts, "v0=zz", body, false},
		{"empty", "s3cret", "", "", body, false},
		{"no secret configured", "", ts, Sign("", now.Unix(), body), body, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifySignature(tt.secret, tt.body, tt.ts, tt.sig, now, 5*time.Minute)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrUnauthenticated)) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// FuzzDecode: no Slack body, whatever its kind, panics the decoder.
func FuzzDecode(f *testing.F) {
	f.Add(0, []byte(`{"type":"url_verification","challenge":"x"}`))
	f.Add(1, []byte(`command=%2Fdeploy&api_app_id=A1&text=a+b`))
	f.Add(2, []byte(`payload=%7B%22type%22%3A%22block_actions%22%7D`))
	f.Add(2, []byte(`payload=null`))
	kinds := []string{KindEvent, KindSlash, KindInteractive}
	f.Fuzz(func(t *testing.T, k int, body []byte) {
		if k < 0 {
			k = -k
		}
		p, _, err := decode(kinds[k%3], body)
		if err == nil {
			_ = callbackID(p)
			_ = teamOf(p)
		}
	})
}
