package upstream

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoService keeps the arrow between the cluster manager and the admin interface pointing
// one way: upstream writes its own status types (status.go) and the admin service reads them, as
// Envoy's cluster manager knows nothing of its admin handlers. A service package among upstream's
// dependencies, direct or not, would turn that around, and drag a service into every gateway.
func TestImportsNoService(t *testing.T) {
	const (
		self     = "github.com/gantry-dev/gantry/gateway/upstream"
		services = "github.com/gantry-dev/gantry/services/"
	)
	// One line per dependency: its import path, then the packages it imports.
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	listedSelf := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		listedSelf = listedSelf || pkg == self
		for _, imported := range strings.Fields(imports) {
			if strings.HasPrefix(imported, services) {
				t.Errorf("%s imports %s: %s depends on a service package", pkg, imported, self)
			}
		}
	}
	if !listedSelf {
		t.Fatalf("go list did not list %s itself:\n%s", self, out)
	}
}
