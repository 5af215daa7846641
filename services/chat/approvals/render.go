package approvals

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
	"github.com/gantry-dev/gantry/services/chat/events"
)

// Message is a Slack message: its blocks, and the plain text Slack shows where blocks are not shown
// (notifications, screen readers, old clients).
type Message struct {
	Text   string
	Blocks []Block
}

// Block is one Block Kit block, as Slack's JSON has it.
type Block = map[string]any

// Change request statuses, as the secrets service names them.
const (
	StatusPending    = "pending"
	StatusApplied    = "applied"
	StatusRejected   = "rejected"
	StatusCancelled  = "cancelled"
	StatusExpired    = "expired"
	StatusStale      = "stale"
	StatusFailed     = "failed"
	StatusBreakGlass = "break_glass"
)

// Bounds that keep a message within Slack's limits (3000 characters per section text, 50 blocks) and
// readable, whatever the names and the reason hold.
const (
	maxListed    = 20   // names shown per list of the summary; the rest are counted
	maxName      = 100  // runes of one name or id
	maxReason    = 1000 // runes of a reason
	maxSection   = 2900 // runes of one section's text
	maxFallback  = 3000 // runes of the plain text
	maxPrincipal = 200  // runes of a principal
)

// RenderChange is the Slack message of a change request: who asks, to do what to which credential or
// service, what changes (by name, from the summary the secrets service gives: never a value), the
// reason, the expiry and the approvals so far. A pending request has an Approve and a Reject button
// (block_id events.ApprovalBlockID, value the request's id); any other status has none and a line
// saying how the request ended. A break-glass change, applied at once without approval, is a loud
// notice naming who did it and why.
func RenderChange(cr *secretsv1.ChangeRequest) Message {
	who := principal(cr.GetRequestedBy())
	resource := resourceMarkdown(cr)
	var head string
	if cr.GetStatus() == StatusBreakGlass {
		head = fmt.Sprintf(":rotating_light: *BREAK GLASS* :rotating_light: %s changed %s without approval (%s).", who, resource, escape(cr.GetAction()))
	} else {
		head = fmt.Sprintf(":lock: %s asks to *%s* %s.", who, escape(cr.GetAction()), resource)
	}
	blocks := []Block{
		section(head),
		section("*Changes*\n" + strings.Join(changeLines(cr), "\n")),
		section("*Reason:* " + reasonMarkdown(cr.GetReason())),
	}
	var facts []string
	if cr.GetStatus() == StatusBreakGlass {
		facts = append(facts, "Applied at once, without approval")
		if rev := cr.GetAppliedRevision(); rev != nil {
			facts = append(facts, fmt.Sprintf("revision %d", rev.GetValue()))
		}
	} else {
		facts = append(facts, approvalsMarkdown(cr))
		if cr.GetStatus() == StatusPending && cr.GetExpiryDate() != "" {
			facts = append(facts, "expires "+dateMarkdown(cr.GetExpiryDate()))
		}
	}
	facts = append(facts, "request "+code(cr.GetId()))
	blocks = append(blocks, contextBlock(strings.Join(facts, " · ")))
	switch cr.GetStatus() {
	case StatusPending:
		blocks = append(blocks, buttons(cr))
	case StatusBreakGlass:
	default:
		blocks = append(blocks, section(statusMarkdown(cr)))
	}
	return Message{Text: changeText(cr), Blocks: blocks}
}

