package chat

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// idempotentMethods are the Web API methods gantry retries after any failure (a network error, an
// attempt timeout, a 5xx): calling them twice has no effect beyond calling them once. They are
// reads, plus conversations.open, which answers the already open IM. Every other method, and any
// method the action route names that is not listed here, may have been performed by Slack when its
// answer was lost, so it is retried only when it provably was not: the connection was never made,
// or Slack answered 429. A retried chat.postMessage that Slack had accepted posts twice.
var idempotentMethods = map[string]bool{
	"api.test":              true,
	"auth.test":             true,
	"bots.info":             true,
	"chat.getPermalink":     true,
	"conversations.history": true,
	"conversations.info":    true,
	"conversations.list":    true,
	"conversations.members": true,
	"conversations.open":    true,
	"conversations.replies": true,
	"dnd.info":              true,
	"emoji.list":            true,
	"files.info":            true,
	"files.list":            true,
	"pins.list":             true,
	"reactions.get":         true,
	"reactions.list":        true,
	"team.info":             true,
	"team.profile.get":      true,
	"usergroups.list":       true,
	"usergroups.users.list": true,
	"users.conversations":   true,
	"users.getPresence":     true,
	"users.info":            true,
	"users.list":            true,
	"users.lookupByEmail":   true,
	"users.profile.get":     true,
}

// retryable reports whether a failed attempt of method may be made again: always for an idempotent
// method, otherwise only when the request never left (see notSent).
func retryable(method string, err error) bool {
	return idempotentMethods[method] || notSent(err)
}

// notSent reports whether err happened before any byte of the request reached Slack: dialing Slack
// or the HTTP proxy failed (connection refused, no route, DNS). Anything later (a reset, a timeout
// waiting for the answer, a 5xx) may come after Slack acted.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}

// notRetried is the error of a failed call that was not retried because it may have been performed:
// a timeout is Slack not answering in time (504), anything else Slack failing (502).
func notRetried(method string, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: no answer within the attempt timeout; not retried, as Slack may have performed it: %v", ErrSlackTimeout, method, err)
	}
	return fmt.Errorf("%w: %s: not retried, as Slack may have performed it: %v", ErrSlackUnavailable, method, err)
}
