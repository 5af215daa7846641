// Package rpcpolicy reads the access policy every RPC declares in the proto (the
// gantry.options.v1.access method option) together with its REST routes (google.api.http), so a
// service's interceptor decides before dispatch, from one table, and a method without a policy is
// denied rather than forgotten.
package rpcpolicy

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// Route is one REST binding of an RPC: the HTTP method and the path template, e.g.
// GET /api/v1/chat/get_team/{team_name}.
type Route struct {
	Method, Template string
}

// Policy is what an RPC declares.
type Policy struct {
	Access optionsv1.Access
	Routes []Route
}

// Table maps full gRPC method names (/package.Service/Method) to their policy.
type Table map[string]Policy

// For builds the table of a service. It fails, naming every such method, when a method declares no
// access policy (or ACCESS_UNSPECIFIED): callers treat that as a startup bug, and tests check it.
func For(sd protoreflect.ServiceDescriptor) (Table, error) {
	t := Table{}
	var missing []string
	methods := sd.Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		p := Policy{Access: optionsv1.Access_ACCESS_UNSPECIFIED}
		if opts := m.Options(); opts != nil {
			p.Access = proto.GetExtension(opts, optionsv1.E_Access).(optionsv1.Access)
			if rule, ok := proto.GetExtension(opts, annotations.E_Http).(*annotations.HttpRule); ok && rule != nil {
				p.Routes = routes(rule)
			}
		}
		if p.Access == optionsv1.Access_ACCESS_UNSPECIFIED {
			missing = append(missing, string(m.Name()))
		}
		t["/"+string(sd.FullName())+"/"+string(m.Name())] = p
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return t, fmt.Errorf("rpcpolicy: %s: methods without an access policy (gantry.options.v1.access): %s",
			sd.FullName(), strings.Join(missing, ", "))
	}
	return t, nil
}

// MustFor is For for a service whose policies are checked by its tests: it panics on a missing one.
func MustFor(sd protoreflect.ServiceDescriptor) Table {
	t, err := For(sd)
	if err != nil {
		panic(err)
	}
	return t
}

// Lookup returns the policy of a method; ok is false for a method the table does not know or that
// has no valid policy, which callers deny.
func (t Table) Lookup(fullMethod string) (Policy, bool) {
	p, ok := t[fullMethod]
	return p, ok && p.Access != optionsv1.Access_ACCESS_UNSPECIFIED
}

func routes(rule *annotations.HttpRule) []Route {
	var out []Route
	add := func(r *annotations.HttpRule) {
		switch p := r.GetPattern().(type) {
		case *annotations.HttpRule_Get:
			out = append(out, Route{http.MethodGet, p.Get})
		case *annotations.HttpRule_Post:
			out = append(out, Route{http.MethodPost, p.Post})
		case *annotations.HttpRule_Put:
			out = append(out, Route{http.MethodPut, p.Put})
		case *annotations.HttpRule_Delete:
			out = append(out, Route{http.MethodDelete, p.Delete})
		case *annotations.HttpRule_Patch:
			out = append(out, Route{http.MethodPatch, p.Patch})
		}
	}
	add(rule)
	for _, extra := range rule.GetAdditionalBindings() {
		add(extra)
	}
	return out
}

// Route returns the route of p with this template, ok false when p has none.
func (p Policy) Route(template string) (Route, bool) {
	for _, r := range p.Routes {
		if r.Template == template {
			return r, true
		}
	}
	return Route{}, false
}

// Path fills a route template's {field} segments with the request's fields (proto field names), as
// the REST path a caller would have used.
func (r Route) Path(req proto.Message) string {
	m := req.ProtoReflect()
	path, _ := r.fill(func(name string) (string, bool) {
		if fd := m.Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil {
			return m.Get(fd).String(), true
		}
		return "", true
	})
	return path
}

// PathFromParams fills a route template's {field} segments with path parameters, as the gateway's
// router extracted them, before any body is read: for a method whose templates' fields are all
// string path parameters it is the path Path gives once the request is decoded. ok is false when a
// segment's field is not among params (it would come from the body).
func (r Route) PathFromParams(params map[string]string) (path string, ok bool) {
	return r.fill(func(name string) (string, bool) {
		v, found := params[name]
		return v, found
	})
}

func (r Route) fill(value func(name string) (string, bool)) (string, bool) {
	var b strings.Builder
	rest := r.Template
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(rest)
			return b.String(), true
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			b.WriteString(rest)
			return b.String(), true
		}
		b.WriteString(rest[:open])
		name, _, _ := strings.Cut(rest[open+1:open+end], "=")
		v, ok := value(name)
		if !ok {
			return "", false
		}
		b.WriteString(v)
		rest = rest[open+end+1:]
	}
}
