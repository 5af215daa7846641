package e2e

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gantry-dev/gantry/internal/stack"
	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/loginlink"
	"github.com/gantry-dev/gantry/services/secrets"
)

// chromium returns the browser the UI tests drive. Without one they skip on a developer machine but
// fail in CI (CI set), where .ci/run installs Debian's chromium.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: CI must install it (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium); the UI browser tests need it")
	return ""
}

// screenshotDir is GANTRY_UI_SCREENSHOTS, or a new temporary folder the test names in its log.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GANTRY_UI_SCREENSHOTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gantry-ui-screenshots-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// loginLink mints what `gantry login -user email` prints, with the stack's keyring.
func (s *testStack) loginLink(t *testing.T, email string) string {
	t.Helper()
	ring, err := kms.OpenKeyring(filepath.Join(s.cfg.DataDir, "keyring.json"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	code, err := loginlink.Mint(context.Background(), ring, kms.AliasUserAuth, s.cfg.Secrets.Auth.AuthContext, email, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s.rest + "/v1/login?code=" + code
}

// browserSession is one headless chromium tab with step helpers that assert what a person sees.
type browserSession struct {
	t        *testing.T
	ctx      context.Context
	shots    string
	stepWait time.Duration
}

func newBrowser(t *testing.T) *browserSession {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1366, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browserSession{t: t, ctx: ctx, shots: screenshotDir(t), stepWait: 20 * time.Second}
}

func (b *browserSession) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.stepWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		body, _ := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("body")))
		b.t.Fatalf("%s: %v\npage shows:\n%s", what, err, body)
	}
}

