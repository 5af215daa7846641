package confidant_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	awskms "github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/services/secrets/confidant"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// throttledSource is Confidant's KMS through the import's retryer (pauses of at most 1 ms here).
func throttledSource(t *testing.T, e *env) kms.Provider {
	t.Helper()
	source, err := kms.NewAWS(context.Background(), kms.AWSConfig{Region: kmstest.Region, Endpoint: e.kmsFake.URL()}, nil,
		func(o *awskms.Options) { o.Retryer = confidant.KMSRetryer(time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	return source
}

// TestImportWaitsOutKMSThrottling: AWS KMS answering ThrottlingException (the account's request
// quota, shared with production) is retried with backoff until it answers, up to
// confidant.KMSMaxAttempts tries, and the import succeeds; throttling that outlasts them fails the
// credential as "run again", never as damage: -skip-damaged records no revision as missing for it.
func TestImportWaitsOutKMSThrottling(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ctx := context.Background()
	id, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: "db", Pairs: map[string]string{"password": "v1"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.table.UpdateCredential(ctx, id, func(c *confidanttest.Credential) { c.Pairs["password"] = "v2" }); err != nil {
		t.Fatal(err)
	}
	source := throttledSource(t, e)

	// Throttled 9 times: the SDK's default retryer (3 tries) would have failed the credential.
	e.kmsFake.FailNext(confidant.KMSMaxAttempts-1, http.StatusBadRequest, "ThrottlingException")
	rep, err := confidant.Run(ctx, e.scanner, source, e.importer, confidant.Options{Table: tableName, Workers: 1, DryRun: true})
	if err != nil || !rep.OK() || rep.Credentials.Written != 2 {
		t.Fatalf("throttled %d times: %v\n%s", confidant.KMSMaxAttempts-1, err, reportText(rep))
	}
	if got := e.kmsFake.Requests("Decrypt"); got != confidant.KMSMaxAttempts+1 {
		t.Errorf("Decrypt requests = %d, want %d (one revision retried to its last try, the other at once)", got, confidant.KMSMaxAttempts+1)
	}

	// Throttled on every try of the first Decrypt, with -skip-damaged: a failure to run again.
	e.kmsFake.FailNext(confidant.KMSMaxAttempts, http.StatusBadRequest, "ThrottlingException")
	rep, err = confidant.Run(ctx, e.scanner, source, e.importer, confidant.Options{Table: tableName, Workers: 1, SkipDamaged: true})
	if err != nil || rep.OK() || len(rep.Failures) != 1 || !rep.Failures[0].Retry || rep.Credentials.Missing != 0 || rep.Credentials.Written != 0 {
		t.Fatalf("throttled on every try: want one failure marked retry, nothing recorded as missing: %v\n%s", err, reportText(rep))
	}
	if !strings.Contains(rep.Failures[0].Reason, "ThrottlingException") {
		t.Errorf("the failure does not say KMS throttled: %s", rep.Failures[0].Reason)
	}
	rep, err = confidant.Run(ctx, e.scanner, source, e.importer, confidant.Options{Table: tableName, Workers: 1})
	if err != nil || !rep.OK() || rep.Credentials.Written != 2 || rep.Credentials.Verified != 2 {
		t.Fatalf("the run after: %v\n%s", err, reportText(rep))
	}
}

// TestImportKMSRateCapsDecrypts: -import-kms-rate spaces the Decrypt calls: 4 revisions at 20 calls
// per second take at least the 3 intervals between them, whatever the workers (a lower bound only,
// which load cannot break).
func TestImportKMSRateCapsDecrypts(t *testing.T) {
	e := newEnv(t, newBolt(t))
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		id, err := e.table.CreateCredential(ctx, confidanttest.Credential{Name: name, Pairs: map[string]string{"k": "v1"}, Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.table.UpdateCredential(ctx, id, func(c *confidanttest.Credential) { c.Pairs["k"] = "v2" }); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	rep, err := confidant.Run(ctx, e.scanner, e.source, e.importer, confidant.Options{Table: tableName, Workers: 4, KMSRate: 20})
	if err != nil || !rep.OK() || rep.Credentials.Written != 4 {
		t.Fatalf("%v\n%s", err, reportText(rep))
	}
	if took := time.Since(start); took < 3*time.Second/20 {
		t.Errorf("4 Decrypt calls at 20/s took %v, less than 3 intervals of 50ms", took)
	}
}

func reportText(rep *confidant.Report) string {
	if rep == nil {
		return "(no report)"
	}
	var b strings.Builder
	rep.WriteText(&b)
	return b.String()
}

// TestImportProgressRedrawn: for a terminal (ProgressRedraw) each phase is one line rewritten in
// place ("\r", blanks over a longer line before it) and ended with its total and time and a newline;
// no secret is ever in it.
func TestImportProgressRedrawn(t *testing.T) {
	e := newEnv(t, newBolt(t))
	_, values := e.seed(t)
	var out strings.Builder
	rep, err := confidant.Run(context.Background(), e.scanner, e.source, e.importer,
		confidant.Options{Table: tableName, Workers: 2, Progress: &out, ProgressRedraw: true, ProgressInterval: time.Hour})
	if err != nil || !rep.OK() {
		t.Fatalf("%v\n%s", err, reportText(rep))
	}
	total := rep.Credentials.Revisions + rep.Services.Revisions
	for _, want := range []string{
		fmt.Sprintf("\rimport: reading table %s: %d items in ", tableName, rep.Items),
		fmt.Sprintf("\rimport: importing: %d/%d revisions in ", total, total),
		fmt.Sprintf("\rimport: verifying: %d/%d revisions in ", rep.Credentials.Verified+rep.Services.Verified, rep.Credentials.Verified+rep.Services.Verified),
	} {
		i := strings.Index(out.String(), want)
		if i < 0 || !strings.Contains(out.String()[i:], "/s") || !strings.Contains(out.String()[i:], "\n") {
			t.Errorf("progress lacks the phase's last line %q:\n%q", want, out.String())
		}
	}
	for _, v := range values {
		if strings.Contains(out.String(), v) {
			t.Fatalf("a secret value in the progress: %s...", v[:3])
		}
	}
}
