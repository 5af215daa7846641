package secrets

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// PolicyACL is gantry's least-privilege access-control module (ACL_MODULE=policy): a YAML file of
// rules saying which users and services may do which actions on which credentials and services.
//
//	rules:
//	  - principals: ["user:*@example.com"]            # user:<glob>, service:<glob>, or "*"
//	    resources:  ["credential:*", "service:*"]      # credential:<id glob>, credential-name:<glob>,
//	    actions:    ["list", "metadata", "get"]        # service:<id glob>, ca:<glob>, certificate:<glob>,
//	  - principals: ["user:dba@example.com"]           # jwt:<glob>; actions or "*"
//	    resources:  ["credential-name:db-*"]
//	    actions:    ["*"]
//	  - principals: ["service:*"]                      # a service reads its own service
//	    resources:  ["service:{self}"]
//	    actions:    ["metadata", "get"]
//	  - principals: ["service:*"]                      # certificate:<glob> matches the CN and
//	    resources:  ["certificate:{self}.example.com"] # every SAN; ca:<glob> the CA name
//	    actions:    ["get"]
//	  - effect: deny                                   # deny rules win over allow rules
//	    principals: ["user:contractor@example.com"]
//	    resources:  ["credential-name:prod-*"]
//	    actions:    ["get"]
//
// Anything no rule allows is denied. Mapping credentials to a service also needs "get" on every
// credential being added, so nobody can attach a secret they may not read to a service they control.
type PolicyACL struct {
	rules []policyRule
	// credentialName resolves a credential id to its name for credential-name patterns.
	credentialName func(ctx context.Context, id string) (string, bool)
}

type policyRule struct {
	Effect     string   `yaml:"effect"`
	Principals []string `yaml:"principals"`
	Resources  []string `yaml:"resources"`
	Actions    []string `yaml:"actions"`
}

var policyResourceKinds = []string{"credential", "credential-name", "service", "ca", "certificate", "jwt"}

// LoadPolicyACL reads and checks a policy file.
func LoadPolicyACL(file string, credentialName func(ctx context.Context, id string) (string, bool)) (*PolicyACL, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("GANTRY_ACL_POLICY_FILE: %w", err)
	}
	return ParsePolicyACL(data, credentialName)
}

// ParsePolicyACL parses a policy document; every pattern is checked, so a typo stops startup.
func ParsePolicyACL(data []byte, credentialName func(ctx context.Context, id string) (string, bool)) (*PolicyACL, error) {
	var doc struct {
		Rules []policyRule `yaml:"rules"`
		// Identities maps workload tokens to services (LoadWorkloadIdentities reads it).
		Identities yaml.Node `yaml:"identities"`
		// Approvals says which writes wait for approval (loadApprovalPolicy reads it).
		Approvals yaml.Node `yaml:"approvals"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("GANTRY_ACL_POLICY_FILE: %v", err)
	}
	for i, r := range doc.Rules {
		where := fmt.Sprintf("GANTRY_ACL_POLICY_FILE: rule %d", i+1)
		if r.Effect != "" && r.Effect != "allow" && r.Effect != "deny" {
			return nil, fmt.Errorf("%s: effect %q is not allow or deny", where, r.Effect)
		}
		if len(r.Principals) == 0 || len(r.Resources) == 0 || len(r.Actions) == 0 {
			return nil, fmt.Errorf("%s: principals, resources and actions are all required", where)
		}
		for _, p := range r.Principals {
			kind, glob, ok := strings.Cut(p, ":")
			if p != "*" && (!ok || (kind != "user" && kind != "service") || !validGlob(glob)) {
				return nil, fmt.Errorf("%s: principal %q is not user:<glob>, service:<glob> or *", where, p)
			}
		}
		for _, res := range r.Resources {
			kind, glob, ok := strings.Cut(res, ":")
			if res != "*" && (!ok || !slices.Contains(policyResourceKinds, kind) || !validGlob(strings.ReplaceAll(glob, "{self}", "x"))) {
				return nil, fmt.Errorf("%s: resource %q is not <kind>:<glob> with kind one of %v", where, res, policyResourceKinds)
			}
		}
		for _, a := range r.Actions {
			if a != "*" && !slices.Contains([]string{ActionList, ActionMetadata, ActionGet, ActionCreate, ActionUpdate, ActionRevert, ActionArchive}, a) {
				return nil, fmt.Errorf("%s: unknown action %q", where, a)
			}
		}
	}
	return &PolicyACL{rules: doc.Rules, credentialName: credentialName}, nil
}

func validGlob(g string) bool {
	_, err := path.Match(g, "")
	return g != "" && err == nil
}

func globMatch(pattern, s string) bool {
	ok, _ := path.Match(pattern, s)
	return ok
}

// Allowed implements ACL.
func (a *PolicyACL) Allowed(ctx context.Context, p Principal, resourceType, action, resourceID string, extra map[string]any) bool {
	if !a.decide(ctx, p, resourceType, action, resourceID) {
		return false
	}
	// A certificate carries its SANs as names too: each must be allowed like the CN, or a caller
	// allowed one CN could put any host name in the SANs.
	if resourceType == ResourceCertificate {
		sans, _ := extra["san"].([]string)
		for _, san := range sans {
			if san != resourceID && !a.decide(ctx, p, ResourceCertificate, action, san) {
				return false
			}
		}
	}
	if resourceType == ResourceService && action == ActionUpdate {
		added, _ := extra["new_credential_ids"].([]string)
		for _, id := range added {
			if !a.decide(ctx, p, ResourceCredential, ActionGet, id) {
				return false
			}
		}
	}
	return true
}

func (a *PolicyACL) decide(ctx context.Context, p Principal, resourceType, action, resourceID string) bool {
	allowed := false
	for _, r := range a.rules {
		if !a.ruleMatches(ctx, r, p, resourceType, action, resourceID) {
			continue
		}
		if r.Effect == "deny" {
			return false
		}
		allowed = true
	}
	return allowed
}

func (a *PolicyACL) ruleMatches(ctx context.Context, r policyRule, p Principal, resourceType, action, resourceID string) bool {
	if !slices.Contains(r.Actions, "*") && !slices.Contains(r.Actions, action) {
		return false
	}
	principalOK := false
	for _, pat := range r.Principals {
		kind, glob, _ := strings.Cut(pat, ":")
		if pat == "*" || (kind == p.Type && globMatch(glob, p.Name)) {
			principalOK = true
			break
		}
	}
	if !principalOK {
		return false
	}
	for _, pat := range r.Resources {
		if pat == "*" {
			return true
		}
		kind, glob, _ := strings.Cut(pat, ":")
		glob = strings.ReplaceAll(glob, "{self}", p.Name)
		switch {
		case kind == resourceType:
			// Listing and creating name no resource: a pattern on the kind covers them.
			if resourceID == "" || globMatch(glob, resourceID) {
				return true
			}
		case kind == "credential-name" && resourceType == ResourceCredential:
			if resourceID == "" {
				if glob == "*" {
					return true
				}
				continue
			}
			if name, ok := a.credentialName(ctx, resourceID); ok && globMatch(glob, name) {
				return true
			}
		}
	}
	return false
}