// value runs one action that reads something off the page.
func value[T any](b *browserSession, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.stepWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// xpathText is an XPath string literal for text (which holds no double quote in these tests).
func xpathText(text string) string { return `"` + text + `"` }

// see waits until the page shows text: the innermost element that holds all of it is visible.
func (b *browserSession) see(text string) {
	b.t.Helper()
	b.run("see "+text, chromedp.WaitVisible(`//*[contains(normalize-space(.), `+xpathText(text)+`) and not(*[contains(normalize-space(.), `+xpathText(text)+`)])]`))
}

// heading waits for the page's h1.
func (b *browserSession) heading(text string) {
	b.t.Helper()
	b.run("heading "+text, chromedp.WaitVisible(`//h1[normalize-space(.)=`+xpathText(text)+`]`))
}

// click presses the button or link whose text is text.
func (b *browserSession) click(text string) {
	b.t.Helper()
	sel := `//*[(self::button or self::a) and (normalize-space(.)=` + xpathText(text) + ` or @aria-label=` + xpathText(text) + `) and not(@disabled) and not(@hidden)]`
	b.run("click "+text, chromedp.WaitVisible(sel), chromedp.Click(sel))
}

func (b *browserSession) fill(id, value string) {
	b.t.Helper()
	b.run("fill "+id, chromedp.WaitVisible(chromedp.CSS("#"+id)), chromedp.SetValue(chromedp.CSS("#"+id), value))
}

func (b *browserSession) typeInto(id, value string) {
	b.t.Helper()
	b.run("type into "+id, chromedp.WaitVisible(chromedp.CSS("#"+id)), chromedp.SendKeys(chromedp.CSS("#"+id), value))
}

func (b *browserSession) screenshot(name string) {
	b.t.Helper()
	png := value(b, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browserSession) text(sel string) string {
	b.t.Helper()
	return value(b, "read "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// TestUIDoneWhenFlow is issue 18's flow as a person does it in the browser: log in with a one-time
// link, create a credential, edit it, read its history, diff two revisions, revert, map it to a
// service, meet a key conflict, archive it.
func TestUIDoneWhenFlow(t *testing.T) {
	s := startStack(t, nil)
	b := newBrowser(t)
	link := s.loginLink(t, "alice@example.com")

	// The link opens a session and lands on the credentials list; it works once.
	b.run("open the login link", chromedp.Navigate(link))
	b.heading("Credentials")
	b.see("Signed in as alice@example.com (session)") // the authentication method too (GET /v1/whoami)
	if title := value(b, "title", chromedp.Title()); title != "Credentials · gantry" {
		t.Errorf("title = %q", title)
	}
	if r := s.do(http.MethodGet, link, "", http.Header{"Authorization": {""}}); r.code != http.StatusUnauthorized || !strings.Contains(string(r.body), "already used") {
		t.Errorf("second use of the link: %d %s, want 401 already used", r.code, r.body)
	}

	// Create.
	b.click("New credential")
	b.heading("New credential")
	b.fill("name", "ui-db")
	b.fill("documentation", "orders database, rotate monthly")
	b.fill("pair-key-0", "DB_PASSWORD")
	b.fill("pair-value-0", "hunter2-first")
	b.screenshot("credential-new")
	b.click("Create")
	b.heading("Credential ui-db")
	if got := b.text("table.pairs tbody"); strings.Contains(got, "hunter2") || !strings.Contains(got, "••••") {
		t.Errorf("values shown before Reveal: %q", got)
	}
	b.click("Reveal values")
	b.see("hunter2-first")
	b.run("copy button", chromedp.WaitVisible(`//button[@aria-label="Copy the value of db_password"]`))
	if title := value(b, "title", chromedp.Title()); strings.Contains(title, "hunter2") {
		t.Errorf("a value is in the title %q", title)
	}
	b.screenshot("credential-view")

	// Edit: revision 2. The form hides the values until revealed, as the view page does (issue 40).
	b.click("Edit")
	b.heading("Edit credential ui-db")
	b.run("values hidden in the edit form", chromedp.WaitVisible(`//input[@id="pair-value-0" and @type="password"]`))
	b.click("Reveal values")
	b.run("values revealed in the edit form", chromedp.WaitVisible(`//input[@id="pair-value-0" and @type="text"]`))
	b.click("Hide values")
	b.run("values hidden again", chromedp.WaitVisible(`//input[@id="pair-value-0" and @type="password"]`))
	b.fill("pair-value-0", "hunter2-second")
	b.click("Save")
	b.heading("Credential ui-db")
	b.run("revision 2", chromedp.WaitVisible(`//dd[normalize-space(.)="2"]`))

	// History, diff of 1 and 2, revert to 1.
	b.click("History")
	b.heading("History of ui-db")
	b.see("2 (current)")
	b.click("Compare selected revisions")
	b.see("Differences between revisions 1 and 2")
	b.run("pairs diff", chromedp.WaitVisible(`//table[@class="diff"]//th[normalize-space(.)="credential_pairs"]`))
	if diff := b.text("table.diff"); strings.Contains(diff, "hunter2") {
		t.Errorf("the diff shows a value: %q", diff)
	}
	b.screenshot("credential-history-diff")
	b.click("Revert to 1")
	b.see("Reverted to revision 1: now revision 3.")
	b.see("3 (current)")

	// A second credential with the same key: mapping both to one service is a conflict, shown as such.
	s.call("POST", "/v1/credentials", map[string]any{"name": "ui-other", "documentation": "d",
		"credential_pairs": map[string]string{"db_password": "x"}}).must(t, 200)
	b.run("services page", chromedp.Navigate(s.rest+"/#/services/new"))
	b.heading("New service")
	b.fill("service-id", "orders")
	b.typeInto("cred-search", "ui-")
	b.click("Map ui-db") // by its aria-label below
	b.screenshot("service-edit")
	b.click("Save")
	b.heading("Service orders")
	b.see("ui-db")
	b.click("Map credentials")
	b.typeInto("cred-search", "ui-o")
	b.click("Map ui-other")
	b.click("Save")
	b.see("Conflicting key pairs in mapped service.")
	b.see("is in credentials ui-db, ui-other")
	b.screenshot("service-conflict")

	// Archive: unmap, disable, dry run, then for good.
	b.click("Unmap ui-other")
	b.click("Unmap ui-db")
	b.click("Save")
	b.heading("Service orders")
	b.see("No credentials mapped.")
	b.run("to the list", chromedp.Navigate(s.rest+"/#/credentials"))
	b.heading("Credentials")
	b.fill("search", "ui-d")
	b.run("search", chromedp.SendKeys(chromedp.CSS("#search"), "b"))
	b.click("ui-db")
	b.heading("Credential ui-db")
	b.click("Edit")
	b.heading("Edit credential ui-db")
	b.run("disable", chromedp.Click(chromedp.CSS("#enabled")))
	b.click("Save")
	b.heading("Credential ui-db")
	b.click("Archive (dry run)")
	b.see("Dry run: dry-run success")
	b.click("Archive for good")
	b.heading("Archived credentials")
	b.see("Archived ui-db.")
	b.click("Back to the credentials")
	b.heading("Credentials")
	b.see("ui-other")
	b.screenshot("credentials-list")
	if got := b.text("main table"); strings.Contains(got, "ui-db") {
		t.Errorf("archived credential still listed: %q", got)
	}
}

// TestUIErrorsAndHeaders: a page that cannot load shows why (here: no session), and the page and the
// API carry the security headers.
func TestUIErrorsAndHeaders(t *testing.T) {
	s := startStack(t, nil)
	page := s.do(http.MethodGet, s.rest+"/", "", http.Header{"Authorization": {""}})
	if page.code != 200 || !strings.Contains(page.header.Get("Content-Security-Policy"), "script-src 'self'") ||
		page.header.Get("X-Frame-Options") != "DENY" || page.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("page: %d %v", page.code, page.header)
	}
	if strings.Contains(string(page.body), "<script>") || strings.Contains(string(page.body), "style=") {
		t.Error("the page has inline script or style")
	}
	if r := s.get("/v1/credentials"); r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("API Cache-Control = %q, want no-store", r.header.Get("Cache-Control"))
	}
	if r := s.do(http.MethodGet, s.rest+"/v1/login?code=forged", "", http.Header{"Authorization": {""}}); r.code != 401 {
		t.Errorf("forged link: %d %s", r.code, r.body)
	}
	if r := s.admin("/"); strings.Contains(string(r.body), "<html") {
		t.Errorf("a text client got the dashboard: %s", r.body)
	}
	b := newBrowser(t)
	b.run("open", chromedp.Navigate(s.rest+"/"))
	b.heading("Log in")
	b.see("gantry login -user you@example.com")
	b.screenshot("login")

	// The admin dashboard: the live cluster table and the endpoint menu.
	b.run("admin", chromedp.Navigate(s.adm+"/"))
	b.heading("Clusters")
	b.run("a secrets host", chromedp.WaitVisible(`//td[normalize-space(.)="secrets"]`))
	b.run("menu", chromedp.WaitVisible(`//a[normalize-space(.)="/clusters"]`))
	b.see("updated")
	b.screenshot("admin-dashboard")
}

// TestUILoginCommand runs `gantry login` as a user does, opens the link it prints in chromium and
// lands signed in on the credentials list; opening it again shows why it no longer works, on a page.
// Neither the CLI's messages nor the server's logs hold the link's code, a bearer secret.
func TestUILoginCommand(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	s := startStackLogged(t, nil, zap.New(core))
	run := runGantry(t, t.TempDir(), nil, "", "login", "--user", "alice@example.com", "--data-dir", s.cfg.DataDir, "--url", s.rest).must(t, 0)
	link := strings.TrimSpace(run.stdout)
	code, ok := strings.CutPrefix(link, s.rest+"/v1/login?code=")
	if !ok || code == "" || strings.Contains(link, "\n") {
		t.Fatalf("gantry login printed %q, want one link %s/v1/login?code=...", run.stdout, s.rest)
	}
	if !strings.Contains(run.stderr, "it works once") || strings.Contains(run.stderr, code) {
		t.Errorf("gantry login said %q on stderr, want the instructions without the code", run.stderr)
	}

	b := newBrowser(t)
	b.run("open the printed link", chromedp.Navigate(link))
	b.heading("Credentials")
	b.see("Signed in as alice@example.com")
	if url := value(b, "location", chromedp.Location()); strings.Contains(url, code) {
		t.Errorf("the browser stayed on the link's URL %q", url)
	}

	b.run("open the link again", chromedp.Navigate(link))
	b.heading("Login failed")
	b.see("already used; run gantry login again for a new link")
	b.see("gantry login -user you@example.com")
	if title := value(b, "title", chromedp.Title()); title != "Login failed · gantry" {
		t.Errorf("title = %q", title)
	}
	b.screenshot("login-link-used")
	b.click("Back to gantry")
	b.heading("Credentials") // the session of the first use still holds

	// Log out: the page says so, and the session is refused from then on although the browser
	// could still present its cookie (the server recorded its end).
	var session string
	b.run("read the session cookie", chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		got, err := cdp.Call(ctx, target, network.GetCookies, network.GetCookiesParams{})
		if err != nil {
			return err
		}
		for _, c := range got.Cookies {
			if c.Name == "confidant_session" {
				session = c.Value
			}
		}
		return nil
	}))
	b.click("Log out")
	b.heading("Log in")
	b.see("You are logged out")
	// The header's links lead to the login page in words, never to the API's 401 for programs over
	// an empty table (issue 40).
	for _, link := range []string{"Credentials", "Services"} {
		b.click(link)
		b.heading("Log in")
		b.see("You are not signed in.")
		if shown := value(b, "error box", chromedp.Evaluate[bool](`!document.getElementById('error').hidden`)); shown {
			t.Errorf("after logging out, %s shows the error box %q", link, b.text("#error"))
		}
	}
	b.run("reload", chromedp.Reload())
	b.heading("Log in")
	if session == "" {
		t.Fatal("no session cookie in the browser before logging out")
	}
	r := s.do("GET", s.rest+"/v1/user/email", "", http.Header{"Authorization": {""}, "Cookie": {"confidant_session=" + session}})
	if r.code != http.StatusUnauthorized || !strings.Contains(string(r.body), "session ended") {
		t.Errorf("the logged-out session's cookie, presented again: %d %s, want 401 session ended", r.code, r.body)
	}

	for _, e := range logs.All() {
		if line := fmt.Sprint(e.Message, e.ContextMap()); strings.Contains(line, code) {
			t.Errorf("a log entry holds the login code: %s", e.Message)
		}
	}
}

