package linearize

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Client calls the credential REST API at Base (a gateway, "http://127.0.0.1:8080") as one client of
// a history, and records every call in Rec. Its methods return what they recorded.
type Client struct {
	// ID is the client's number in the history (porcupine's ClientId, zero-based).
	ID int
	// Base is the gateway's URL; Auth the Authorization header every call sends.
	Base, Auth string
	// HTTP makes the calls; its timeout bounds a call (an unanswered write is indeterminate).
	HTTP *http.Client
	Rec  *Recorder
}

// Read is GET /v1/credentials/{id}.
func (c *Client) Read(ctx context.Context, id string) Output {
	return c.do(ctx, Input{Kind: Read, Key: id}, http.MethodGet, "/v1/credentials/"+id, nil)
}

// Update is PUT /v1/credentials/{id} of credential_pairs {"v": value}, with If-Match: expect when
// expect is not 0.
func (c *Client) Update(ctx context.Context, id, value string, expect int) Output {
	return c.do(ctx, Input{Kind: Update, Key: id, Value: value, Expect: expect}, http.MethodPut, "/v1/credentials/"+id,
		map[string]any{"credential_pairs": map[string]string{"v": value}, "metadata": map[string]string{"op": value}})
}

// Revert is PUT /v1/credentials/{id}/{to}, with If-Match: expect when expect is not 0.
func (c *Client) Revert(ctx context.Context, id string, to, expect int) Output {
	return c.do(ctx, Input{Kind: Revert, Key: id, To: to, Expect: expect}, http.MethodPut, fmt.Sprintf("/v1/credentials/%s/%d", id, to), nil)
}

// Create is POST /v1/credentials of name with credential_pairs {"v": value}.
func (c *Client) Create(ctx context.Context, name, value string) Output {
	return c.do(ctx, Input{Kind: Create, Key: name, Value: value}, http.MethodPost, "/v1/credentials",
		map[string]any{"name": name, "documentation": "linearizability check", "credential_pairs": map[string]string{"v": value},
			"metadata": map[string]string{"op": value}})
}

// Revisions is GET /v1/archive/credentials/{id}: every revision of the credential, oldest first,
// each with the value its metadata names (Update and Create write their value into metadata "op"
// too, and a revert copies it with the rest of the target revision). It is not recorded: Resolve
// reads it once the history has ended.
func (c *Client) Revisions(ctx context.Context, id string) ([]Revision, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/v1/archive/credentials/"+id, http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", c.Auth)
	status, body, err := c.send(req)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("history of %s: %d %s", id, status, body)
	}
	var a struct {
		Revisions []struct {
			Revision int               `json:"revision"`
			Metadata map[string]string `json:"metadata"`
		} `json:"revisions"`
		NextPage *string `json:"next_page"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("history of %s: %w", id, err)
	}
	if a.NextPage != nil {
		return nil, fmt.Errorf("history of %s: answered in pages, not whole", id)
	}
	revs := make([]Revision, len(a.Revisions))
	for i, r := range a.Revisions {
		revs[i] = Revision{Rev: r.Revision, Value: r.Metadata["op"]}
	}
	return revs, nil
}

func (c *Client) do(ctx context.Context, in Input, method, path string, body any) Output {
	var payload io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			panic(err)
		}
		payload = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, payload)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", c.Auth)
	req.Header.Set("Content-Type", "application/json")
	if in.Expect != 0 {
		req.Header.Set("If-Match", strconv.Itoa(in.Expect))
	}
	call := time.Now()
	status, answer, err := c.send(req)
	ret := time.Now()
	out := Classify(in.Kind, status, answer, err)
	c.Rec.Add(c.ID, in, call, out, ret)
	return out
}

func (c *Client) send(req *http.Request) (int, []byte, error) {
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		// The status came but the body did not: the answer is not known.
		return 0, nil, fmt.Errorf("status %d, body cut: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, data, nil
}

// answer is the part of the API's JSON answers the model reads: a credential, or an error.
type answer struct {
	ID       string            `json:"id"`
	Revision *int              `json:"revision"`
	Pairs    map[string]string `json:"credential_pairs"`

	Error     string `json:"error"`
	Reference string `json:"reference"`
}

var staleCurrent = regexp.MustCompile(`current revision of the credential is (\d+)`)

// Classify reads an answer of an operation of kind: status and body, or err when none came.
func Classify(kind Kind, status int, body []byte, err error) Output {
	write := kind != Read
	unanswered := func(note string) Output {
		if write {
			return Output{Result: Indeterminate, Status: status, Note: note}
		}
		return Output{Result: Failed, Status: status, Note: note}
	}
	if err != nil {
		return unanswered(err.Error())
	}
	var a answer
	jsonErr := json.Unmarshal(body, &a)
	note := fmt.Sprintf("%d %s", status, strings.TrimSpace(string(body)))
	if len(note) > 200 {
		note = note[:200] + "..."
	}
	refused := func(r Reason) Output { return Output{Result: Refused, Reason: r, Status: status, Note: note} }
	unexpected := func() Output {
		out := unanswered(note)
		out.Unexpected = true
		return out
	}
	switch {
	case status == http.StatusOK:
		if jsonErr != nil {
			return unexpected()
		}
		out := Output{Result: OK, Status: status}
		if kind == Create {
			if a.ID == "" {
				return unexpected()
			}
			out.ID = a.ID
			return out
		}
		if a.Revision == nil {
			return unexpected()
		}
		out.Revision = *a.Revision
		if kind != Revert { // a revert answers without the values
			v, ok := a.Pairs["v"]
			if !ok {
				return unexpected()
			}
			out.Value = v
		}
		return out
	case status == http.StatusPreconditionFailed && (kind == Update || kind == Revert):
		out := refused(Stale)
		if m := staleCurrent.FindStringSubmatch(a.Error); m != nil {
			out.Current, _ = strconv.Atoi(m[1])
		}
		return out
	case status == http.StatusConflict && kind == Create && a.Reference != "":
		out := refused(NameTaken)
		out.ID = a.Reference
		return out
	case status == http.StatusConflict && write && strings.Contains(a.Error, "being updated concurrently"):
		return refused(Busy)
	case status == http.StatusTooManyRequests && write:
		return refused(Limited)
	case status == http.StatusBadRequest && kind == Revert && strings.HasPrefix(a.Error, "No difference"):
		return refused(NoChange)
	case status == http.StatusNotFound && kind == Revert && strings.HasPrefix(a.Error, "Revision "):
		return refused(NotFound)
	case status >= 500:
		// 503 (storage unavailable, no healthy host), 504 (the upstream deadline), 502, 500: a write
		// may have been applied, or may still be, by a proposal in flight.
		return unanswered(note)
	}
	return unexpected()
}
