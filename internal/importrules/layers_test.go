package importrules

import (
	"slices"
	"strings"
	"testing"
)

// layers are the floors of the tree, lowest first: a package imports packages of its own floor or
// below, never above, so each floor can be read, tested and changed without the ones over it. The
// generated API contract is the ground; pkg/ knows no service; a service knows no gateway; the
// gateway knows nothing of how a process is assembled (internal/); commands and scripts sit on top.
var layers = []string{"proto/", "pkg/", "services/", "gateway/", "internal/", "cmd/", "scripts/"}

// layerOf is the floor of one of our packages (its path inside the module), or -1 for the module's
// root package.
func layerOf(rel string) int {
	return slices.IndexFunc(layers, func(prefix string) bool {
		return strings.HasPrefix(rel, prefix) || rel == strings.TrimSuffix(prefix, "/")
	})
}

// narrowerRules are arrows the floors allow but the design does not: a package (by prefix) that must
// import none of the listed prefixes, with why.
var narrowerRules = []struct {
	from, forbidden, why string
}{
	{"gateway/upstream", "services/", "the cluster manager knows nothing of the services or of the admin interface that renders its status (pkg/clusterstatus is the types both share), as Envoy's cluster manager knows nothing of its admin handlers"},
}

// TestImportsFollowTheLayers: no package imports one of a floor above its own, nor an arrow of
// narrowerRules.
func TestImportsFollowTheLayers(t *testing.T) {
	pkgs := goList(t, false, "./...", "./proto/...")
	if len(pkgs) < 20 {
		t.Fatalf("go list listed %d packages: not the tree", len(pkgs))
	}
	for _, pkg := range pkgs {
		from, ok := strings.CutPrefix(pkg.importPath, ourModule+"/")
		if !ok {
			continue
		}
		for _, imported := range pkg.imports {
			to, ok := strings.CutPrefix(imported, ourModule+"/")
			if !ok {
				continue
			}
			if layerOf(to) > layerOf(from) {
				t.Errorf("%s imports %s, a floor above its own (%s): the floors, lowest first, are %v", from, to, layers[layerOf(to)], layers)
			}
			for _, rule := range narrowerRules {
				if strings.HasPrefix(from, rule.from) && strings.HasPrefix(to, rule.forbidden) {
					t.Errorf("%s imports %s: %s", from, to, rule.why)
				}
			}
		}
	}
}