// disabled waits until the page shows a button with text that cannot be pressed.
func (b *browserSession) disabled(text string) {
	b.t.Helper()
	b.run("disabled "+text, chromedp.WaitVisible(`//button[normalize-space(.)=`+xpathText(text)+` and @disabled]`))
}

// offeredNot fails unless no link or button with text can be pressed on the page (a disabled button
// with it may be shown).
func (b *browserSession) offeredNot(text string) {
	b.t.Helper()
	b.run("not offered: "+text, chromedp.WaitNotVisible(`//*[(self::a or self::button) and normalize-space(.)=`+xpathText(text)+` and not(@disabled)]`))
}

// allowDownloads makes the browser save downloads into a new folder, which it returns.
func (b *browserSession) allowDownloads() string {
	b.t.Helper()
	dir := b.t.TempDir()
	b.run("allow downloads", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior,
			browser.SetDownloadBehaviorParams{Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir})
		return err
	}))
	return dir
}

// downloaded waits for the browser to finish saving name into dir and returns its content.
func downloaded(t *testing.T, dir, name string) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil && len(data) > 0 {
			return data
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(dir)
			t.Fatalf("no download %s after 20s; the folder holds %v", name, entries)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pemBlocks decodes every PEM block of data, failing unless there is at least one and nothing else.
func pemBlocks(t *testing.T, name string, data []byte) []*pem.Block {
	t.Helper()
	var blocks []*pem.Block
	rest := data
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 || strings.TrimSpace(string(rest)) != "" {
		t.Fatalf("%s is not PEM: %q", name, data)
	}
	return blocks
}

// TestUIServicesCertificatesAndPermissions walks the pages the done-when flow does not: a service's
// history, diff and revert; issuing a certificate and downloading its key and chain; the buttons a
// user's permission hints forbid; maintenance mode from client_config.
func TestUIServicesCertificatesAndPermissions(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	doc := `
rules:
  - principals: ["user:alice@example.com", "user:alice"]
    resources: ["*"]
    actions: ["*"]
  - principals: ["user:bob@example.com"]
    resources: ["credential:*"]
    actions: ["list", "metadata"]
`
	if err := os.WriteFile(policy, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	touch := filepath.Join(t.TempDir(), "maintenance")
	s := startStack(t, func(c *stack.Config) {
		c.Secrets.ACLModule = "policy"
		c.Secrets.ACLPolicyFile = policy
		c.Secrets.MaintenanceModeTouchFile = touch
		c.Secrets.Certs.PerCA = map[string]secrets.CASettings{"development": {DomainRegex: certDomain, MaxValidityDays: 30}}
	})
	db := s.createCredential("orders-db", map[string]any{"password": "p1"})
	s.call("PUT", "/v1/credentials/"+db, map[string]any{"credential_pairs": map[string]any{"password": "p2"}}).must(t, 200)
	queue := s.createCredential("orders-queue", map[string]any{"queue_token": "q1"})
	s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{db}}).must(t, 200)
	s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{db, queue}}).must(t, 200)

	b := newBrowser(t)
	b.run("log in as alice", chromedp.Navigate(s.loginLink(t, "alice@example.com")))
	b.heading("Credentials")

	// A service's history: two revisions, their diff names the credential added, revert to 1.
	b.run("the service", chromedp.Navigate(s.rest+"/#/services/orders"))
	b.heading("Service orders")
	b.see("orders-queue")
	b.click("History")
	b.heading("History of service orders")
	b.see("2 (current)")
	b.click("Compare selected revisions")
	b.see("Differences between revisions 1 and 2")
	if diff := b.text("table.diff"); !strings.Contains(diff, queue) && !strings.Contains(diff, "orders-queue") {
		t.Errorf("the diff of revisions 1 and 2 does not name the added credential: %q", diff)
	}
	b.screenshot("service-history-diff")
	b.click("Revert to 1")
	b.see("Reverted to revision 1: now revision 3.")
	b.see("3 (current)")
	b.click("Back to the service")
	b.heading("Service orders")
	if got := b.text("main table"); strings.Contains(got, "orders-queue") || !strings.Contains(got, "orders-db") {
		t.Errorf("after the revert the service maps %q, want orders-db only", got)
	}

	// Certificates: the CA list, issuing, and the key and chain downloaded as PEM files.
	downloads := b.allowDownloads()
	b.click("Certificates")
	b.heading("Certificate authorities")
	b.see("development")
	b.click("Issue a certificate")
	b.heading("Issue a certificate from development")
	b.fill("cn", "api.example.com")
	b.fill("validity", "7")
	b.click("Issue")
	b.see("Issued a certificate for api.example.com.")
	b.screenshot("certificate-issued")
	b.click("Download key")
	b.click("Download certificate")
	b.click("Download chain")
	keyBlocks := pemBlocks(t, "the key", downloaded(t, downloads, "api.example.com.key"))
	key, err := x509.ParsePKCS8PrivateKey(keyBlocks[0].Bytes)
	if err != nil {
		if key, err = x509.ParseECPrivateKey(keyBlocks[0].Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(keyBlocks[0].Bytes); err != nil {
				t.Fatalf("the downloaded key (%s) does not parse: %v", keyBlocks[0].Type, err)
			}
		}
	}
	leafBlocks := pemBlocks(t, "the certificate", downloaded(t, downloads, "api.example.com.crt"))
	leaf, err := x509.ParseCertificate(leafBlocks[0].Bytes)
	if err != nil {
		t.Fatalf("the downloaded certificate does not parse: %v", err)
	}
	if pub, ok := key.(interface{ Public() crypto.PublicKey }); !ok || !leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(pub.Public()) {
		t.Error("the downloaded key is not the certificate's")
	}
	roots := x509.NewCertPool()
	for i, blk := range pemBlocks(t, "the chain", downloaded(t, downloads, "development-chain.pem")) {
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("certificate %d of the downloaded chain does not parse: %v", i, err)
		}
		roots.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("the downloaded certificate does not verify against the downloaded chain: %v", err)
	}

	// Bob may list and read metadata only: the hints disable what he may not do.
	b.run("log in as bob", chromedp.Navigate(s.loginLink(t, "bob@example.com")))
	b.heading("Credentials")
	b.see("Signed in as bob@example.com")
	b.click("orders-db")
	b.heading("Credential orders-db")
	b.disabled("Edit")
	b.offeredNot("Edit")
	b.disabled("Reveal values")
	b.screenshot("credential-read-only")

	// Maintenance mode, read from client_config when the page loads: the banner, and every change disabled.
	b.run("log in as alice again", chromedp.Navigate(s.loginLink(t, "alice@example.com")))
	b.heading("Credentials")
	b.run("New credential offered", chromedp.WaitVisible(`//a[normalize-space(.)="New credential"]`))
	if err := os.WriteFile(touch, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b.run("the credential in maintenance mode", chromedp.Navigate(s.rest+"/#/credentials/"+db), chromedp.Reload())
	b.heading("Credential orders-db")
	b.see("Maintenance mode: the server refuses every change; reading works.")
	b.disabled("Edit")
	b.offeredNot("Edit")
	b.disabled("Archive (dry run)")
	b.click("Reveal values") // reading works
	b.see("p2")
	b.click("History")
	b.heading("History of orders-db")
	b.run("no revert", chromedp.WaitVisible(`//button[starts-with(normalize-space(.), "Revert to") and @disabled]`))
	b.run("services in maintenance mode", chromedp.Navigate(s.rest+"/#/services/orders"))
	b.heading("Service orders")
	b.disabled("Map credentials")
	b.offeredNot("Map credentials")
	b.run("credentials list", chromedp.Navigate(s.rest+"/#/credentials"))
	b.heading("Credentials")
	b.offeredNot("New credential")
	b.screenshot("maintenance-mode")
}

