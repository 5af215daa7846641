package events

import (
	"errors"
	"fmt"
)

// Sentinel errors of the inbound direction; chat's toStatus maps them to gRPC codes (401, 400, 503
// at the gateway).
var (
	// ErrUnauthenticated is a request whose signature (or legacy token) does not verify.
	ErrUnauthenticated = errors.New("events: request not signed by Slack")
	// ErrBadRequest is a verified request gantry cannot read.
	ErrBadRequest = errors.New("events: bad request")
	// ErrUnavailable is a request that could not be stored: Slack retries it.
	ErrUnavailable = errors.New("events: queue unavailable")
)

// Error is an error with the message Slack (and the log) sees.
type Error struct {
	Kind    error
	Message string
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Kind }

func errf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}
