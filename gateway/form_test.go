package gateway

import (
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	chatv1 "github.com/gantry-dev/gantry/proto/chat/v1"
)

func TestFormDecoder(t *testing.T) {
	m := formMarshaler{&runtime.JSONPb{}}
	tests := []struct {
		name, body, want, err string
	}{
		{"proto field name", "team_name=a%20b&other=x", "a b", ""},
		{"JSON field name", "teamName=c", "c", ""},
		{"JSON body labelled as a form", `{"team_name":"j"}`, "j", ""},
		{"bad escape", "team_name=%zz", "", "invalid form request body"},
		// Found by FuzzChatBodies: the value reached the gRPC client, which refused to marshal it (500).
		{"invalid UTF-8", "team_name=abc%80", "", "team_name is not valid UTF-8"},
		{"invalid UTF-8 in an unknown field is ignored", "nope=%80&team_name=ok", "ok", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var msg chatv1.GetTeamRequest
			err := m.NewDecoder(strings.NewReader(tt.body)).Decode(&msg)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Decode(%q) = %v, want an error containing %q", tt.body, err, tt.err)
				}
				return
			}
			if err != nil || msg.GetTeamName() != tt.want {
				t.Fatalf("Decode(%q) = %q, %v; want %q", tt.body, msg.GetTeamName(), err, tt.want)
			}
		})
	}
}
