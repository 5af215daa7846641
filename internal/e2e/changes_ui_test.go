package e2e

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// choose selects value in the select element id, as a person picking it does (a change event).
func (b *browserSession) choose(id, option string) {
	b.t.Helper()
	js := `(() => { const s = document.getElementById(` + xpathText(id) + `); s.value = ` + xpathText(option) + `;
		s.dispatchEvent(new Event('change')); return s.value === ` + xpathText(option) + `; })()`
	b.run("wait for #"+id, chromedp.WaitVisible(chromedp.CSS("#"+id)))
	if !value(b, "choose "+option+" in #"+id, chromedp.Evaluate[bool](js)) {
		b.t.Fatalf("#%s has no option %q", id, option)
	}
}

// notOffered fails unless the page has no button or link with text at all (offeredNot needs one
// that is hidden or disabled).
func (b *browserSession) notOffered(text string) {
	b.t.Helper()
	b.run("no "+text, chromedp.WaitNotPresent(`//*[(self::a or self::button) and normalize-space(.)=`+xpathText(text)+`]`))
}

// followHeld follows the link of a held-for-approval notice to its change request's page and
// returns the request's id.
func (b *browserSession) followHeld(rest string) string {
	b.t.Helper()
	link := `//div[@class="held"]//a[starts-with(normalize-space(.), "Follow change request ")]`
	b.run("follow the held change", chromedp.WaitVisible(link), chromedp.Click(link))
	b.run("the change request's page", chromedp.WaitVisible(`//h1[starts-with(normalize-space(.), "Change request ")]`))
	return strings.TrimPrefix(value(b, "location", chromedp.Location()), rest+"/#/changes/")
}

