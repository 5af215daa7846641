package logging

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"A0PING001", "A0PING001"},
		{"", ""},
		{"line\nforged", `line\nforged`},
		{"back\\slash", `back\\slash`},
		{"nul\x00", `nul\x00`},
		{"bidi\u202eevil", `bidi\u202eevil`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"héllo wörld", "héllo wörld"},
		{strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{strings.Repeat("a", 65), strings.Repeat("a", 64) + "…[cut]"},
		{strings.Repeat("é", 500000), strings.Repeat("é", 64) + "…[cut]"},
		// An escape is never split by the cut: 63 characters and a 2-character escape do not fit.
		{strings.Repeat("a", 63) + "\n", strings.Repeat("a", 63) + "…[cut]"},
	} {
		got := Truncate(tc.in)
		if got != tc.want {
			t.Errorf("Truncate(%.40q) = %q, want %q", tc.in, got, tc.want)
		}
		if n := utf8.RuneCountInString(got); n > UntrustedLimit+utf8.RuneCountInString(untrustedMarker) {
			t.Errorf("Truncate(%.40q) is %d characters long", tc.in, n)
		}
	}
	if f := Untrusted("app_id", strings.Repeat("x", 1000)); f.Key != "app_id" || len(f.String) > 100 {
		t.Errorf("Untrusted field = %s %d bytes", f.Key, len(f.String))
	}
}

// TestSamplerBoundsRepeatedLines: of 1,000 refusals of one kind within an interval, the first N are
// written, the rest are counted into one summary line when the interval ends; another kind has its
// own budget.
func TestSamplerBoundsRepeatedLines(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := NewSampler(zap.New(core), 3, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	for range 1000 {
		s.Info("bad_signature", "refused")
	}
	s.Info("stale_timestamp", "refused")
	if n := logs.FilterMessage("refused").Len(); n != 4 {
		t.Fatalf("%d lines written, want 3 of one kind and 1 of the other", n)
	}
	if n := logs.FilterMessage("repeated log lines left out").Len(); n != 0 {
		t.Fatalf("summary written before the interval ended")
	}
	now = now.Add(time.Minute)
	s.Flush()
	sum := logs.FilterMessage("repeated log lines left out").All()
	if len(sum) != 1 || sum[0].ContextMap()["count"] != int64(997) || sum[0].ContextMap()["refusal"] != "bad_signature" {
		t.Fatalf("summaries = %v", sum)
	}
	// A new interval has a new budget.
	s.Info("bad_signature", "refused")
	if n := logs.FilterMessage("refused").Len(); n != 5 {
		t.Fatalf("%d lines written after the interval, want 5", n)
	}
}
