package gateway

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// noFilter excludes no field (a route without path parameters).
var noFilter = utilities.NewDoubleArray(nil)

func TestQueryParametersOfTheWrongTypeAreNamed(t *testing.T) {
	tests := []struct {
		msg     proto.Message
		query   string
		wantErr string
	}{
		{&secretsv1.GetCredentialRequest{}, "metadata_only=yes", "metadata_only must be a boolean: true, false, True, False, 1 or 0"},
		{&secretsv1.GetServiceRequest{}, "metadata_only=None", "metadata_only must be a boolean: true, false, True, False, 1 or 0"},
		{&secretsv1.ListServicesRequest{}, "limit=ten", "limit must be an integer"},
		{&secretsv1.ListServicesRequest{}, "limit=4294967296", "limit must be an integer from -2147483648 to 2147483647"},
		{&secretsv1.GetCredentialRequest{}, "metadata_only=True&unknown=x", ""},
	}
	for _, tt := range tests {
		values, _ := url.ParseQuery(tt.query)
		err := rawQueryParser{}.Parse(tt.msg, values, noFilter)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("%s: error %q, want %q", tt.query, got, tt.wantErr)
		}
		if strings.Contains(got, "strconv") {
			t.Errorf("%s: Go parser detail in %q", tt.query, got)
		}
	}
	for spelling, want := range map[string]bool{"True": true, "true": true, "1": true, "False": false, "false": false, "0": false, "": false} {
		req := &secretsv1.GetCredentialRequest{}
		if err := (rawQueryParser{}).Parse(req, url.Values{"metadata_only": {spelling}}, noFilter); err != nil || req.GetMetadataOnly() != want {
			t.Errorf("metadata_only=%q: %v, %v; want %v", spelling, req.GetMetadataOnly(), err, want)
		}
	}
}

func TestPathParameterMismatchIsDescribed(t *testing.T) {
	in := status.New(codes.InvalidArgument, `type mismatch, parameter: to_revision, error: strconv.ParseInt: parsing "None": invalid syntax`)
	// Without grpc-gateway's annotated context the parser's name still gives the type.
	if got := describeParamError(context.Background(), in).Message(); got != "to_revision must be an integer" {
		t.Errorf("got %q", got)
	}
	other := status.New(codes.InvalidArgument, "name is a required field")
	if got := describeParamError(context.Background(), other); got != other {
		t.Errorf("another error was rewritten: %v", got)
	}
}

func TestBodyTypeErrorNamesFieldAndType(t *testing.T) {
	md := (&secretsv1.PutServiceRequest{}).ProtoReflect().Descriptor()
	update := (&secretsv1.UpdateCredentialRequest{}).ProtoReflect().Descriptor()
	tests := []struct {
		body, want string
	}{
		{`{"credentials": "abc"}`, "credentials must be a list of strings"},
		{`{"credentials": ["a", 1]}`, "credentials must be a list of strings"},
		{`{"credentials": [null]}`, "credentials must be a list of strings"},
		{`{"enabled": "yes"}`, "enabled must be a boolean"},
		{`{"account": 5}`, "account must be a string"},
		{`{"credentials": null, "enabled": true}`, ""},
	}
	for _, tt := range tests {
		if got := bodyTypeError(md, []byte(tt.body)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.body, got, tt.want)
		}
	}
	for body, want := range map[string]string{
		`{"credential_pairs": ["SECRET"]}`: "credential_pairs must be an object",
		`{"revision": "12"}`:               "", // protojson reads quoted integers
		`{"revision": 1.5}`:                "revision must be an integer",
		`{"tags": {}}`:                     "tags must be a list",
		`[1]`:                              "the body must be a JSON object",
	} {
		if got := bodyTypeError(update, []byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
