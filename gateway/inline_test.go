package gateway

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

func TestInlineRewriter(t *testing.T) {
	rewrite := inlineRewriter(protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true})
	slackFields := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	render := func(m proto.Message) map[string]any {
		t.Helper()
		out, err := rewrite(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := out.(*structpb.Struct)
		if !ok {
			t.Fatalf("rewritten to %T", out)
		}
		return s.AsMap()
	}

	got := render(&chatv1.GetChannelResponse{
		Channel:      &chatv1.Channel{Id: "C1", Name: "general", Members: []string{}},
		Conversation: slackFields(map[string]any{"id": "C1", "name": "general", "is_group": false, "channel": "clash", "updated": 1.7e12}),
	})
	if got["id"] != "C1" || got["is_group"] != false || got["updated"] != 1.7e12 {
		t.Errorf("Slack's fields are not flat: %v", got)
	}
	if ch, _ := got["channel"].(map[string]any); ch["name"] != "general" || ch["is_mpim"] != false {
		t.Errorf("channel %v: the typed field must win a clash and keep every spec field", got["channel"])
	}
	if _, ok := got["conversation"]; ok {
		t.Errorf("the inline field itself is written: %v", got)
	}

	// Inside repeated messages, and absent (null) inline fields.
	got = render(&chatv1.GetImsResponse{Ims: []*chatv1.Im{
		{Id: "D1", User: "U1", Created: 5, Conversation: slackFields(map[string]any{"id": "D1", "created": 0, "context_team_id": "T1"})},
		{Id: "D2", User: "U2"},
	}})
	ims := got["ims"].([]any)
	first, second := ims[0].(map[string]any), ims[1].(map[string]any)
	if first["context_team_id"] != "T1" || first["created"] != 5.0 || first["user"] != "U1" {
		t.Errorf("first IM %v", first)
	}
	if _, ok := second["conversation"]; ok || second["id"] != "D2" || second["is_im"] != false {
		t.Errorf("second IM %v", second)
	}

	// Answers without inline fields are not touched.
	for _, m := range []proto.Message{&chatv1.GetTeamResponse{TeamId: "T1"}, &httpbody.HttpBody{Data: []byte(`{"ok":true}`)}} {
		if out, err := rewrite(context.Background(), m); err != nil || out != any(m) {
			t.Errorf("%T rewritten to %v, %v", m, out, err)
		}
	}
}
