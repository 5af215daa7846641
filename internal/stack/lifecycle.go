package stack

import (
	"context"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
)

// lifecycle is what a stack runs and what it must close. Every long-running piece of every role
// joins one group (as Prometheus registers each in one run.Group): it runs until the stack's context
// ends, the first to fail ends it for the others, and the stack has stopped only once all have
// returned. Everything a role opens is closed once, in the reverse order of opening, after the
// group has stopped: when the stack stops, and when Start fails half way (as etcd's StartEtcd undoes
// a partial start in one deferred closure), so no role undoes its own start by hand.
type lifecycle struct {
	// ctx ends when the stack stops: Start's context ends, a piece fails, or stop is called.
	ctx  context.Context
	stop context.CancelFunc
	grp  *errgroup.Group

	mu      sync.Mutex
	closers []func()
	closed  sync.Once
}

func newLifecycle(parent context.Context) *lifecycle {
	runCtx, stop := context.WithCancel(parent)
	grp, ctx := errgroup.WithContext(runCtx)
	return &lifecycle{ctx: ctx, stop: stop, grp: grp}
}

// run runs execute in the group until it returns; it must return once its context ends. An error
// stops the stack; a nil return ends only this piece.
func (l *lifecycle) run(execute func(ctx context.Context) error) {
	l.grp.Go(func() error { return execute(l.ctx) })
}

// runUntil runs execute in the group, and interrupt once the stack stops, to make execute return
// (a server's Close): the pair of a run.Group actor, both joined.
func (l *lifecycle) runUntil(execute func() error, interrupt func()) {
	l.grp.Go(execute)
	l.grp.Go(func() error {
		<-l.ctx.Done()
		interrupt()
		return nil
	})
}

// onStop closes what a role opened once the group has stopped.
func (l *lifecycle) onStop(closer func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closers = append(l.closers, closer)
}

// wait waits until every piece has returned, then closes what was opened, newest first, and returns
// the group's first error.
func (l *lifecycle) wait() error {
	err := l.grp.Wait()
	l.stop()
	l.closed.Do(func() {
		l.mu.Lock()
		closers := slices.Clone(l.closers)
		l.mu.Unlock()
		for _, closer := range slices.Backward(closers) {
			closer()
		}
	})
	return err
}

// abort undoes a partial start: it stops what already runs, waits for it, and closes what was opened.
func (l *lifecycle) abort() {
	l.stop()
	_ = l.wait()
}