// TestUIChangeRequests is approval of secret changes as people do it in the browser (issue 45): a
// save of a protected credential says it is held for approval with a link to its request, instead
// of "saved"; the request's page names the changed key (never a value), the requester and the
// reason, and offers the requester Cancel only; another user approves it and the change is applied;
// a held Disable on a service's page is rejected with a reason; a requester cancels a held service
// mapping; the list filters by status. Every decision is a browser write (with the XSRF token).
func TestUIChangeRequests(t *testing.T) {
	s := clientApprovalStack(t)
	db := s.createCredential("prod-db", map[string]any{"db_password": "first-secret"})
	// The service exists before anyone edits it: made by oncall, who may break glass.
	s.as("oncall", "PUT", "/v1/services/prod-orders", map[string]any{"credentials": []string{}, "break_glass": true, "change_reason": "setup"}).must(t, 200)
	b := newBrowser(t)

	// Alice edits the protected credential with a reason: held, the form says so, nothing is saved.
	b.run("log in as alice", chromedp.Navigate(s.loginLink(t, "alice@example.com")))
	b.heading("Credentials")
	b.run("edit prod-db", chromedp.Navigate(s.rest+"/#/credentials/"+db+"/edit"))
	b.heading("Edit credential prod-db")
	b.fill("pair-value-0", "second-secret")
	b.fill("change-reason", "quarterly rotation")
	b.click("Save")
	b.see("Held for approval: nothing is saved yet.")
	b.see("waits for 1 more approval")
	b.screenshot("change-held")
	if got := s.get("/v1/credentials/"+db).must(t, 200); got["revision"] != float64(1) || !strings.Contains(toJSON(t, got), "first-secret") {
		t.Fatalf("a held save was written: %v", got)
	}
	// The link leads to the request: the key by name, never a value; the requester may only cancel.
	request := b.followHeld(s.rest)
	b.heading("Change request " + request)
	if pending := s.get("/v1/changes?status=pending").must(t, 200)["change_requests"].([]any); len(pending) != 1 || pending[0].(map[string]any)["id"] != request {
		t.Fatalf("pending requests: %v, want %s alone", pending, request)
	}
	b.see("Pending: not applied yet, waiting for 1 more approval.")
	b.see("db_password")
	b.see("quarterly rotation")
	b.see("user:alice@example.com")
	b.see("You made this request: another approver decides it; you may cancel it.")
	b.notOffered("Approve")
	b.notOffered("Reject")
	b.run("cancel offered", chromedp.WaitVisible(`//button[normalize-space(.)="Cancel request"]`))
	if got := b.text("main"); strings.Contains(got, "second-secret") || strings.Contains(got, "first-secret") {
		t.Errorf("the request's page shows a value: %q", got)
	}
	b.screenshot("change-request-requester")

	// The Changes page lists it, pending by default.
	b.click("Changes")
	b.heading("Change requests")
	b.run("listed", chromedp.WaitVisible(`//a[@aria-label="Change request `+request+`"]`))
	b.see("update credential prod-db")

	// Bob approves: applied as revision 2, the new value is there.
	b.run("log in as bob", chromedp.Navigate(s.loginLink(t, "bob@example.com")))
	b.heading("Credentials")
	b.run("the request", chromedp.Navigate(s.rest+"/#/changes/"+request))
	b.heading("Change request " + request)
	b.notOffered("Cancel request")
	b.screenshot("change-request-approver")
	b.click("Approve")
	b.see("You approved it. Applied as revision 2.")
	b.see("Applied as revision 2.")
	if got := s.get("/v1/credentials/"+db).must(t, 200); got["revision"] != float64(2) || !strings.Contains(toJSON(t, got), "second-secret") {
		t.Fatalf("after approval: %v", got)
	}

	// Bob disables the protected service from its page: held; Alice rejects it with a reason.
	b.run("the service", chromedp.Navigate(s.rest+"/#/services/prod-orders"))
	b.heading("Service prod-orders")
	b.click("Disable")
	b.see("Held for approval: nothing is saved yet.")
	disable := b.followHeld(s.rest)
	b.run("log in as alice again", chromedp.Navigate(s.loginLink(t, "alice@example.com")))
	b.heading("Credentials")
	b.run("the disable request", chromedp.Navigate(s.rest+"/#/changes/"+disable))
	b.see("Enabled")
	b.fill("decision-reason", "not during the freeze")
	b.click("Reject")
	b.see("You rejected it. Rejected by user:alice@example.com: nothing was written.")
	b.see("not during the freeze")
	if got := s.get("/v1/services/prod-orders?metadata_only=True").must(t, 200); got["enabled"] != true {
		t.Errorf("a rejected disable was written: %v", got)
	}

	// Alice maps the credential to the service with a reason: held; she cancels it.
	b.run("map credentials", chromedp.Navigate(s.rest+"/#/services/prod-orders/edit"))
	b.heading("Map credentials of prod-orders")
	b.typeInto("cred-search", "prod-")
	b.click("Map prod-db")
	b.fill("change-reason", "launch")
	b.click("Save")
	b.see("Held for approval: nothing is saved yet.")
	b.followHeld(s.rest)
	b.see("Credentials mapped")
	b.fill("decision-reason", "wrong service")
	b.click("Cancel request")
	b.see("You cancelled it. Cancelled by user:alice@example.com: nothing was written.")

	// The list by status: none pending; under all, the three requests and oncall's break glass.
	b.click("Back to the change requests")
	b.heading("Change requests")
	b.see("No pending change requests.")
	b.choose("status-filter", "")
	b.run("all listed", chromedp.WaitVisible(`//a[@aria-label="Change request `+disable+`"]`))
	if n := value(b, "rows", chromedp.Evaluate[int](`document.querySelectorAll('main tbody tr').length`)); n != 4 {
		t.Errorf("all: %d rows, want 4", n)
	}
	b.run("the break glass", chromedp.WaitVisible(`//td/span[normalize-space(.)="break glass"]`))
	b.screenshot("change-requests-all")
	b.choose("status-filter", "rejected")
	b.run("rejected only", chromedp.WaitNotPresent(`//a[@aria-label="Change request `+request+`"]`))
	b.run("the rejected one", chromedp.WaitVisible(`//a[@aria-label="Change request `+disable+`"]`))
}
