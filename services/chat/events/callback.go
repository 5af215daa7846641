package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"
)

// DeliveryIDHeader is the header of every call to a handler's backend naming the delivery it is
// part of: the same value on every attempt of one request's call to one callback (a retry, a redrive
// from the dead letter), a different one for each other request or callback. A backend that must
// not act twice keeps the ids it has seen (for a few hours: a retry comes within
// -chat-inbound-max-age, a redrive when an operator makes it).
const DeliveryIDHeader = "X-Gantry-Delivery-Id"

// deliveryID names one call of a request: the request's queue key (Slack's event id, a slash
// command's or a component's trigger id) and the handler's and callback's places in the
// configuration. A fanned-out call's queue key is this id.
func deliveryID(requestKey string, handlerIndex, url int) string {
	return fmt.Sprintf("%s#%d.%d", requestKey, handlerIndex, url)
}

// callError is a backend call that failed, with whether sending it again is safe and asked for.
type callError struct {
	err error
	// notReceived: the backend did not get the request (it could not be connected to, or nothing of
	// the request was written), or said it did not act on it (5xx, 429): calling it again cannot make
	// it act twice.
	notReceived bool
	// timedOut: the backend got the request and did not answer within -chat-inbound-callback-timeout
	// (or the dispatch's time ran out): it may have acted.
	timedOut bool
	// retryOnTimeout: the call's handler opted into retries of a timed-out call.
	retryOnTimeout bool
	// retryAfter is a 429's or 5xx's Retry-After (seconds), 0 when none.
	retryAfter time.Duration
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// retryable reports whether a failed dispatch may be made again: any failure other than a backend
// call that may have reached the backend, and a timed-out call of a handler that opted into
// retries on timeout (retry_on_timeout).
func retryable(err error) bool {
	var ce *callError
	if !errors.As(err, &ce) {
		return true
	}
	return ce.notReceived || (ce.timedOut && ce.retryOnTimeout)
}

// retryAfter is the wait a failed backend call asked for (Retry-After), 0 when none.
func retryAfter(err error) time.Duration {
	var ce *callError
	if errors.As(err, &ce) {
		return ce.retryAfter
	}
	return 0
}

// post sends a JSON body and returns the answer's body; a transport error or a non-2xx answer is an
// error (a *callError, which says whether the backend may have acted on it). A non-empty
// deliveryID is sent as DeliveryIDHeader.
func (in *Inbound) post(ctx context.Context, url string, body any, deliveryID string) ([]byte, error) {
	if url == helpURL {
		return in.helpReply(body), nil
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	// written is set once any of the request reached the connection: from then on, the backend may
	// have it.
	var written atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { written.Store(true) },
		WroteHeaders:     func() { written.Store(true) },
	}
	cctx, cancel := context.WithTimeout(httptrace.WithClientTrace(ctx, trace), in.cfg.CallbackTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if deliveryID != "" {
		req.Header.Set(DeliveryIDHeader, deliveryID)
		// The same id under the IETF draft's name, which also lets net/http send the call again
		// on its own when a kept-alive connection turns out closed by the backend before it
		// answered (a backend's idle timeout racing the call): the backend did not have it.
		req.Header.Set("Idempotency-Key", deliveryID)
	}
	resp, err := in.http.Do(req)
	if err != nil {
		return nil, &callError{err: err, notReceived: !written.Load(), timedOut: timedOut(cctx, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxCallbackReply))
	if err != nil {
		return nil, &callError{err: fmt.Errorf("reading the answer: %w", err), timedOut: timedOut(cctx, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ce := &callError{err: fmt.Errorf("backend answered %d", resp.StatusCode)}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			ce.notReceived = true
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				ce.retryAfter = time.Duration(s) * time.Second
			}
		}
		return nil, ce
	}
	return raw, nil
}

// timedOut reports a call cut off by its time: the callback timeout (the context's or the HTTP
// client's) or the dispatch's.
func timedOut(ctx context.Context, err error) bool {
	var ne net.Error
	return errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
