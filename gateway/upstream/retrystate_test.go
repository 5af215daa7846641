package upstream

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

func TestRetryStateEligible(t *testing.T) {
	unavailable, internal, deadline := status.Error(codes.Unavailable, "x"), status.Error(codes.Internal, "x"), status.Error(codes.DeadlineExceeded, "x")
	cases := []struct {
		name       string
		idempotent bool
		out        outcome
		want       bool
	}{
		{"success", true, outcome{answered: true, reached: true}, false},
		{"write never reached its host", false, outcome{err: unavailable}, true},
		{"write reached its host, no answer", false, outcome{err: unavailable, reached: true}, false},
		{"write answered Unavailable", false, outcome{err: unavailable, answered: true, reached: true}, false},
		{"read answered Unavailable", true, outcome{err: unavailable, answered: true, reached: true}, true},
		{"read answered Internal", true, outcome{err: internal, answered: true, reached: true}, false},
		{"read timed out", true, outcome{err: deadline, reached: true}, true},
	}
	for _, tt := range cases {
		r := retryState{idempotent: tt.idempotent}
		if got := r.eligible(context.Background(), tt.out); got != tt.want {
			t.Errorf("%s: eligible = %v, want %v", tt.name, got, tt.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if (&retryState{idempotent: true}).eligible(ctx, outcome{err: unavailable}) {
		t.Error("a call whose client went away is retried")
	}
}

func TestRetryStateNextAndBudget(t *testing.T) {
	c := testCluster(t, HostConfig{Address: "127.0.0.1:1", Weight: 1}, HostConfig{Address: "127.0.0.1:2", Weight: 1},
		HostConfig{Address: "127.0.0.1:3", Weight: 1})
	c.retry.NumRetries = 2
	r := retryState{c: c, idempotent: isIdempotent(chatv1.ChatService_GetTeam_FullMethodName)}
	if !r.idempotent {
		t.Fatal("GetTeam is not idempotent")
	}
	first := c.hosts[0]
	if !r.perTryBounded(first) {
		t.Error("a read with other hosts left is not bounded by the per-try timeout")
	}
	second := r.next(first)
	if second == nil || second == first {
		t.Fatalf("next after %s = %v, want another host", first.cfg.Address, second)
	}
	if n := c.limits.retries.Load(); n != 1 {
		t.Errorf("retries in flight = %d while the retry runs, want 1", n)
	}
	r.tryDone(&outcome{err: status.Error(codes.Unavailable, "x")})
	if n := c.limits.retries.Load(); n != 0 || c.rqRetrySuccess.Value() != 0 {
		t.Errorf("after a failed retry: retries in flight %d, retry_success %d; want 0, 0", n, c.rqRetrySuccess.Value())
	}
	third := r.next(second)
	if third == nil || third == first || third == second {
		t.Fatalf("next after two hosts = %v, want the third", third)
	}
	r.tryDone(&outcome{})
	if c.rqRetrySuccess.Value() != 1 || c.rqRetry.Value() != 2 {
		t.Errorf("retry_success %d, retry %d; want 1, 2", c.rqRetrySuccess.Value(), c.rqRetry.Value())
	}
	if r.perTryBounded(third) {
		t.Error("the last try (retries used up, no panic) is bounded by the per-try timeout")
	}
	if h := r.next(third); h != nil {
		t.Errorf("next after num_retries = %s, want none", h.cfg.Address)
	}

	// The budget refuses: no retry, counted as an overflow, no slot held.
	r = retryState{c: c, idempotent: true}
	c.limits.retry.BudgetPercent, c.limits.breakers.MaxRetries = 0, 0
	if h := r.next(first); h != nil {
		t.Errorf("next beyond max_retries = %s, want none", h.cfg.Address)
	}
	if c.rqRetryOverflow.Value() != 1 || c.limits.retries.Load() != 0 || r.release != nil {
		t.Errorf("retry_overflow %d, retries in flight %d; want 1, 0", c.rqRetryOverflow.Value(), c.limits.retries.Load())
	}
}
