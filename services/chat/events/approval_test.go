package events

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
	"github.com/gantry-dev/gantry/services/chat/queue/boltqueue"
)

// recordedApprovals records the presses it is given and answers refused.
type recordedApprovals struct {
	mu      sync.Mutex
	presses []ApprovalPress
	refused string
}

func (a *recordedApprovals) Decide(_ context.Context, p ApprovalPress) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.presses = append(a.presses, p)
	return a.refused, nil
}

// pressInbound is pingbot's receiver, with a configured interactive handler whose callback_id is the
// change buttons' block_id, over a bolt queue.
func pressInbound(t *testing.T) (*Inbound, *testBackend) {
	t.Helper()
	be := newTestBackend(t, `{"text":"the configured handler answered"}`)
	h := Handlers{InteractiveComponentHandlers: []InteractiveHandler{{CallbackID: ApprovalBlockID, Bots: map[string][]string{"acme": {"pingbot"}},
		Callbacks: callbacks(be.URL + "/handler")}}}
	h.InteractiveComponentHandlers[0].Callbacks[0].Synchronous = true
	in, err := New(DefaultConfig(), []Bot{{Team: "acme", TeamID: "T0FAKE001", Name: "pingbot", AppID: testAppID, SigningSecret: "s"}}, h, nil, &fakeSlack{}, nil, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	q, err := boltqueue.Open(filepath.Join(t.TempDir(), "q.db"), boltqueue.Options{}, logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	in.queue = q
	return in, be
}

// pressBody is a signed block_actions request pressing action of the change buttons.
func pressBody(t *testing.T, action, trigger string) Request {
	t.Helper()
	p, _ := json.Marshal(map[string]any{
		"type": "block_actions", "api_app_id": testAppID, "trigger_id": trigger,
		"team": map[string]any{"id": "T0FAKE001"}, "user": map[string]any{"id": "U0ALICE01"},
		"actions": []any{map[string]any{"block_id": ApprovalBlockID, "action_id": action, "value": "cr-1"}},
	})
	body := []byte("payload=" + url.QueryEscape(string(p)))
	now := time.Now().Unix()
	return Request{Kind: KindInteractive, Body: body, Timestamp: fmt.Sprint(now), Signature: Sign("s", now, body)}
}

// TestApprovalPressRouting: with approvals configured a change button is decided in-process, never
// by the handler configured for its block_id, and the presser's email is left out when Slack does
// not report it confirmed (this fake Slack never does); an unknown action_id reaches nobody.
// Without approvals the press is an interactive component like any other.
func TestApprovalPressRouting(t *testing.T) {
	in, be := pressInbound(t)
	a := &recordedApprovals{}
	in.HandleApprovals(a)
	resp, err := in.Receive(context.Background(), pressBody(t, "approve", "trig-1"))
	if err != nil || resp.Body != nil {
		t.Fatalf("press: %s, %v", resp.Body, err)
	}
	want := ApprovalPress{ChangeID: "cr-1", Decision: "approve", TeamID: "T0FAKE001", UserID: "U0ALICE01"}
	if len(a.presses) != 1 || a.presses[0] != want {
		t.Errorf("presses %+v, want %+v", a.presses, want)
	}
	resp, err = in.Receive(context.Background(), pressBody(t, "delete_everything", "trig-2"))
	if err != nil || string(resp.Body) != `{"replace_original":false,"response_type":"ephemeral","text":"this button is not one gantry knows"}` {
		t.Errorf("unknown action: %s, %v", resp.Body, err)
	}
	a.refused = "not yours to decide"
	resp, err = in.Receive(context.Background(), pressBody(t, "reject", "trig-3"))
	if err != nil || string(resp.Body) != `{"replace_original":false,"response_type":"ephemeral","text":"not yours to decide"}` {
		t.Errorf("refused press: %s, %v", resp.Body, err)
	}
	if len(a.presses) != 2 || len(be.paths()) != 0 {
		t.Errorf("presses %+v, handler calls %v: want two presses decided, the handler never called", a.presses, be.paths())
	}

	plain, be := pressInbound(t)
	resp, err = plain.Receive(context.Background(), pressBody(t, "approve", "trig-1"))
	if err != nil || string(resp.Body) != `{"text":"the configured handler answered"}` || len(be.paths()) != 1 {
		t.Errorf("without approvals: %s, %v, handler calls %v; want the configured handler's answer", resp.Body, err, be.paths())
	}
}
