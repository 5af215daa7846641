// Package gantryclient is a small client of gantry's Confidant-compatible REST API (the /v1/... paths
// of the gateway), used by the gantry command-line client. It knows the paths and JSON shapes; it does
// not know how tokens are made: the caller gives the Authorization header.
//
// Secret values travel only in request and response bodies, never in a URL, and no error of this
// package quotes a body the client sent.
package gantryclient

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// maxResponseBytes bounds what the client reads of one answer, so a wrong --addr pointing at something
// that streams forever cannot exhaust memory.
const maxResponseBytes = 64 << 20

// DefaultTimeout bounds one request of a client whose HTTP is nil.
const DefaultTimeout = 30 * time.Second

// Client calls one gantry gateway.
type Client struct {
	// BaseURL is the gateway's REST address, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Authorization is the value of the Authorization header of every request (kmsauth in HTTP Basic).
	Authorization string
	// HTTP is the client requests go through; nil means one with DefaultTimeout. A caller that must
	// trust a private CA (the CLI's --ca-file) gives one with its RootCAs.
	HTTP *http.Client
	// Retry says how the client waits out a server that asks it to come back later (429 or 503 with
	// Retry-After); the zero value waits up to DefaultRetryMaxWait in all (see RetryPolicy).
	Retry RetryPolicy
}

// APIError is an answer of the server other than 2xx.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the server's "error" field (or the status text when the body had none).
	Message string
	// Conflicts is Confidant's credential-key conflict map: key name → credential ids exposing it.
	Conflicts map[string][]string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// IsStatus reports whether err is an APIError with one of the given statuses.
func IsStatus(err error, statuses ...int) bool {
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	for _, s := range statuses {
		if apiErr.Status == s {
			return true
		}
	}
	return false
}

// do sends a request with an optional JSON body and decodes a 2xx JSON answer into out (nil: ignore it).
// An answer that asks the client to come back later is waited out and the same request sent again,
// where that is safe (RetryPolicy).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	target := strings.TrimRight(c.BaseURL, "/") + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	var waited time.Duration
	for {
		wait, err := c.once(ctx, method, path, target, body != nil, data, out)
		if wait == 0 || !c.Retry.allows(waited, wait) {
			return err
		}
		if c.Retry.Notify != nil {
			c.Retry.Notify(err, wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		waited += wait
	}
}

// once sends the request one time. wait > 0 when the answer asked to come back later and the request
// is safe to send again (see retryAfter); err is then that answer's APIError.
func (c *Client) once(ctx context.Context, method, path, target string, hasBody bool, data []byte, out any) (wait time.Duration, err error) {
	var reqBody io.Reader
	if hasBody {
		reqBody = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reqBody)
	if err != nil {
		return 0, fmt.Errorf("bad address %q: %w", c.BaseURL, err)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Authorization != "" {
		req.Header.Set(wirekeys.Authorization, c.Authorization)
	}
	httpClient := c.HTTP
	if httpClient == nil {
		httpClient = &http.Client{Timeout: DefaultTimeout}
	}
	resp, err := httpClient.Do(req)
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		return 0, fmt.Errorf("the certificate of %s is not signed by a CA this client trusts (a private CA: pass --ca-file or set GANTRY_CA_FILE): %w", c.BaseURL, err)
	}
	if err != nil {
		return 0, fmt.Errorf("cannot reach gantry at %s (is it running? set --addr or GANTRY_ADDR): %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return 0, fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return retryAfter(method, resp), decodeAPIError(resp.StatusCode, answer)
	}
	if resp.StatusCode == http.StatusAccepted {
		// Only a write that an approval rule holds answers 202, with the change request: returned as
		// an error so that no caller takes it for the written record it asked for.
		return 0, decodePendingApproval(method, path, answer)
	}
	if out == nil {
		return 0, nil
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return 0, fmt.Errorf("answer of %s %s is not the expected JSON: %w", method, path, err)
	}
	return 0, nil
}

// decodeAPIError reads gantry's {"error": "...", "conflicts": {...}} error body.
func decodeAPIError(status int, body []byte) error {
	var shape struct {
		Error     string `json:"error"`
		Conflicts map[string]struct {
			Credentials      []string `json:"credentials"`
			BlindCredentials []string `json:"blind_credentials"`
		} `json:"conflicts"`
	}
	apiErr := &APIError{Status: status}
	if json.Unmarshal(body, &shape) == nil && shape.Error != "" {
		apiErr.Message = shape.Error
	} else {
		// Not gantry's JSON (a proxy, or the wrong --addr): say so without echoing an unknown body.
		apiErr.Message = "the answer is not a gantry error (is --addr the gantry gateway?)"
	}
	for key, ids := range shape.Conflicts {
		if apiErr.Conflicts == nil {
			apiErr.Conflicts = map[string][]string{}
		}
		apiErr.Conflicts[key] = append(append([]string{}, ids.Credentials...), ids.BlindCredentials...)
	}
	return apiErr
}

// escape makes an id or name one path segment.
func escape(segment string) string { return url.PathEscape(segment) }

func itoa(n int) string { return strconv.Itoa(n) }
