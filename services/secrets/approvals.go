package secrets

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The approval policy is the approvals: section of the policy file (-acl-policy-file, read whatever
// -acl-module is): which credentials and services need a second person before a write applies, who
// may approve, and where Slack hears about it. Without the section every write applies at once, as
// in Confidant.
//
//	approvals:
//	  ttl: 24h                          # how long a request waits (default 24h)
//	  slack:                            # optional: announce requests through the chat service
//	    team: example                   # chat's team and bot names (chat config)
//	    bot: gantry
//	    channel: "#secret-changes"
//	    relay_service: gantry-chat      # the chat service's service id (-chat-secrets-service)
//	  groups:
//	    sre: ["user:alice@example.com", "user:bob@example.com"]
//	  slack_users:                      # Slack user ids whose email is not their principal
//	    U0123ABCD: "user:alice@example.com"
//	  rules:                            # the first rule matching a record decides
//	    - resources: ["credential-name:prod-*", "credential-tag:pci", "service:prod-*"]
//	      approvals: 1                  # approvers needed, never counting the requester
//	      approvers: ["group:sre"]
//	      exempt: ["service:deployer"]  # their writes apply at once
//	      break_glass: ["user:oncall@example.com"]
//	      channel: "#prod-changes"      # instead of slack.channel
//	      ttl: 4h
//	  reminders:                        # rotation reminders in Slack (Confidant's rotation rules)
//	    channel: "#secret-rotation"
//	    before_days: 7
//	    service_channels:
//	      "payments-*": "#payments"
type approvalPolicy struct {
	ttl        time.Duration
	slack      slackRelay
	groups     map[string][]string
	slackUsers map[string]string
	rules      []approvalRule
	reminders  *reminderPolicy
	// matchesTags: some rule matches credential tags, so deciding who may see a request reads them.
	matchesTags bool
}

// slackRelay is where requests are announced, and which service may relay Slack's button presses.
type slackRelay struct {
	Team         string `yaml:"team"`
	Bot          string `yaml:"bot"`
	Channel      string `yaml:"channel"`
	RelayService string `yaml:"relay_service"`
}

type approvalRule struct {
	Resources  []string      `yaml:"resources"`
	Approvals  int           `yaml:"approvals"`
	Approvers  []string      `yaml:"approvers"`
	Exempt     []string      `yaml:"exempt"`
	BreakGlass []string      `yaml:"break_glass"`
	Channel    string        `yaml:"channel"`
	TTL        time.Duration `yaml:"ttl"`
}

type reminderPolicy struct {
	Channel         string            `yaml:"channel"`
	BeforeDays      int               `yaml:"before_days"`
	ServiceChannels map[string]string `yaml:"service_channels"`
}

// defaultChangeTTL is how long a change request waits for approval unless the policy says.
const defaultChangeTTL = 24 * time.Hour

// defaultReminderDays is how early a rotation reminder comes unless the policy says.
const defaultReminderDays = 7

var approvalResourceKinds = []string{"credential", "credential-name", "credential-tag", "service"}

// loadApprovalPolicy reads the approvals: section of the policy file; nil when there is none.
func loadApprovalPolicy(file string) (*approvalPolicy, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("acl-policy-file: %w", err)
	}
	return parseApprovalPolicy(data)
}