// TestUIEverydayConfidantTasks is what Confidant's UI users do every day, tried as a new user would
// (issue 25): the login page in words a person reads, tags set in the form, Disable and Enable in
// one click, an archive that is refused saying what to do first (and the buttons to do it), the
// archived credentials' own page, and Certificates offered only to those the ACL lets list them.
func TestUIEverydayConfidantTasks(t *testing.T) {
	s := startStack(t, nil) // the default ACL: users may do everything but certificates
	b := newBrowser(t)

	b.run("open without a session", chromedp.Navigate(s.rest+"/"))
	b.heading("Log in")
	b.see("You are not signed in.")
	if got := b.text("main"); strings.Contains(got, "kmsauth") || strings.Contains(got, "authentication required") {
		t.Errorf("the login page shows the API's message to programs: %q", got)
	}

	b.run("log in", chromedp.Navigate(s.loginLink(t, "alice@example.com")))
	b.heading("Credentials")
	b.offeredNot("Certificates")

	// Tags in the form, shown on the view page, kept by an edit.
	b.click("New credential")
	b.heading("New credential")
	b.fill("name", "ui-tagged")
	b.fill("documentation", "tagged in the form")
	b.fill("tags", "pci, team-a, pci")
	b.fill("pair-key-0", "token")
	b.fill("pair-value-0", "v1")
	b.click("Create")
	b.heading("Credential ui-tagged")
	b.run("tags shown", chromedp.WaitVisible(`//span[@class="tag" and normalize-space(.)="team-a"]`))
	id := strings.TrimPrefix(value(b, "location", chromedp.Location()), s.rest+"/#/credentials/")
	if got := s.get("/v1/credentials/"+id+"?metadata_only=True").must(t, 200); fmt.Sprint(got["tags"]) != "[pci team-a]" {
		t.Errorf("tags stored: %v, want [pci team-a]", got["tags"])
	}
	b.click("Edit")
	b.heading("Edit credential ui-tagged")
	if got := value(b, "tags field", chromedp.Value(chromedp.CSS("#tags"))); got != "pci, team-a" {
		t.Errorf("the edit form's tags = %q, want the stored ones", got)
	}
	b.fill("tags", "team-a")
	b.click("Save")
	b.heading("Credential ui-tagged")
	b.run("one tag left", chromedp.WaitNotPresent(`//span[@class="tag" and normalize-space(.)="pci"]`))

	// Mapped and enabled: the dry run says why not and what to do, with the buttons to do it.
	s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{id}}).must(t, 200)
	b.run("reload", chromedp.Reload())
	b.heading("Credential ui-tagged")
	b.click("Archive (dry run)")
	b.see("ui-tagged cannot be archived yet: Credential still enabled.")
	b.see("Only a disabled credential that no service maps can be archived.")
	b.screenshot("archive-refused")
	b.click("Disable now")
	b.run("disabled", chromedp.WaitVisible(`//dt[normalize-space(.)="Enabled"]/following-sibling::dd[1][normalize-space(.)="no"]`))
	b.click("Archive (dry run)")
	b.see("ui-tagged cannot be archived yet: Credential has mapped services.")
	b.click("service orders")
	b.heading("Map credentials of orders")
	b.click("Unmap ui-tagged")
	b.click("Save")
	b.heading("Service orders")

	// The service's own Disable and Enable keep its mappings.
	s.call("PUT", "/v1/services/orders", map[string]any{"credentials": []string{s.createCredential("ui-kept", map[string]any{"k": "v"})}}).must(t, 200)
	b.run("reload the service", chromedp.Reload())
	b.heading("Service orders")
	enabledIs := func(v string) {
		b.run("service enabled "+v, chromedp.WaitVisible(`//dt[normalize-space(.)="Enabled"]/following-sibling::dd[1][normalize-space(.)="`+v+`"]`))
	}
	b.click("Disable")
	enabledIs("no")
	b.click("Enable") // the page reloaded with the other button
	enabledIs("yes")  // and again, once the enable is written
	b.see("ui-kept")
	if got := s.get("/v1/services/orders?metadata_only=True"); got.json(t)["enabled"] != true || !strings.Contains(string(got.body), "ui-kept") {
		t.Errorf("after Disable and Enable the service is %s", got.body)
	}
	if got := s.get("/v1/archive/services/orders").must(t, 200); len(got["revisions"].([]any)) != 5 {
		t.Errorf("want 5 service revisions (map, unmap, map, disable, enable): %v", got)
	}

	// Now it archives, and the archived credential has a page.
	b.run("the credential", chromedp.Navigate(s.rest+"/#/credentials/"+id))
	b.heading("Credential ui-tagged")
	b.click("Archive (dry run)")
	b.click("Archive for good")
	b.heading("Archived credentials")
	b.see("Archived ui-tagged.")
	b.run("listed", chromedp.WaitVisible(`//td[normalize-space(.)="`+id+`"]`))
	b.see("tagged in the form")
	b.screenshot("archived-credentials")
	b.click("Back to the credentials")
	b.heading("Credentials")
	b.click("Archived credentials")
	b.heading("Archived credentials")
	b.see("ui-tagged")
}
