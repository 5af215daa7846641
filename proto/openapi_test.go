package gantryproto

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

// The OpenAPI documents are generated from the openapiv2 options of the .proto files: each must have
// a real title and version, describe every operation, and declare how callers authenticate.
func TestOpenAPIDocumentsDescribeTheAPI(t *testing.T) {
	wantSchemes := map[string][]string{
		"secrets":    {"kmsauth", "kmsauth_headers", "session", "xsrf"},
		"chat":       {"caller_identity"},
		"proxyadmin": nil, // loopback admin listener, no authentication
	}
	for service, schemes := range wantSchemes {
		data, err := fs.ReadFile(OpenAPI, service+"/v1/"+service+".swagger.json")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Info struct {
				Title, Version string
			}
			SecurityDefinitions map[string]struct{ Type string }
			Paths               map[string]map[string]struct {
				Summary, Description string
			}
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", service, err)
		}
		if !strings.HasPrefix(doc.Info.Title, "gantry ") || doc.Info.Version != "v1" {
			t.Errorf("%s: info %+v, want a gantry title and version v1", service, doc.Info)
		}
		for _, name := range schemes {
			if _, ok := doc.SecurityDefinitions[name]; !ok {
				t.Errorf("%s: no security definition %q", service, name)
			}
		}
		if service == "secrets" && doc.SecurityDefinitions["kmsauth"].Type != "basic" {
			t.Errorf("secrets: kmsauth is %q, want HTTP Basic", doc.SecurityDefinitions["kmsauth"].Type)
		}
		for path, ops := range doc.Paths {
			for method, op := range ops {
				if op.Summary == "" || op.Description == "" {
					t.Errorf("%s: %s %s lacks a summary or description", service, method, path)
				}
			}
		}
	}
}
