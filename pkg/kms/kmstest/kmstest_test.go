package kmstest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"

	"github.com/gantry-dev/gantry/pkg/awstest"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/testwait"
)

func newServer(t *testing.T) *kmstest.Server {
	t.Helper()
	srv := kmstest.NewServer()
	t.Cleanup(srv.Close)
	return srv
}

// newClient is a bare SDK client (no shared config, no retries), so these tests see exactly what
// the fake answered.
func newClient(srv *kmstest.Server) *awskms.Client {
	return awskms.New(awskms.Options{
		Region:       kmstest.Region,
		BaseEndpoint: aws.String(srv.URL()),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		Retryer:      awstest.ConnectionRetriesOnly(),
	})
}

func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// post sends a raw request, to check the wire format rather than what the SDK makes of it.
func post(t *testing.T, srv *kmstest.Server, method, target, contentType, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if target != "" {
		req.Header.Set("X-Amz-Target", target)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("response %q is not a JSON object: %v", data, err)
	}
	return resp.StatusCode, resp.Header, out
}

func TestWireProtocol(t *testing.T) {
	srv := newServer(t)
	const ct = "application/x-amz-json-1.1"
	tests := []struct {
		name, method, target, contentType, body string
		wantStatus                              int
		wantType                                string // __type of an error answer
	}{
		{"unknown operation", "POST", "TrentService.Frobnicate", ct, "{}", 400, "UnknownOperationException"},
		{"other service", "POST", "DynamoDB_20120810.Encrypt", ct, "{}", 400, "UnknownOperationException"},
		{"no target", "POST", "", ct, "{}", 400, "UnknownOperationException"},
		{"GET", "GET", "TrentService.GenerateRandom", ct, "", 400, "UnknownOperationException"},
		{"wrong content type", "POST", "TrentService.GenerateRandom", "application/json", `{"NumberOfBytes":4}`, 400, "SerializationException"},
		{"bad JSON", "POST", "TrentService.GenerateRandom", ct, `{"NumberOfBytes":`, 400, "SerializationException"},
		{"out of range", "POST", "TrentService.GenerateRandom", ct, `{"NumberOfBytes":1025}`, 400, "ValidationException"},
		{"unknown key", "POST", "TrentService.DescribeKey", ct, `{"KeyId":"alias/none"}`, 400, "NotFoundException"},
		{"success", "POST", "TrentService.GenerateRandom", ct, `{"NumberOfBytes":4}`, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, header, body := post(t, srv, tt.method, tt.target, tt.contentType, tt.body)
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %v)", status, tt.wantStatus, body)
			}
			if got := header.Get("Content-Type"); got != ct {
				t.Errorf("Content-Type = %q, want %q", got, ct)
			}
			if got, _ := body["__type"].(string); got != tt.wantType {
				t.Errorf("__type = %q, want %q", got, tt.wantType)
			}
			if tt.wantType != "" {
				if msg, _ := body["message"].(string); msg == "" {
					t.Error("error answer has no message")
				}
			}
		})
	}
	if n := srv.Requests("GenerateRandom"); n != 5 {
		t.Errorf("Requests(GenerateRandom) = %d, want 5", n)
	}
}

