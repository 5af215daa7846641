package chat

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/singleflight"
)

// coalesce runs fn once for all concurrent callers with the same key and gives each the result: a
// thousand requests for one uncached email make one Slack call. fn runs detached from the caller that
// started it (it keeps that caller's deadline, not its cancellation), so the others do not fail when
// that one goes away; each caller still stops waiting at its own deadline. A caller that joined a call
// which then ran out of its starter's deadline, while its own has time left, starts another: it must
// not inherit someone else's timeout.
func coalesce[T any](ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (T, error)) (T, error) {
	for {
		ch := g.DoChan(key, func() (any, error) {
			shared, cancel := detach(ctx)
			defer cancel()
			return fn(shared)
		})
		select {
		case r := <-ch:
			if errors.Is(r.Err, ErrSlackTimeout) && ctx.Err() == nil && !deadlinePassed(ctx) {
				continue
			}
			v, _ := r.Val.(T)
			return v, r.Err
		case <-ctx.Done():
			var zero T
			return zero, ctxError(ctx, nil)
		}
	}
}

// deadlinePassed reports whether ctx's deadline is behind us even if its timer has not fired yet: the
// starter's detached copy of that deadline can fire first, and the starter must then fail with its
// own timeout rather than join the next call (found by TestJoinerDoesNotInheritATimeout, 1 run in 10).
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// detach returns a context with ctx's values and deadline but not its cancellation.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(base, dl)
	}
	return context.WithTimeout(base, 30*time.Second)
}

// flightKey joins the parts of a coalescing key.
func flightKey(parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, 0)
	}
	return string(b)
}
