package iamroles

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Refresh intervals for Cached. The minimum keeps a misconfiguration from spending the account's
// IAM request quota, which other tools (deployments, Terraform) share.
const (
	DefaultRefresh = 600 * time.Second
	MinRefresh     = 60 * time.Second
)

// Cached serves another Lister's roles from memory, refreshed in the background, so listing roles
// costs no IAM call and keeps working through a short IAM outage. Safe for concurrent use.
type Cached struct {
	inner  Lister
	logger *zap.Logger
	// Set by NewCached and read only by the loop; tests in this package shorten them before Start.
	refresh time.Duration
	jitter  time.Duration

	// fetching is a one-slot semaphore: one fetch from inner at a time, so a burst of requests on a
	// cold cache makes one IAM listing, not one each. A channel rather than a mutex so a waiting
	// request can give up when its context ends.
	fetching chan struct{}

	mu      sync.Mutex
	roles   []string // nil until the first successful fetch
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the refresh loop has returned
}

var _ Lister = (*Cached)(nil)

// NewCached wraps inner. refresh is the time between background refreshes (zero: DefaultRefresh;
// less than MinRefresh is raised to it). Each wait also adds a random part of up to jitter (zero or
// negative: a tenth of refresh), so replicas started together do not call IAM together.
func NewCached(inner Lister, refresh, jitter time.Duration, logger *zap.Logger) *Cached {
	if logger == nil {
		logger = zap.NewNop()
	}
	switch {
	case refresh <= 0:
		refresh = DefaultRefresh
	case refresh < MinRefresh:
		logger.Warn("IAM role refresh interval too short; using the minimum",
			zap.Duration("configured", refresh), zap.Duration("minimum", MinRefresh))
		refresh = MinRefresh
	}
	if jitter <= 0 {
		jitter = refresh / 10
	}
	return &Cached{
		inner:    inner,
		logger:   logger,
		refresh:  refresh,
		jitter:   jitter,
		fetching: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// Start runs the background refresh until ctx ends or Close is called. The first refresh is
// immediate unless Roles has already fetched. Calling Start again, or after Close, does nothing.
func (c *Cached) Start(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.closed {
		return
	}
	c.started = true
	ctx, c.cancel = context.WithCancel(ctx)
	go c.loop(ctx)
}

// Close stops the background refresh and waits for it to finish, so nothing calls inner after Close
// returns. Roles keeps serving the last list.
func (c *Cached) Close() {
	c.mu.Lock()
	c.closed = true
	started, cancel := c.started, c.cancel
	c.mu.Unlock()
	if !started {
		return
	}
	cancel()
	<-c.done
}

// Roles returns the last list fetched. Before the first successful fetch it fetches now, and then
// reports that fetch's error, since there is no older list to fall back on.
func (c *Cached) Roles(ctx context.Context) ([]string, error) {
	if roles, ok := c.snapshot(); ok {
		return roles, nil
	}
	select {
	case c.fetching <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.fetching }()
	// Whoever held the semaphore before us may have just filled the cache.
	if roles, ok := c.snapshot(); ok {
		return roles, nil
	}
	roles, err := c.fetchLocked(ctx)
	if err != nil {
		return nil, err
	}
	return slices.Clone(roles), nil
}

func (c *Cached) snapshot() ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roles == nil {
		return nil, false
	}
	// A copy: callers may sort or trim what they get without changing what others see.
	return slices.Clone(c.roles), true
}

// fetchLocked asks inner for the roles and stores them; the caller holds the fetching semaphore.
// The returned slice is the stored one, not to be modified.
func (c *Cached) fetchLocked(ctx context.Context) ([]string, error) {
	roles, err := c.inner.Roles(ctx)
	if err != nil {
		return nil, fmt.Errorf("iamroles: list roles: %w", err)
	}
	// Sorted here too, so a Lister that breaks the contract cannot unsort the answer, and never nil,
	// since nil marks an empty cache.
	roles = append([]string{}, roles...)
	slices.Sort(roles)
	c.mu.Lock()
	c.roles = roles
	c.mu.Unlock()
	return roles, nil
}

func (c *Cached) loop(ctx context.Context) {
	defer close(c.done)
	if _, ok := c.snapshot(); !ok {
		c.refreshOnce(ctx)
	}
	timer := time.NewTimer(c.nextWait())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			c.logger.Debug("IAM role refresh stopped")
			return
		case <-timer.C:
			c.refreshOnce(ctx)
			timer.Reset(c.nextWait())
		}
	}
}

// refreshOnce replaces the cached list with a fresh one. On failure the previous list stays: stale
// roles are far more useful to the secrets service than none.
func (c *Cached) refreshOnce(ctx context.Context) {
	select {
	case c.fetching <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-c.fetching }()
	start := time.Now()
	roles, err := c.fetchLocked(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return // stopping, not failing
		}
		_, have := c.snapshot()
		c.logger.Warn("refreshing IAM roles failed; keeping the previous list",
			zap.Error(err), zap.Bool("have_previous", have))
		return
	}
	c.logger.Debug("refreshed IAM roles", zap.Int("roles", len(roles)), zap.Duration("took", time.Since(start)))
}

func (c *Cached) nextWait() time.Duration {
	if c.jitter <= 0 {
		return c.refresh
	}
	return c.refresh + rand.N(c.jitter)
}
