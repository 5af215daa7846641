package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gantry-dev/gantry/pkg/gantryclient"
)

func runChanges(args []string, stdout, stderr io.Writer) int {
	return runGroup("changes", "Change requests: writes to protected credentials and services, held until approvers agree (such a write exits 4).",
		changesActions(), args, stdout, stderr)
}

// changeStatuses are the statuses gantry changes list -status takes; "all" lists every one.
var changeStatuses = []string{"pending", "applied", "rejected", "cancelled", "expired", "stale", "failed", "break_glass", "all"}

func changesActions() []subcommand {
	return []subcommand{
		{name: "list", summary: "change requests you made or may see, newest first (-status pending by default)",
			examples: "  gantry changes list\n  gantry changes list -status all -output json | jq -r '.[] | [.id, .status] | @tsv'\n",
			flags: func(fs *flag.FlagSet) any {
				return fs.String("status", "pending", "only requests in this `status`: "+strings.Join(changeStatuses, ", "))
			},
			run: changesList},
		{name: "show", args: []string{"ID"}, summary: "one change request: what it changes (key names, never values), who asked and why, its approvals and status",
			examples: "  gantry changes show 7d1e...\n", run: changesShow},
		{name: "approve", args: []string{"ID"}, summary: "approve a pending change request (an approver of its rule, not the requester); the last approval needed applies it",
			examples: "  gantry changes approve 7d1e... -from bob\n", run: changesApprove},
		{name: "reject", args: []string{"ID"}, summary: "reject a pending change request (an approver of its rule, not the requester): nothing is written",
			examples: "  gantry changes reject 7d1e... -reason 'rotate on Monday instead'\n",
			flags:    addDecisionFlags, run: changesReject},
		{name: "cancel", args: []string{"ID"}, summary: "withdraw your own pending change request: nothing is written",
			examples: "  gantry changes cancel 7d1e... -reason 'wrong credential'\n",
			flags:    addDecisionFlags, run: changesCancel},
	}
}

// addDecisionFlags is the -reason of a rejection or a cancellation.
func addDecisionFlags(fs *flag.FlagSet) any {
	return fs.String("reason", "", "why: `text` shown on the request and to its requester")
}

func changesList(ctx context.Context, env *cliEnv, _ []string, flags any) error {
	status := *flags.(*string)
	if !slices.Contains(changeStatuses, status) {
		return usageErrorf("-status %q is not one of %s", status, strings.Join(changeStatuses, ", "))
	}
	if status == "all" {
		status = gantryclient.ChangeStatusAll
	}
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	requests, err := api.ListChangeRequests(ctx, status)
	if err != nil {
		return err
	}
	return printChangeRequests(env, requests, status)
}

func changesShow(ctx context.Context, env *cliEnv, args []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	req, err := api.GetChangeRequest(ctx, args[0])
	if err != nil {
		return err
	}
	return printChangeRequest(env, req)
}

func changesApprove(ctx context.Context, env *cliEnv, args []string, _ any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	req, err := api.ApproveChangeRequest(ctx, args[0])
	if err != nil {
		return err
	}
	return printChangeRequest(env, req)
}

func changesReject(ctx context.Context, env *cliEnv, args []string, flags any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	req, err := api.RejectChangeRequest(ctx, args[0], *flags.(*string))
	if err != nil {
		return err
	}
	return printChangeRequest(env, req)
}

func changesCancel(ctx context.Context, env *cliEnv, args []string, flags any) error {
	api, err := env.api(ctx)
	if err != nil {
		return err
	}
	req, err := api.CancelChangeRequest(ctx, args[0], *flags.(*string))
	if err != nil {
		return err
	}
	return printChangeRequest(env, req)
}

// changeFlags are the flags of a write that an approval rule may hold: why it is made, and breaking
// glass to apply it at once.
type changeFlags struct {
	reason     string
	breakGlass bool
}

func addChangeFlags(fs *flag.FlagSet) *changeFlags {
	f := &changeFlags{}
	fs.StringVar(&f.reason, "reason", "", "why the change is made: `text` shown to approvers when an approval rule holds it (required with -break-glass)")
	fs.BoolVar(&f.breakGlass, "break-glass", false, "apply at once although an approval rule protects the record (only principals the rule allows; needs -reason; approvers are notified and the audit trail records it)")
	return f
}

// change is the flags as the client's Change; -break-glass without -reason is a usage error, since
// the server refuses it too.
func (f *changeFlags) change() (gantryclient.Change, error) {
	if f.breakGlass && strings.TrimSpace(f.reason) == "" {
		return gantryclient.Change{}, usageErrorf("-break-glass needs -reason: say why the change cannot wait for approval")
	}
	return gantryclient.Change{Reason: f.reason, BreakGlass: f.breakGlass}, nil
}

// heldNote is what the help of a write that an approval rule may hold says about it.
const heldNote = "When an approval rule protects the record, nothing is written: the command prints the change request " +
	"(its id, status and approvals) on stdout, says so on stderr and exits 4; follow it with gantry changes show ID."

// reportHeld prints the change request of a held write on stdout, where a written record would have
// gone (so a script reads its id as it reads a record's), and returns err for exitCode, which says
// on stderr that nothing was written and exits 4.
func reportHeld(env *cliEnv, err error) error {
	if req, held := gantryclient.HeldForApproval(err); held {
		if printErr := printChangeRequest(env, *req); printErr != nil {
			return printErr
		}
	}
	return err
}

