package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dynamotest"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/kms/kmstest"
	"github.com/gantry-dev/gantry/pkg/testwait"
	"github.com/gantry-dev/gantry/services/secrets/confidant/confidanttest"
)

// importFixture is Confidant's table and KMS as fakes, configured through Confidant's variables.
func importFixture(t *testing.T) *confidanttest.Table {
	t.Helper()
	table, _ := importFixtureKMS(t)
	return table
}

// importFixtureKMS is importFixture, with Confidant's KMS fake.
func importFixtureKMS(t *testing.T) (*confidanttest.Table, *kmstest.Server) {
	t.Helper()
	kmsFake := kmstest.NewServer()
	t.Cleanup(kmsFake.Close)
	kmsFake.CreateKey("alias/confidant")
	dynamo := dynamotest.NewServer()
	t.Cleanup(dynamo.Close)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example", "AWS_DEFAULT_REGION": kmstest.Region,
		"DYNAMODB_TABLE": "confidant-prod", "DYNAMODB_URL": dynamo.URL(), "GANTRY_IMPORT_KMS_URL": kmsFake.URL(),
	} {
		t.Setenv(k, v)
	}
	source, err := kms.NewAWS(context.Background(), kms.AWSConfig{Region: kmstest.Region, Endpoint: kmsFake.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := confidanttest.NewTable(dynamo, "confidant-prod", source, "alias/confidant")
	id, err := table.CreateCredential(context.Background(), confidanttest.Credential{Name: "db", Pairs: map[string]string{"password": "pa55-secret"}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	table.PutService("api", []string{id}, nil, nil)
	return table, kmsFake
}

func importCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := dispatch(append([]string{"import", "confidant"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestImportCommand: gantry import confidant configured by Confidant's variables imports, writes the
// JSON report, says "nothing to do" the second time, and never prints a secret or a progress line
// into a pipe; a dry run into a new data folder writes no record.
func TestImportCommand(t *testing.T) {
	importFixture(t)
	dir := filepath.Join(t.TempDir(), "data")
	reportFile := filepath.Join(t.TempDir(), "report.json")

	code, out, errOut := importCmd("-data-dir", filepath.Join(t.TempDir(), "dry"), "-dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || !strings.Contains(out, "1 to write") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = importCmd("-data-dir", dir, "-report-json", reportFile)
	if code != 0 || !strings.Contains(out, "verification:      passed") {
		t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Credentials struct{ Written, Verified int }
		Services    struct{ Written int }
		Failures    []any
	}
	if err := json.Unmarshal(data, &rep); err != nil || rep.Credentials.Written != 1 || rep.Credentials.Verified != 1 || rep.Services.Written != 1 || len(rep.Failures) != 0 {
		t.Fatalf("report JSON %s (%v)", data, err)
	}
	for _, s := range []string{out, errOut, string(data)} {
		if strings.Contains(s, "pa55-secret") {
			t.Fatalf("a secret value was printed:\n%s", s)
		}
		if strings.Contains(s, "\r") {
			t.Fatalf("a progress line went to a pipe:\n%q", s)
		}
	}

	code, out, errOut = importCmd("-data-dir", dir)
	if code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second run: exit %d\n%s%s", code, out, errOut)
	}
}

// TestImportCommandFailsOnAnyFailure: an unreadable revision makes the exit status 1.
func TestImportCommandFailsOnAnyFailure(t *testing.T) {
	table := importFixture(t)
	table.Srv.Put("confidant-prod", dynamotest.Item{"id": {"S": "broken"}, "data_type": {"S": "credential"}, "revision": {"N": "x"}})
	code, out, errOut := importCmd("-data-dir", filepath.Join(t.TempDir(), "data"))
	if code != 1 || !strings.Contains(out, "item broken") || !strings.Contains(out, "FAILED") {
		t.Fatalf("exit %d, want 1:\n%s%s", code, out, errOut)
	}
	if code, _, errOut := importCmd("-data-dir", t.TempDir(), "-import-workers", "0"); code != 2 || !strings.Contains(errOut, "import-workers") {
		t.Errorf("bad setting: exit %d: %s", code, errOut)
	}
}

// TestImportCommandCapturedArchiveTable: the table and archive table the real Confidant wrote,
// configured by Confidant's own variables (DYNAMODB_TABLE_ARCHIVE too), import with exit 0 and the
// archived credentials counted; the second run has nothing to do.
func TestImportCommandCapturedArchiveTable(t *testing.T) {
	kmsFake := kmstest.NewServer()
	t.Cleanup(kmsFake.Close)
	dynamo := dynamotest.NewServer()
	t.Cleanup(dynamo.Close)
	if _, err := confidanttest.LoadCaptured(dynamo, kmsFake); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example", "AWS_DEFAULT_REGION": kmstest.Region,
		"DYNAMODB_TABLE": confidanttest.CapturedTable, "DYNAMODB_TABLE_ARCHIVE": confidanttest.CapturedArchiveTable,
		"DYNAMODB_URL": dynamo.URL(), "GANTRY_IMPORT_KMS_URL": kmsFake.URL(),
	} {
		t.Setenv(k, v)
	}
	dir := filepath.Join(t.TempDir(), "data")
	reportFile := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := importCmd("-data-dir", dir, "-report-json", reportFile)
	if code != 0 || !strings.Contains(out, "2 moved to gantry's archive") || !strings.Contains(out, "verification:      passed") {
		t.Fatalf("import: exit %d\n%s%s", code, out, errOut)
	}
	data, err := os.ReadFile(reportFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		ArchiveTable        string                                           `json:"archive_table"`
		ArchivedCredentials struct{ Found, Written, Verified, Archived int } `json:"archived_credentials"`
	}
	if err := json.Unmarshal(data, &rep); err != nil || rep.ArchiveTable != confidanttest.CapturedArchiveTable ||
		rep.ArchivedCredentials.Found != 2 || rep.ArchivedCredentials.Written != 3 || rep.ArchivedCredentials.Verified != 3 || rep.ArchivedCredentials.Archived != 2 {
		t.Fatalf("report JSON %s (%v)", data, err)
	}
	for _, secret := range []string{"ftp-one", "ftp-two", "ldap-one", "hunter2", "sk_live"} {
		if strings.Contains(out+errOut+string(data), secret) {
			t.Fatalf("a secret value was printed: %s...", secret[:3])
		}
	}
	if code, out, errOut := importCmd("-data-dir", dir); code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("second run: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("DYNAMODB_TABLE_ARCHIVE", confidanttest.CapturedTable)
	if code, _, errOut := importCmd("-data-dir", dir); code != 2 || !strings.Contains(errOut, "dynamodb-table-archive") {
		t.Errorf("archive table = main table: exit %d: %s", code, errOut)
	}
}

// TestImportCommandWithConfidantsEnvFile: the settings of Confidant's env file that the import does
// not use never stop it (a SESSION_SECRET shorter than gantry serve accepts); Confidant's
// KMS_MASTER_KEY, which a local keyring lacks, is a bad setting (exit 2) that says what to set, and
// with it set the import runs (issue 41 items 3 and 4).
func TestImportCommandWithConfidantsEnvFile(t *testing.T) {
	importFixture(t)
	t.Setenv("SESSION_SECRET", strings.Repeat("s", 29))
	dir := filepath.Join(t.TempDir(), "data")
	t.Setenv("KMS_MASTER_KEY", "alias/confidant-master")
	code, out, errOut := importCmd("-data-dir", dir)
	if code != 2 || !strings.Contains(errOut, `"alias/confidant-master" is not in the local keyring`) || !strings.Contains(errOut, "-kms-master-key alias/gantry-master") {
		t.Fatalf("Confidant's KMS_MASTER_KEY with the local keyring: exit %d, want 2 naming the setting:\n%s%s", code, out, errOut)
	}
	code, out, errOut = importCmd("-data-dir", dir, "-kms-master-key", "alias/gantry-master")
	if code != 0 || !strings.Contains(out, "verification:      passed") {
		t.Fatalf("with -kms-master-key and a short SESSION_SECRET: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := importCmd("-data-dir", dir, "-kms-master-key", "alias/gantry-master", "-skip-damaged"); code != 0 {
		t.Errorf("-skip-damaged: exit %d: %s", code, errOut)
	}
	if _, help, _ := importCmd("-h"); !strings.Contains(help, "-skip-damaged\n    \timport what is intact") {
		t.Errorf("-h lacks -skip-damaged:\n%s", help)
	}
	t.Setenv("GANTRY_KMS", "nonsense")
	if code, _, errOut := importCmd("-data-dir", dir); code != 2 || !strings.Contains(errOut, "GANTRY_KMS") {
		t.Errorf("a bad setting the import uses: exit %d, want 2: %s", code, errOut)
	}
}

// TestImportCommandReportsRecordsBeyondTheLimits: a record beyond gantry's limits is imported and
// listed with the limit and the setting that raises it, never silently (issue 41 item 3).
func TestImportCommandReportsRecordsBeyondTheLimits(t *testing.T) {
	importFixture(t)
	t.Setenv("GANTRY_MAX_CREDENTIAL_VALUE_BYTES", "4")
	code, out, errOut := importCmd("-data-dir", filepath.Join(t.TempDir(), "data"))
	if code != 0 || !strings.Contains(out, "imported beyond gantry's limits") ||
		!strings.Contains(out, `the value of credential_pairs key "password" is 11 bytes long; the limit is 4 bytes (set by -max-credential-value-bytes or GANTRY_MAX_CREDENTIAL_VALUE_BYTES)`) ||
		strings.Contains(out, "pa55-secret") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// lockedBuffer is a stderr that a test reads while the command writes it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startImport runs gantry import confidant in the background; the channel gets its exit status.
func startImport(stdout io.Writer, stderr *lockedBuffer, args ...string) <-chan int {
	done := make(chan int, 1)
	go func() { done <- dispatch(append([]string{"import", "confidant"}, args...), stdout, stderr) }()
	return done
}

// TestImportCommandProgressLines: into a log (stderr not a terminal) the import writes a plain
// progress line every -import-progress-interval — done/total, rate, ETA — and a line with the total
// and time at the end of each phase, never a carriage return; -import-quiet writes none of them. The
// KMS fake holds the Decrypt until the test has seen a periodic line, so no timing is involved.
func TestImportCommandProgressLines(t *testing.T) {
	_, kmsFake := importFixtureKMS(t)
	hold := make(chan struct{})
	kmsFake.Hold(hold)
	var stdout, stderr lockedBuffer
	done := startImport(&stdout, &stderr, "-data-dir", filepath.Join(t.TempDir(), "data"), "-import-progress-interval", "1ms")
	testwait.Until(t, "a periodic progress line while Decrypt is held", func() bool {
		return strings.Contains(stderr.String(), "import: importing: 0/2 revisions (0%), 0 revisions/s, ETA unknown\n")
	})
	close(hold)
	if code := <-done; code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{"import: reading table confidant-prod: 4 items in ", "import: importing: 2/2 revisions in ", "import: verifying: 2/2 revisions in "} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") || strings.Contains(out+stdout.String(), "pa55-secret") {
		t.Errorf("a redrawn line or a secret in a log:\n%q", out)
	}

	// -import-quiet: the same run into a new folder, held the same way, writes no progress at all.
	hold = make(chan struct{})
	kmsFake.Hold(hold)
	before := kmsFake.Requests("Decrypt")
	stdout, stderr = lockedBuffer{}, lockedBuffer{}
	done = startImport(&stdout, &stderr, "-data-dir", filepath.Join(t.TempDir(), "quiet"), "-import-progress-interval", "1ms", "-import-quiet")
	testwait.Until(t, "the quiet run's Decrypt", func() bool { return kmsFake.Requests("Decrypt") > before })
	close(hold)
	if code := <-done; code != 0 || !strings.Contains(stdout.String(), "verification:      passed") {
		t.Fatalf("-import-quiet: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "import:") {
		t.Errorf("-import-quiet wrote progress:\n%s", stderr.String())
	}
	if code, _, errOut := importCmd("-data-dir", t.TempDir(), "-import-progress-interval", "0s"); code != 2 || !strings.Contains(errOut, "import-progress-interval") {
		t.Errorf("a zero interval: exit %d: %s", code, errOut)
	}
	if code, _, errOut := importCmd("-data-dir", t.TempDir(), "-import-kms-rate", "-1"); code != 2 || !strings.Contains(errOut, "import-kms-rate") {
		t.Errorf("a negative rate: exit %d: %s", code, errOut)
	}
}

// TestImportCommandWaitsOutKMSThrottling: the command's KMS client retries a ThrottlingException with
// backoff past the SDK's default 3 tries (pauses shortened to 1 ms here), and the import succeeds.
func TestImportCommandWaitsOutKMSThrottling(t *testing.T) {
	_, kmsFake := importFixtureKMS(t)
	defer func(d time.Duration) { importKMSMaxBackoff = d }(importKMSMaxBackoff)
	importKMSMaxBackoff = time.Millisecond
	before := kmsFake.Requests("Decrypt")
	kmsFake.FailNext(5, http.StatusBadRequest, "ThrottlingException")
	code, out, errOut := importCmd("-data-dir", filepath.Join(t.TempDir(), "data"))
	if code != 0 || !strings.Contains(out, "verification:      passed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if got := kmsFake.Requests("Decrypt") - before; got != 6 {
		t.Errorf("Decrypt requests = %d, want 6 (5 throttled, then answered)", got)
	}
}