func TestEncryptDecrypt(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	client := newClient(srv)
	arn := srv.CreateKey("alias/one")
	otherARN := srv.CreateKey("")
	keyUUID := arn[strings.LastIndex(arn, "/")+1:]
	ec := map[string]string{"a": "1"}

	for _, keyID := range []string{"alias/one", arn, keyUUID, "arn:aws:kms:us-east-1:111122223333:alias/one"} {
		t.Run(keyID, func(t *testing.T) {
			enc, err := client.Encrypt(ctx, &awskms.EncryptInput{KeyId: aws.String(keyID), Plaintext: []byte("hi"), EncryptionContext: ec})
			if err != nil {
				t.Fatal(err)
			}
			if aws.ToString(enc.KeyId) != arn {
				t.Errorf("Encrypt KeyId = %q, want %q", aws.ToString(enc.KeyId), arn)
			}
			dec, err := client.Decrypt(ctx, &awskms.DecryptInput{CiphertextBlob: enc.CiphertextBlob, EncryptionContext: ec})
			if err != nil {
				t.Fatal(err)
			}
			if string(dec.Plaintext) != "hi" || aws.ToString(dec.KeyId) != arn {
				t.Errorf("Decrypt = %q, %q; want \"hi\", %q", dec.Plaintext, aws.ToString(dec.KeyId), arn)
			}
		})
	}

	enc, err := client.Encrypt(ctx, &awskms.EncryptInput{KeyId: aws.String(arn), Plaintext: []byte("hi"), EncryptionContext: ec})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		in       *awskms.DecryptInput
		wantCode string
		wantType any
	}{
		{"wrong context", &awskms.DecryptInput{CiphertextBlob: enc.CiphertextBlob, EncryptionContext: map[string]string{"a": "2"}},
			"InvalidCiphertextException", new(*types.InvalidCiphertextException)},
		{"no context", &awskms.DecryptInput{CiphertextBlob: enc.CiphertextBlob},
			"InvalidCiphertextException", new(*types.InvalidCiphertextException)},
		{"garbage", &awskms.DecryptInput{CiphertextBlob: []byte("garbage"), EncryptionContext: ec},
			"InvalidCiphertextException", new(*types.InvalidCiphertextException)},
		{"other key named", &awskms.DecryptInput{CiphertextBlob: enc.CiphertextBlob, EncryptionContext: ec, KeyId: aws.String(otherARN)},
			"IncorrectKeyException", new(*types.IncorrectKeyException)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Decrypt(ctx, tt.in)
			if code := errorCode(err); code != tt.wantCode {
				t.Fatalf("err = %v (code %q), want %s", err, code, tt.wantCode)
			}
			// The SDK decodes modelled errors into their types only if the wire format is right.
			if !errors.As(err, tt.wantType) {
				t.Errorf("err %T is not decoded as %T", err, tt.wantType)
			}
		})
	}
	if _, err := client.Decrypt(ctx, &awskms.DecryptInput{CiphertextBlob: enc.CiphertextBlob, EncryptionContext: ec, KeyId: aws.String("alias/one")}); err != nil {
		t.Errorf("Decrypt naming the right key: %v", err)
	}
}

func TestGenerateDataKey(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	client := newClient(srv)
	srv.CreateKey("alias/dk")
	tests := []struct {
		name     string
		in       awskms.GenerateDataKeyInput
		wantLen  int
		wantCode string
	}{
		{"AES_256", awskms.GenerateDataKeyInput{KeySpec: types.DataKeySpecAes256}, 32, ""},
		{"AES_128", awskms.GenerateDataKeyInput{KeySpec: types.DataKeySpecAes128}, 16, ""},
		{"NumberOfBytes", awskms.GenerateDataKeyInput{NumberOfBytes: aws.Int32(48)}, 48, ""},
		{"neither", awskms.GenerateDataKeyInput{}, 0, "ValidationException"},
		{"both", awskms.GenerateDataKeyInput{KeySpec: types.DataKeySpecAes256, NumberOfBytes: aws.Int32(32)}, 0, "ValidationException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.KeyId = aws.String("alias/dk")
			out, err := client.GenerateDataKey(ctx, &in)
			if code := errorCode(err); code != tt.wantCode || (tt.wantCode == "" && err != nil) {
				t.Fatalf("err = %v, want code %q", err, tt.wantCode)
			}
			if err != nil {
				return
			}
			if len(out.Plaintext) != tt.wantLen {
				t.Errorf("data key is %d bytes, want %d", len(out.Plaintext), tt.wantLen)
			}
			dec, err := client.Decrypt(ctx, &awskms.DecryptInput{CiphertextBlob: out.CiphertextBlob})
			if err != nil || !bytes.Equal(dec.Plaintext, out.Plaintext) {
				t.Errorf("Decrypt = %x, %v; want %x", dec.Plaintext, err, out.Plaintext)
			}
		})
	}
}

func TestDescribeKey(t *testing.T) {
	srv := newServer(t)
	arn := srv.CreateKey("alias/d")
	out, err := newClient(srv).DescribeKey(context.Background(), &awskms.DescribeKeyInput{KeyId: aws.String("alias/d")})
	if err != nil {
		t.Fatal(err)
	}
	md := out.KeyMetadata
	if aws.ToString(md.Arn) != arn || !strings.HasSuffix(arn, aws.ToString(md.KeyId)) || !md.Enabled ||
		md.KeyState != types.KeyStateEnabled || md.KeyUsage != types.KeyUsageTypeEncryptDecrypt || md.CreationDate == nil {
		t.Errorf("KeyMetadata = %+v", md)
	}
	if !strings.HasPrefix(arn, "arn:aws:kms:us-east-1:111122223333:key/") {
		t.Errorf("ARN %q is not in the fake's region and account", arn)
	}
}