// parseApprovalPolicy checks every pattern, name and number, so a typo stops startup instead of
// leaving a record unprotected.
func parseApprovalPolicy(data []byte) (*approvalPolicy, error) {
	var doc struct {
		Approvals *struct {
			TTL        time.Duration       `yaml:"ttl"`
			Slack      *slackRelay         `yaml:"slack"`
			Groups     map[string][]string `yaml:"groups"`
			SlackUsers map[string]string   `yaml:"slack_users"`
			Rules      []approvalRule      `yaml:"rules"`
			Reminders  *reminderPolicy     `yaml:"reminders"`
		} `yaml:"approvals"`
		Rules      yaml.Node `yaml:"rules"`      // ParsePolicyACL's
		Identities yaml.Node `yaml:"identities"` // LoadWorkloadIdentities'
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("acl-policy-file: approvals: %v", err)
	}
	a := doc.Approvals
	if a == nil {
		return nil, nil
	}
	p := &approvalPolicy{ttl: a.TTL, groups: a.Groups, slackUsers: a.SlackUsers, rules: a.Rules, reminders: a.Reminders}
	if p.ttl == 0 {
		p.ttl = defaultChangeTTL
	}
	if p.ttl < time.Minute {
		return nil, fmt.Errorf("acl-policy-file: approvals.ttl %s is shorter than a minute", p.ttl)
	}
	if a.Slack != nil {
		p.slack = *a.Slack
		if p.slack.Team == "" || p.slack.Bot == "" || p.slack.RelayService == "" {
			return nil, fmt.Errorf("acl-policy-file: approvals.slack needs team, bot and relay_service")
		}
	}
	for name, members := range p.groups {
		if !validGlob(name) || strings.ContainsAny(name, "*?[") {
			return nil, fmt.Errorf("acl-policy-file: approvals.groups: %q is not a group name", name)
		}
		for _, m := range members {
			if err := checkApprover(m, nil); err != nil {
				return nil, fmt.Errorf("acl-policy-file: approvals.groups.%s: %v", name, err)
			}
		}
	}
	for user, principal := range p.slackUsers {
		kind, name, ok := strings.Cut(principal, ":")
		if user == "" || !ok || (kind != "user" && kind != "service") || name == "" || strings.ContainsAny(name, "*?[") {
			return nil, fmt.Errorf("acl-policy-file: approvals.slack_users.%s: %q is not user:<email> or service:<id>", user, principal)
		}
	}
	if p.groups == nil {
		p.groups = map[string][]string{} // so group:<name> is checked against (no) groups
	}
	for i := range p.rules {
		if err := p.checkRule(&p.rules[i]); err != nil {
			return nil, fmt.Errorf("acl-policy-file: approvals.rules[%d]: %v", i, err)
		}
		for _, res := range p.rules[i].Resources {
			p.matchesTags = p.matchesTags || strings.HasPrefix(res, "credential-tag:")
		}
	}
	if r := p.reminders; r != nil {
		if r.BeforeDays == 0 {
			r.BeforeDays = defaultReminderDays
		}
		if r.BeforeDays < 0 || r.BeforeDays > 366 {
			return nil, fmt.Errorf("acl-policy-file: approvals.reminders.before_days must be 1 to 366")
		}
		if p.slack.Team == "" {
			return nil, fmt.Errorf("acl-policy-file: approvals.reminders needs approvals.slack")
		}
		for pattern := range r.ServiceChannels {
			if !validGlob(pattern) {
				return nil, fmt.Errorf("acl-policy-file: approvals.reminders.service_channels: %q is not a pattern", pattern)
			}
		}
	}
	return p, nil
}

func (p *approvalPolicy) checkRule(r *approvalRule) error {
	if len(r.Resources) == 0 {
		return fmt.Errorf("resources is required")
	}
	for _, res := range r.Resources {
		kind, glob, ok := strings.Cut(res, ":")
		if !ok || !slices.Contains(approvalResourceKinds, kind) || !validGlob(glob) {
			return fmt.Errorf("resource %q is not <kind>:<glob> with kind one of %v", res, approvalResourceKinds)
		}
	}
	if r.Approvals == 0 {
		r.Approvals = 1
	}
	if r.Approvals < 1 || r.Approvals > 10 {
		return fmt.Errorf("approvals must be 1 to 10, got %d", r.Approvals)
	}
	if len(r.Approvers) == 0 {
		return fmt.Errorf("approvers is required: nobody could approve")
	}
	for _, list := range [][]string{r.Approvers, r.Exempt, r.BreakGlass} {
		for _, a := range list {
			if err := checkApprover(a, p.groups); err != nil {
				return err
			}
		}
	}
	if r.TTL == 0 {
		r.TTL = p.ttl
	}
	if r.TTL < time.Minute {
		return fmt.Errorf("ttl %s is shorter than a minute", r.TTL)
	}
	if r.Channel == "" {
		r.Channel = p.slack.Channel
	}
	return nil
}