func printChangeRequests(env *cliEnv, requests []gantryclient.ChangeRequest, status string) error {
	if env.json {
		if requests == nil {
			requests = []gantryclient.ChangeRequest{}
		}
		return printJSON(env.stdout, requests)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tACTION\tRESOURCE\tAPPROVALS\tREQUESTED BY\tCREATED\tEXPIRES")
	for _, r := range requests {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s %s\t%d/%d\t%s\t%s\t%s\n", r.ID, r.Status, r.Action, r.ResourceType, resourceLabel(r),
			len(r.Approvals), r.ApprovalsRequired, r.RequestedBy, r.CreatedDate, r.ExpiryDate)
	}
	if len(requests) == 0 {
		if status == gantryclient.ChangeStatusAll {
			fmt.Fprintln(tw, "(no change requests)")
		} else {
			fmt.Fprintf(tw, "(no %s change requests: gantry changes list -status all lists every one)\n", status)
		}
	}
	return tw.Flush()
}

// resourceLabel is the record a request changes: a credential's name, a service's id.
func resourceLabel(r gantryclient.ChangeRequest) string {
	if r.ResourceName != "" && r.ResourceName != r.ResourceID {
		return r.ResourceName + " (" + r.ResourceID + ")"
	}
	return r.ResourceID
}

// statusLine says what a request's status means for the record.
func statusLine(r gantryclient.ChangeRequest) string {
	switch r.Status {
	case "pending":
		missing := r.ApprovalsRequired - len(r.Approvals)
		return fmt.Sprintf("pending: not applied, waiting for %d more approval%s", missing, plural(missing))
	case "applied":
		if r.AppliedRevision != nil {
			return fmt.Sprintf("applied as revision %d", *r.AppliedRevision)
		}
		return "applied"
	case "rejected", "cancelled":
		return fmt.Sprintf("%s by %s: nothing was written", r.Status, r.DecidedBy)
	case "expired":
		return "expired before it had its approvals: nothing was written"
	case "stale":
		return fmt.Sprintf("stale: not applied, the record moved on from revision %d before approval; make the change again", r.BaseRevision)
	case "failed":
		return "failed: approved, but the server refused the write when it applied it (see the decision reason); nothing was written"
	case "break_glass":
		return "applied at once, breaking glass"
	}
	return r.Status
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// summaryLines are the changes of a request, one kind per line, by key or id: never a value.
func summaryLines(s gantryclient.ChangeSummary) []string {
	var lines []string
	add := func(label string, names []string) {
		if len(names) > 0 {
			lines = append(lines, label+": "+strings.Join(names, ", "))
		}
	}
	add("keys added", s.KeysAdded)
	add("keys removed", s.KeysRemoved)
	add("keys changed (values not shown)", s.KeysChanged)
	add("metadata changed", s.MetadataChanged)
	add("credentials mapped", s.CredentialsAdded)
	add("credentials unmapped", s.CredentialsRemoved)
	add("blind credentials mapped", s.BlindCredentialsAdded)
	add("blind credentials unmapped", s.BlindCredentialsRemoved)
	if s.Name != nil {
		lines = append(lines, "name: "+*s.Name)
	}
	if s.Enabled != nil {
		lines = append(lines, "enabled: "+strconv.FormatBool(*s.Enabled))
	}
	add("other fields", s.FieldsChanged)
	if s.ToRevision != nil {
		lines = append(lines, fmt.Sprintf("content of revision %d", *s.ToRevision))
	}
	return lines
}

// printChangeRequest prints one change request, and in the text view what can be done with it next.
func printChangeRequest(env *cliEnv, r gantryclient.ChangeRequest) error {
	if env.json {
		return printJSON(env.stdout, r)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", r.ID)
	fmt.Fprintf(tw, "status\t%s\n", statusLine(r))
	fmt.Fprintf(tw, "change\t%s %s %s, made against revision %d\n", r.Action, r.ResourceType, resourceLabel(r), r.BaseRevision)
	for i, line := range summaryLines(r.Changes) {
		label := ""
		if i == 0 {
			label = "what"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, line)
	}
	fmt.Fprintf(tw, "requested\t%s by %s\n", r.CreatedDate, r.RequestedBy)
	fmt.Fprintf(tw, "reason\t%s\n", r.Reason)
	fmt.Fprintf(tw, "approvals\t%d of %d\n", len(r.Approvals), r.ApprovalsRequired)
	for _, a := range r.Approvals {
		fmt.Fprintf(tw, "  %s\t%s via %s\n", a.By, a.Date, a.Via)
	}
	if r.Status == "pending" {
		fmt.Fprintf(tw, "expires\t%s\n", r.ExpiryDate)
	}
	if r.DecidedDate != nil {
		fmt.Fprintf(tw, "decided\t%s by %s\n", *r.DecidedDate, r.DecidedBy)
	}
	if r.DecisionReason != "" {
		fmt.Fprintf(tw, "decision reason\t%s\n", r.DecisionReason)
	}
	if r.Channel != "" {
		fmt.Fprintf(tw, "announced in\t%s\n", r.Channel)
	}
	if r.Status == "pending" {
		fmt.Fprintf(tw, "next\tgantry changes approve %s | gantry changes reject %s -reason R (approvers); gantry changes cancel %s (the requester)\n", r.ID, r.ID, r.ID)
	}
	return tw.Flush()
}
