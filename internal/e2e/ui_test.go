package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/pkg/loginlink"
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

// loginLink mints what `gantry login --user email` prints, with the stack's keyring.
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
	b.see("Signed in as alice@example.com")
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

	// Edit: revision 2.
	b.click("Edit")
	b.heading("Edit credential ui-db")
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
	b.see("gantry login --user you@example.com")
	b.screenshot("login")

	// The admin dashboard: the live cluster table and the endpoint menu.
	b.run("admin", chromedp.Navigate(s.adm+"/"))
	b.heading("Clusters")
	b.run("a secrets host", chromedp.WaitVisible(`//td[normalize-space(.)="secrets"]`))
	b.run("menu", chromedp.WaitVisible(`//a[normalize-space(.)="/clusters"]`))
	b.see("updated")
	b.screenshot("admin-dashboard")
}
