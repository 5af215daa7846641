package gateway

import (
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// TestDecodeErrorsNeverEchoTheBody: a body of the wrong shape may carry a secret value, and the
// decoding error goes to the client and the log, so it says what was wrong without quoting the value.
func TestDecodeErrorsNeverEchoTheBody(t *testing.T) {
	m := requestMarshaler{&runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true}}}
	bodies := []string{
		`{"credential_pairs":"SECRET"}`,
		`{"credential_pairs":{"k":SECRET}}`,
		`{"enabled":"SECRET"}`,
		`{"revision": "SECRET"}`,
		`{"name":"\uD800SECRET"}`,
		`{"tags":[SECRET]}`,
		`{"name":"a" "SECRET"}`,
	}
	for _, body := range bodies {
		err := m.NewDecoder(strings.NewReader(body)).Decode(&secretsv1.UpdateCredentialRequest{})
		if err == nil {
			t.Errorf("%s decoded", body)
			continue
		}
		if strings.Contains(err.Error(), "ECRET") || !strings.HasPrefix(err.Error(), "invalid JSON request body: ") {
			t.Errorf("%s: error %q", body, err)
		}
	}
	if got := redactToken(`(line 1:12): invalid value for bool field value: "x"`); got != "(line 1:12): invalid value for bool field value" {
		t.Errorf("redactToken = %q", got)
	}
}