// changeText is the plain text of a change request's message: the same facts in one line, without
// the list of changes.
func changeText(cr *secretsv1.ChangeRequest) string {
	who := clip(cr.GetRequestedBy(), maxPrincipal)
	resource := resourcePlain(cr)
	var text string
	switch cr.GetStatus() {
	case StatusBreakGlass:
		text = fmt.Sprintf(":rotating_light: BREAK GLASS: %s changed %s without approval (%s). Reason: %s", who, resource, cr.GetAction(), reasonPlain(cr.GetReason()))
	case StatusPending:
		text = fmt.Sprintf("Change request %s: %s asks to %s %s. Reason: %s. Approvals: %d of %d.", cr.GetId(), who, cr.GetAction(), resource,
			reasonPlain(cr.GetReason()), len(cr.GetApprovals()), cr.GetApprovalsRequired())
	default:
		text = fmt.Sprintf("Change request %s: %s asks to %s %s. %s", cr.GetId(), who, cr.GetAction(), resource, statusPlain(cr))
	}
	// Slack reads &, < and > as markup in the fallback text too.
	return escape(clip(text, maxFallback))
}

// resourceMarkdown names the credential (its name and id) or the service (its id) of a request.
func resourceMarkdown(cr *secretsv1.ChangeRequest) string {
	id := code(cr.GetResourceId())
	switch cr.GetResourceType() {
	case "credential":
		if cr.GetResourceName() == "" {
			return "credential " + id
		}
		return fmt.Sprintf("credential *%s* (%s)", escape(clip(cr.GetResourceName(), maxName)), id)
	case "service":
		return "service " + id
	}
	return escape(cr.GetResourceType()) + " " + id
}

func resourcePlain(cr *secretsv1.ChangeRequest) string {
	id := clip(cr.GetResourceId(), maxName)
	if cr.GetResourceType() == "credential" && cr.GetResourceName() != "" {
		return fmt.Sprintf("credential %s (%s)", clip(cr.GetResourceName(), maxName), id)
	}
	return cr.GetResourceType() + " " + id
}

// changeLines lists what a request changes, one bullet per kind, from its summary alone: key and
// metadata names, mapped and unmapped credentials, the new name, the enabled flag, other fields and
// the revision a revert brings back.
func changeLines(cr *secretsv1.ChangeRequest) []string {
	s := cr.GetChanges()
	var lines []string
	add := func(label string, names []string) {
		if len(names) > 0 {
			lines = append(lines, "• "+label+": "+codeList(names))
		}
	}
	add("keys added", s.GetKeysAdded())
	add("keys removed", s.GetKeysRemoved())
	add("keys changed (values not shown)", s.GetKeysChanged())
	add("metadata keys changed", s.GetMetadataChanged())
	add("credentials mapped", s.GetCredentialsAdded())
	add("credentials unmapped", s.GetCredentialsRemoved())
	add("blind credentials mapped", s.GetBlindCredentialsAdded())
	add("blind credentials unmapped", s.GetBlindCredentialsRemoved())
	if n := s.GetName(); n != nil {
		lines = append(lines, "• renamed to "+code(n.GetValue()))
	}
	if e := s.GetEnabled(); e != nil {
		if e.GetValue() {
			lines = append(lines, "• enables it")
		} else {
			lines = append(lines, "• disables it")
		}
	}
	if f := s.GetFieldsChanged(); len(f) > 0 {
		lines = append(lines, "• also changes: "+escape(strings.Join(clipAll(f), ", ")))
	}
	if r := s.GetToRevision(); r != nil {
		lines = append(lines, fmt.Sprintf("• brings back revision %d", r.GetValue()))
	}
	if len(lines) == 0 {
		switch cr.GetAction() {
		case "archive":
			lines = append(lines, "• archives the credential")
		default:
			lines = append(lines, "• no field named")
		}
	}
	return lines
}

// approvalsMarkdown is "Approvals: n of m", with who approved.
func approvalsMarkdown(cr *secretsv1.ChangeRequest) string {
	out := fmt.Sprintf("Approvals: %d of %d", len(cr.GetApprovals()), cr.GetApprovalsRequired())
	if by := approvers(cr); len(by) > 0 {
		out += " (" + strings.Join(by, ", ") + ")"
	}
	return out
}

// approvers are the principals that approved a request, in order.
func approvers(cr *secretsv1.ChangeRequest) []string {
	var by []string
	for _, a := range cr.GetApprovals() {
		by = append(by, principal(a.GetBy()))
	}
	return by
}

