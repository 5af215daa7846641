package chat

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// headerAliases reads Omnibot's Envoy names of the gateway's headers as gantry's own: the gateway
// sets x-proxy-internal to "true" for internal downstreams and forwards the caller identity only
// from them, and it is the proxy in front of the service.
var headerAliases = map[string]string{
	wirekeys.EnvoyInternal:                 wirekeys.ProxyInternal,
	wirekeys.EnvoyDownstreamServiceCluster: wirekeys.DownstreamServiceCluster,
}

// AccessRequest is what access control decides on: the route as an HTTP method and path, and the
// request headers (gRPC metadata).
type AccessRequest struct {
	Method string
	// Path is the path the checks match, as Omnibot matches request.path: the REST path the caller
	// used, percent-decoded, so a pattern written for one spelling of a route never opens another
	// (Omnibot's /api/v1/ does not open /api/v2/slack/action/...). The one exception is gantry's v1
	// alias of the action route, decided as /api/v2/chat/action/... (see accessAliases). A direct
	// gRPC caller, which used no path, is decided on gantry's path of the method.
	Path string
	// Called is the path as the caller used it, when it differs from Path; denials name it.
	Called string
	// Header returns the first value of a lower-case header, "" when absent.
	Header func(name string) string
}

// shown is the path a denial names: the one the caller used.
func (r AccessRequest) shown() string {
	if r.Called != "" && r.Called != r.Path {
		return r.Called + " (checked as " + r.Path + ")"
	}
	return r.Path
}

// accessDeniedError is a denial with the reason given to the caller.
type accessDeniedError struct{ reason string }

func (e *accessDeniedError) Error() string { return "access denied: " + e.reason }
func (e *accessDeniedError) Is(target error) bool {
	return target == ErrForbidden
}

func deny(format string, args ...any) error {
	return &accessDeniedError{reason: fmt.Sprintf(format, args...)}
}

// acl is the compiled authorization section. Every check must pass; with no checks every route is
// denied (deny by default, as Omnibot).
type acl struct {
	checks      []func(AccessRequest) error
	permissions map[string]policy
	bindings    []binding
	// warnings are what the service logs at start about the section (a custom kwargs.header).
	warnings []string
}

type policy struct {
	methods      []string
	paths        []*regexp.Regexp
	internalOnly bool
}

type binding struct {
	identity *regexp.Regexp
	perms    []string
}

// prefixRegexp compiles an Omnibot pattern with Python's re.match semantics: anchored at the start
// only, so "/api/v1/chat/get_team/" also allows every team.
func prefixRegexp(pat string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + pat + `)`)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pat, err)
	}
	return re, nil
}

func matchAny(res []*regexp.Regexp, path string) bool {
	for _, re := range res {
		if re.MatchString(path) {
			return true
		}
	}
	return false
}

func (p policy) allows(r AccessRequest) bool {
	return slices.Contains(p.methods, r.Method) && matchAny(p.paths, r.Path)
}

// compileACL checks and compiles the authorization section, so a bad pattern or an unknown check stops
// startup instead of failing requests.
func compileACL(a Authorization) (*acl, error) {
	out := &acl{permissions: map[string]policy{}}
	for name, p := range a.Permissions {
		if len(p.Methods) == 0 || len(p.Paths) == 0 {
			return nil, fmt.Errorf("permissions: %q needs methods and paths", name)
		}
		pol := policy{internalOnly: p.InternalOnly == nil || *p.InternalOnly}
		for _, m := range p.Methods {
			pol.methods = append(pol.methods, strings.ToUpper(m))
		}
		for _, pat := range p.Paths {
			re, err := prefixRegexp(pat)
			if err != nil {
				return nil, fmt.Errorf("permissions: %q: %w", name, err)
			}
			pol.paths = append(pol.paths, re)
		}
		out.permissions[name] = pol
	}
	// Bindings are a YAML map; sort them so evaluation does not depend on map order.
	keys := make([]string, 0, len(a.Bindings))
	for k := range a.Bindings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		re, err := prefixRegexp(k)
		if err != nil {
			return nil, fmt.Errorf("bindings: %w", err)
		}
		out.bindings = append(out.bindings, binding{identity: re, perms: a.Bindings[k]})
	}
	for i, c := range a.Checks {
		check, err := out.compileCheck(c)
		if err != nil {
			return nil, fmt.Errorf("checks[%d] (%s): %w", i, c.Module, err)
		}
		out.checks = append(out.checks, check)
	}
	return out, nil
}