func TestGrants(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	client := newClient(srv)
	arn := srv.CreateKey("alias/g")
	constraints := &types.GrantConstraints{EncryptionContextSubset: map[string]string{"tenant": "t1"}}

	create := func(grantee, name string) *awskms.CreateGrantOutput {
		t.Helper()
		out, err := client.CreateGrant(ctx, &awskms.CreateGrantInput{
			KeyId:            aws.String(arn),
			GranteePrincipal: aws.String(grantee),
			Operations:       []types.GrantOperation{types.GrantOperationDecrypt, types.GrantOperationEncrypt},
			Constraints:      constraints,
			Name:             aws.String(name),
		})
		if err != nil {
			t.Fatal(err)
		}
		if aws.ToString(out.GrantId) == "" || aws.ToString(out.GrantToken) == "" {
			t.Fatalf("CreateGrant = %+v, want a grant id and token", out)
		}
		return out
	}
	g1 := create("arn:aws:iam::111122223333:role/a", "first")
	g2 := create("arn:aws:iam::111122223333:role/b", "second")
	if again := create("arn:aws:iam::111122223333:role/a", "first"); aws.ToString(again.GrantId) != aws.ToString(g1.GrantId) {
		t.Error("repeating a named CreateGrant made a second grant; KMS returns the existing one")
	}

	grants := srv.Grants(arn)
	if len(grants) != 2 {
		t.Fatalf("Grants = %+v, want 2", grants)
	}
	if g := grants[0]; g.GrantID != aws.ToString(g1.GrantId) || g.GranteePrincipal != "arn:aws:iam::111122223333:role/a" ||
		strings.Join(g.Operations, ",") != "Decrypt,Encrypt" || g.Constraints.EncryptionContextSubset["tenant"] != "t1" {
		t.Errorf("first grant = %+v", g)
	}
	grants[0].Operations[0] = "changed"
	if srv.Grants(arn)[0].Operations[0] != "Decrypt" {
		t.Error("Grants returned the fake's own slices instead of copies")
	}

	listTests := []struct {
		name    string
		in      awskms.ListGrantsInput
		wantIDs []string
	}{
		{"all", awskms.ListGrantsInput{}, []string{aws.ToString(g1.GrantId), aws.ToString(g2.GrantId)}},
		{"by grantee", awskms.ListGrantsInput{GranteePrincipal: aws.String("arn:aws:iam::111122223333:role/b")}, []string{aws.ToString(g2.GrantId)}},
		{"by grant id", awskms.ListGrantsInput{GrantId: g1.GrantId}, []string{aws.ToString(g1.GrantId)}},
		{"by unknown grantee", awskms.ListGrantsInput{GranteePrincipal: aws.String("nobody")}, nil},
	}
	for _, tt := range listTests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.KeyId = aws.String(arn)
			out, err := client.ListGrants(ctx, &in)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, g := range out.Grants {
				ids = append(ids, aws.ToString(g.GrantId))
				if aws.ToString(g.KeyId) != arn || len(g.Operations) != 2 || g.Constraints == nil {
					t.Errorf("grant entry = %+v", g)
				}
			}
			if strings.Join(ids, ",") != strings.Join(tt.wantIDs, ",") {
				t.Errorf("grant ids = %v, want %v", ids, tt.wantIDs)
			}
		})
	}

	t.Run("pagination", func(t *testing.T) {
		var ids []string
		pages := awskms.NewListGrantsPaginator(client, &awskms.ListGrantsInput{KeyId: aws.String(arn), Limit: aws.Int32(1)})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range page.Grants {
				ids = append(ids, aws.ToString(g.GrantId))
			}
		}
		if len(ids) != 2 || ids[0] != aws.ToString(g1.GrantId) || ids[1] != aws.ToString(g2.GrantId) {
			t.Errorf("paged grant ids = %v", ids)
		}
	})

	errTests := []struct {
		name     string
		call     func() error
		wantCode string
	}{
		{"CreateGrant with an alias", func() error {
			_, err := client.CreateGrant(ctx, &awskms.CreateGrantInput{KeyId: aws.String("alias/g"),
				GranteePrincipal: aws.String("x"), Operations: []types.GrantOperation{types.GrantOperationDecrypt}})
			return err
		}, "ValidationException"},
		{"CreateGrant with a bad operation", func() error {
			_, err := client.CreateGrant(ctx, &awskms.CreateGrantInput{KeyId: aws.String(arn),
				GranteePrincipal: aws.String("x"), Operations: []types.GrantOperation{"Frobnicate"}})
			return err
		}, "ValidationException"},
		{"ListGrants of an unknown key", func() error {
			_, err := client.ListGrants(ctx, &awskms.ListGrantsInput{KeyId: aws.String("arn:aws:kms:us-east-1:111122223333:key/00000000-0000-4000-8000-000000000000")})
			return err
		}, "NotFoundException"},
		{"RevokeGrant of an unknown grant", func() error {
			_, err := client.RevokeGrant(ctx, &awskms.RevokeGrantInput{KeyId: aws.String(arn), GrantId: aws.String("nope")})
			return err
		}, "NotFoundException"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); errorCode(err) != tt.wantCode {
				t.Errorf("err = %v, want %s", err, tt.wantCode)
			}
		})
	}

	if _, err := client.RevokeGrant(ctx, &awskms.RevokeGrantInput{KeyId: aws.String(arn), GrantId: g1.GrantId}); err != nil {
		t.Fatal(err)
	}
	if grants := srv.Grants(arn); len(grants) != 1 || grants[0].GrantID != aws.ToString(g2.GrantId) {
		t.Errorf("after RevokeGrant, Grants = %+v, want only the second", grants)
	}
	if srv.Grants("arn:aws:kms:us-east-1:111122223333:key/00000000-0000-4000-8000-000000000000") != nil {
		t.Error("Grants of an unknown key is not nil")
	}
}