// statusMarkdown is the line that ends the message of a request no longer pending.
func statusMarkdown(cr *secretsv1.ChangeRequest) string {
	switch cr.GetStatus() {
	case StatusApplied:
		out := ":white_check_mark: *Applied*"
		if by := approvers(cr); len(by) > 0 {
			out += ", approved by " + strings.Join(by, ", ")
		}
		if rev := cr.GetAppliedRevision(); rev != nil {
			out += fmt.Sprintf("; applied revision %d", rev.GetValue())
		}
		return out + "."
	case StatusRejected:
		return ":no_entry_sign: *Rejected* by " + principal(cr.GetDecidedBy()) + decisionReason(cr) + "."
	case StatusCancelled:
		return ":heavy_multiplication_x: *Cancelled* by " + principal(cr.GetDecidedBy()) + decisionReason(cr) + "."
	case StatusExpired:
		return fmt.Sprintf(":hourglass: *Expired* with %d of %d approvals; nothing applied.", len(cr.GetApprovals()), cr.GetApprovalsRequired())
	case StatusStale:
		return ":warning: *Stale*: the record changed before approval; nothing applied."
	case StatusFailed:
		return ":x: *Failed*: approved by " + strings.Join(approvers(cr), ", ") + ", but refused when applied" + decisionReason(cr) + "; nothing applied."
	}
	return "Status: *" + escape(cr.GetStatus()) + "*"
}

func statusPlain(cr *secretsv1.ChangeRequest) string {
	switch cr.GetStatus() {
	case StatusApplied:
		if rev := cr.GetAppliedRevision(); rev != nil {
			return fmt.Sprintf("Applied (revision %d).", rev.GetValue())
		}
		return "Applied."
	case StatusRejected:
		return "Rejected by " + clip(cr.GetDecidedBy(), maxPrincipal) + decisionReasonPlain(cr) + "."
	case StatusCancelled:
		return "Cancelled by " + clip(cr.GetDecidedBy(), maxPrincipal) + decisionReasonPlain(cr) + "."
	case StatusExpired:
		return "Expired; nothing applied."
	case StatusStale:
		return "Stale: the record changed before approval; nothing applied."
	case StatusFailed:
		return "Failed: refused when applied" + decisionReasonPlain(cr) + "; nothing applied."
	}
	return "Status: " + cr.GetStatus() + "."
}

func decisionReason(cr *secretsv1.ChangeRequest) string {
	if cr.GetDecisionReason() == "" {
		return ""
	}
	return " (" + reasonMarkdown(cr.GetDecisionReason()) + ")"
}

func decisionReasonPlain(cr *secretsv1.ChangeRequest) string {
	if cr.GetDecisionReason() == "" {
		return ""
	}
	return " (" + clip(cr.GetDecisionReason(), maxReason) + ")"
}

// buttons are the Approve and Reject buttons of a pending request; Reject asks first.
func buttons(cr *secretsv1.ChangeRequest) Block {
	approve := Block{"type": "button", "action_id": events.ApprovalApprove, "text": plain("Approve"), "style": "primary", "value": cr.GetId()}
	reject := Block{"type": "button", "action_id": events.ApprovalReject, "text": plain("Reject"), "style": "danger", "value": cr.GetId(),
		"confirm": Block{
			"title":   plain("Reject this change?"),
			"text":    plain("The change request is closed and nothing is applied; the requester has to ask again."),
			"confirm": plain("Reject"),
			"deny":    plain("Keep it open"),
			"style":   "danger",
		}}
	return Block{"type": "actions", "block_id": events.ApprovalBlockID, "elements": []any{approve, reject}}
}