// checkApprover checks a principal pattern: user:<glob>, service:<glob>, group:<name> (a group of
// groups, when groups is given) or "*".
func checkApprover(pattern string, groups map[string][]string) error {
	if pattern == "*" {
		return nil
	}
	kind, glob, ok := strings.Cut(pattern, ":")
	switch {
	case ok && (kind == "user" || kind == "service") && validGlob(glob):
		return nil
	case ok && kind == "group" && groups != nil:
		if _, known := groups[glob]; known {
			return nil
		}
		return fmt.Errorf("principal %q names a group approvals.groups does not define", pattern)
	}
	return fmt.Errorf("principal %q is not user:<glob>, service:<glob>, group:<name> or *", pattern)
}

// ruleFor returns the first rule protecting a record, nil when none does. name and tags are a
// credential's (a service has neither).
func (p *approvalPolicy) ruleFor(resourceType, id, name string, tags []string) *approvalRule {
	for i := range p.rules {
		for _, res := range p.rules[i].Resources {
			kind, glob, _ := strings.Cut(res, ":")
			matched := false
			switch kind {
			case resourceType:
				matched = globMatch(glob, id)
			case "credential-name":
				matched = resourceType == ResourceCredential && globMatch(glob, name)
			case "credential-tag":
				matched = resourceType == ResourceCredential && slices.ContainsFunc(tags, func(t string) bool { return globMatch(glob, t) })
			}
			if matched {
				return &p.rules[i]
			}
		}
	}
	return nil
}

// matches reports whether principal ("user:<email>" or "service:<id>") is one of patterns.
func (p *approvalPolicy) matches(patterns []string, principal string) bool {
	kind, name, _ := strings.Cut(principal, ":")
	for _, pat := range patterns {
		if pat == "*" {
			return true
		}
		pk, glob, _ := strings.Cut(pat, ":")
		if pk == "group" {
			if p.matches(p.groups[glob], principal) {
				return true
			}
			continue
		}
		if pk == kind && globMatch(glob, name) {
			return true
		}
	}
	return false
}

// slackPrincipal maps a Slack user to a principal: an explicit slack_users entry (by "<team
// id>/<user id>" or the user id), else the user's email when Slack confirmed it.
func (p *approvalPolicy) slackPrincipal(teamID, userID, confirmedEmail string) string {
	if v, ok := p.slackUsers[teamID+"/"+userID]; ok {
		return v
	}
	if v, ok := p.slackUsers[userID]; ok {
		return v
	}
	if confirmedEmail != "" && strings.Contains(confirmedEmail, "@") {
		return "user:" + strings.ToLower(confirmedEmail)
	}
	return ""
}

// principalString is how a change request names a principal.
func principalString(p Principal) string { return p.Type + ":" + p.Name }

// parsePrincipal is the inverse of principalString.
func parsePrincipal(s string) Principal {
	kind, name, _ := strings.Cut(s, ":")
	return Principal{Type: kind, Name: name}
}

// channelsFor returns the reminder channels of the services mapping a credential.
func (r *reminderPolicy) channelsFor(services []string) []string {
	var out []string
	for _, svc := range services {
		for pattern, ch := range r.ServiceChannels {
			if globMatch(pattern, svc) && !slices.Contains(out, ch) {
				out = append(out, ch)
			}
		}
	}
	slices.Sort(out)
	if len(out) == 0 && r.Channel != "" {
		out = []string{r.Channel}
	}
	return out
}