// compileCheck accepts Omnibot's module paths (omnibot.authnz:allowed_paths,
// omnibot.authnz.envoy_checks:envoy_internal_check, ...:envoy_permissions_check) and the short names
// allowed_paths, internal_check and permissions_check.
func (a *acl) compileCheck(c Check) (func(AccessRequest) error, error) {
	name := c.Module
	if i := strings.LastIndexAny(name, ":."); i >= 0 {
		name = name[i+1:]
	}
	switch name {
	case "allowed_paths":
		return allowedPathsCheck(c)
	case "envoy_internal_check", "internal_check":
		h, err := a.checkHeader(c, wirekeys.ProxyInternal)
		if err != nil {
			return nil, err
		}
		return a.internalCheck(h), nil
	case "envoy_permissions_check", "permissions_check":
		h, err := a.checkHeader(c, wirekeys.DownstreamServiceCluster)
		if err != nil {
			return nil, err
		}
		return a.permissionsCheck(h), nil
	default:
		return nil, fmt.Errorf("unknown check %q (want allowed_paths, envoy_internal_check or envoy_permissions_check)", c.Module)
	}
}

// checkHeader is the header a check reads: always the one gantry's gateway asserts (def). Omnibot's
// kwargs.header named the header of the proxy in front of Omnibot; in front of gantry that proxy is
// gantry's gateway, which sets x-proxy-internal itself (from -internal-cidrs) and forwards the
// caller identity from internal addresses only. Any other name is read as gantry's header, with a
// warning at start: read as named, it would be a header the gateway drops (every caller refused)
// or, forwarded with -forward-headers, one any client sets as it likes.
func (a *acl) checkHeader(c Check, def string) (string, error) {
	v, ok := c.Kwargs["header"]
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return "", errors.New("kwargs.header must be a header name")
	}
	s = strings.ToLower(s)
	if alias, ok := headerAliases[s]; ok {
		s = alias
	}
	if s != def {
		a.warnings = append(a.warnings, fmt.Sprintf("%s: kwargs.header %q is read as %s, the header gantry's gateway asserts "+
			"(a header of another proxy would reach the service dropped, refusing every caller, or, with -forward-headers, "+
			"as any client sent it); remove kwargs.header to silence this", c.Module, v, def))
	}
	return def, nil
}

// allowedPathsCheck is Omnibot's allowed_paths: the request's path matches one of kwargs.paths.
func allowedPathsCheck(c Check) (func(AccessRequest) error, error) {
	raw, ok := c.Kwargs["paths"].([]any)
	if !ok {
		return nil, errors.New("kwargs.paths must be a list of patterns")
	}
	var res []*regexp.Regexp
	for _, v := range raw {
		s, ok := v.(string)
		if !ok {
			return nil, errors.New("kwargs.paths must be a list of patterns")
		}
		re, err := prefixRegexp(s)
		if err != nil {
			return nil, err
		}
		res = append(res, re)
	}
	return func(r AccessRequest) error {
		if !matchAny(res, r.Path) {
			return deny("path %s is not allowed", r.shown())
		}
		return nil
	}, nil
}

// internalCheck is Omnibot's envoy_internal_check: the gateway marked the caller internal (header
// h), or a permission that is not internal_only allows the route.
func (a *acl) internalCheck(h string) func(AccessRequest) error {
	return func(r AccessRequest) error {
		if r.Header(h) == "true" {
			return nil
		}
		// A permission with internal_only: false opens its routes to external callers, whoever
		// it is bound to (Omnibot's rule).
		for _, p := range a.permissions {
			if !p.internalOnly && p.allows(r) {
				return nil
			}
		}
		return deny("external requests may not use %s", r.shown())
	}
}

// permissionsCheck is Omnibot's envoy_permissions_check: the caller identity (header h) is bound to
// a permission that allows the route.
func (a *acl) permissionsCheck(h string) func(AccessRequest) error {
	return func(r AccessRequest) error {
		id := r.Header(h)
		if id == "" {
			return deny("no caller identity (%s)", h)
		}
		for _, b := range a.bindings {
			if !b.identity.MatchString(id) {
				continue
			}
			for _, name := range b.perms {
				if p, ok := a.permissions[name]; ok && p.allows(r) {
					return nil
				}
			}
		}
		return deny("caller %q may not %s %s", id, r.Method, r.shown())
	}
}

// authorize runs every check in order; the first failure is the answer.
func (a *acl) authorize(r AccessRequest) error {
	if len(a.checks) == 0 {
		return deny("no access-control checks are configured, so every route is denied")
	}
	for _, c := range a.checks {
		if err := c(r); err != nil {
			return err
		}
	}
	return nil
}