// RenderReminder is the Slack message of a credential due or overdue for rotation: its name and id,
// the date, when it was last rotated and the services that map it.
func RenderReminder(d *secretsv1.DueCredential) Message {
	name := fmt.Sprintf("*%s* (%s)", escape(clip(d.GetName(), maxName)), code(d.GetId()))
	var head, text string
	if d.GetState() == "overdue" {
		head = fmt.Sprintf(":rotating_light: Credential %s is *overdue* for rotation: it was due %s.", name, dateMarkdown(d.GetNextRotationDate()))
		text = fmt.Sprintf("Credential %s (%s) is overdue for rotation: it was due %s.", d.GetName(), d.GetId(), d.GetNextRotationDate())
	} else {
		head = fmt.Sprintf(":alarm_clock: Credential %s is due for rotation on %s.", name, dateMarkdown(d.GetNextRotationDate()))
		text = fmt.Sprintf("Credential %s (%s) is due for rotation on %s.", d.GetName(), d.GetId(), d.GetNextRotationDate())
	}
	last := "Never rotated (no rotation recorded)"
	if l := d.GetLastRotationDate(); l != nil {
		last = "Last rotated " + dateMarkdown(l.GetValue())
	}
	services := "mapped to no service"
	if s := d.GetServices(); len(s) > 0 {
		services = "used by services " + codeList(s)
		text += " Services: " + strings.Join(clipAll(s), ", ") + "."
	}
	return Message{
		Text:   escape(clip(text, maxFallback)),
		Blocks: []Block{section(head), contextBlock(last + " · " + services)},
	}
}

func section(markdown string) Block {
	return Block{"type": "section", "text": Block{"type": "mrkdwn", "text": clip(markdown, maxSection)}}
}

func contextBlock(markdown string) Block {
	return Block{"type": "context", "elements": []any{Block{"type": "mrkdwn", "text": clip(markdown, maxSection)}}}
}

func plain(text string) Block {
	return Block{"type": "plain_text", "text": text}
}

// escape makes text literal in Slack's markup: &, < and > are its control characters, so a name or a
// reason holding "<!channel>" or a link is shown, never acted on.
func escape(text string) string {
	return markupEscaper.Replace(text)
}

var markupEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// code shows a name as code; a backquote in it would end the span, so it becomes a quote.
func code(name string) string {
	return "`" + escape(strings.ReplaceAll(clip(name, maxName), "`", "'")) + "`"
}

// codeList shows names as code, the first maxListed of them, and how many more there are.
func codeList(names []string) string {
	shown := names
	if len(shown) > maxListed {
		shown = shown[:maxListed]
	}
	parts := make([]string, len(shown))
	for i, n := range shown {
		parts[i] = code(n)
	}
	out := strings.Join(parts, ", ")
	if more := len(names) - len(shown); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

func clipAll(names []string) []string {
	out := make([]string, 0, min(len(names), maxListed))
	for i, n := range names {
		if i == maxListed {
			out = append(out, fmt.Sprintf("and %d more", len(names)-maxListed))
			break
		}
		out = append(out, clip(n, maxName))
	}
	return out
}

// principal shows who asked or approved (user:<email> or service:<id>) in bold.
func principal(p string) string {
	if p == "" {
		return "*someone*"
	}
	return "*" + escape(clip(p, maxPrincipal)) + "*"
}

func reasonMarkdown(reason string) string {
	if strings.TrimSpace(reason) == "" {
		return "_none given_"
	}
	return escape(clip(reason, maxReason))
}

func reasonPlain(reason string) string {
	if strings.TrimSpace(reason) == "" {
		return "none given"
	}
	return clip(reason, maxReason)
}

// dateMarkdown shows an ISO 8601 timestamp as Slack's date markup, which each reader sees in their
// own time zone, with the timestamp itself as the fallback; one Slack cannot read is shown as it is.
func dateMarkdown(iso string) string {
	t, err := time.Parse(time.RFC3339, iso)
	if err != nil {
		return escape(clip(iso, maxName))
	}
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", t.Unix(), t.UTC().Format(time.RFC3339))
}

// clip cuts text to at most n runes, marking the cut with an ellipsis.
func clip(text string, n int) string {
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	r := []rune(text)
	return string(r[:n-1]) + "…"
}