func TestFailNext(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	client := newClient(srv)
	srv.CreateKey("alias/f")
	srv.FailNext(2, http.StatusInternalServerError, "KMSInternalException")

	describe := func() error {
		_, err := client.DescribeKey(ctx, &awskms.DescribeKeyInput{KeyId: aws.String("alias/f")})
		return err
	}
	for i := range 2 {
		err := describe()
		var internal *types.KMSInternalException
		if !errors.As(err, &internal) {
			t.Fatalf("request %d: err = %v, want KMSInternalException", i, err)
		}
		var respErr interface{ HTTPStatusCode() int }
		if !errors.As(err, &respErr) || respErr.HTTPStatusCode() != http.StatusInternalServerError {
			t.Errorf("request %d: status is not 500: %v", i, err)
		}
	}
	if err := describe(); err != nil {
		t.Errorf("third request: %v, want success once the injected failures are used up", err)
	}
	if n := srv.Requests("DescribeKey"); n != 3 {
		t.Errorf("Requests(DescribeKey) = %d, want 3", n)
	}
	if n := srv.Requests("Encrypt"); n != 0 {
		t.Errorf("Requests(Encrypt) = %d, want 0", n)
	}
}

func TestCreateKeyRejectsBadAliases(t *testing.T) {
	srv := newServer(t)
	srv.CreateKey("alias/taken")
	for _, alias := range []string{"alias/taken", "taken", "alias/"} {
		t.Run(alias, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("CreateKey(%q) did not panic", alias)
				}
			}()
			srv.CreateKey(alias)
		})
	}
}

// TestLatencyAndHold: SetLatency delays every answer by at least its duration (a lower bound, which
// load cannot break), and Hold keeps a request, counted on arrival, unanswered until its channel is
// closed; neither holds the fake's lock, so other requests are answered meanwhile.
func TestLatencyAndHold(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	client := newClient(srv)
	srv.CreateKey("alias/l")
	describe := func() error {
		_, err := client.DescribeKey(ctx, &awskms.DescribeKeyInput{KeyId: aws.String("alias/l")})
		return err
	}

	srv.SetLatency(50 * time.Millisecond)
	start := time.Now()
	if err := describe(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("an answer with 50ms of latency came after %v", took)
	}
	srv.SetLatency(0)

	hold := make(chan struct{})
	srv.Hold(hold)
	answered := make(chan error, 1)
	go func() { answered <- describe() }()
	testwait.Until(t, "the held request to arrive", func() bool { return srv.Requests("DescribeKey") == 2 })
	srv.Hold(nil) // requests from now on are answered at once, while the first one stays held
	if err := describe(); err != nil {
		t.Fatalf("a request after Hold(nil): %v", err)
	}
	select {
	case err := <-answered:
		t.Fatalf("the held request was answered before its channel closed: %v", err)
	default:
	}
	close(hold)
	if err := <-answered; err != nil {
		t.Fatalf("the held request, released: %v", err)
	}
}
