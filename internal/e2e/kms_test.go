package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/kmsauth"
)

// TestSecretsOnAWSKMS runs the secrets service on the AWS KMS provider (the real aws-sdk-go-v2 client
// against an in-repo server speaking the KMS JSON protocol) and checks that KMS faults become clear
// 503s that heal when the fault clears.
func TestSecretsOnAWSKMS(t *testing.T) {
	fake := kmstest.NewServer()
	defer fake.Close()
	master := fake.CreateKey("alias/confidant-production")
	fake.CreateKey("alias/gantry-auth")
	userKey := fake.CreateKey("alias/gantry-user-auth")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")

	s := startStack(t, func(c *stack.Config) {
		c.Secrets.KMS = "aws"
		c.Secrets.KMSURL = fake.URL()
		c.Secrets.AWSRegion = kmstest.Region
		c.Secrets.KMSMasterKey = "alias/confidant-production"
	})
	// The first start of a store records its key-check value: one data key wrapped under the master key.
	atStart := fake.Requests("GenerateDataKey")
	if atStart != 1 {
		t.Errorf("GenerateDataKey calls at the first start = %d, want 1 (the key-check value)", atStart)
	}
	// Authenticate as a user whose token AWS KMS encrypted.
	provider, err := kms.NewAWS(context.Background(), kms.AWSConfig{Region: kmstest.Region, Endpoint: fake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := kmsauth.Generate(context.Background(), provider, userKey, kmsauth.Username{Version: 2, UserType: "user", From: "alice"}, "gantry", 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.asUser = "Basic " + base64.StdEncoding.EncodeToString([]byte("2/user/alice:"+tok))
	id := s.createCredential("db", map[string]any{"password": "via-aws"})
	jsonEqual(t, "pairs", s.get("/v1/credentials/"+id).must(t, 200)["credential_pairs"], `{"password":"via-aws"}`)
	if n := fake.Requests("GenerateDataKey") - atStart; n != 1 {
		t.Errorf("GenerateDataKey calls for one revision = %d, want 1 (one fresh data key per revision)", n)
	}
	if !strings.HasPrefix(master, "arn:aws:kms:") {
		t.Fatalf("fake key %q", master)
	}
	if v := s.get("/v1/value_generator").must(t, 200)["value"].(string); len(v) != 50 {
		t.Errorf("value_generator via KMS GenerateRandom: %q", v)
	}

	// A KMS outage: writes need a new data key and fail with 503, nothing is written.
	fake.FailNext(100, http.StatusInternalServerError, "KMSInternalException")
	r := s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "lost?"}})
	if r.code != http.StatusServiceUnavailable {
		t.Fatalf("update during a KMS outage: %d %s, want 503", r.code, r.body)
	}
	if msg, _ := r.json(t)["error"].(string); msg == "" || strings.Contains(msg, "KMSInternalException") {
		t.Errorf("error %q should be clear without KMS internals", msg)
	}
	fake.FailNext(0, 0, "")
	cur := s.get("/v1/credentials/"+id).must(t, 200)
	if cur["revision"] != 1.0 {
		t.Errorf("revision %v after a failed write, want 1", cur["revision"])
	}
	s.call("PUT", "/v1/credentials/"+id, map[string]any{"credential_pairs": map[string]any{"password": "healed"}}).must(t, 200)
}
