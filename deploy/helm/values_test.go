// Package helm holds the Helm chart (gantry/) and its strict render check (chartcheck/, a module of
// its own: make test-helm). The test here, in gantry's module, checks that the configuration the
// chart's values files hand to gantry is configuration gantry accepts, with gantry's own parsers.
package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gantry-dev/gantry/services/chat"
	"github.com/gantry-dev/gantry/services/secrets"
)

// chartValues is the part of a values file that becomes gantry's configuration files.
type chartValues struct {
	Chat struct {
		Config *string `yaml:"config"`
	} `yaml:"chat"`
	WorkloadIdentity struct {
		Identities string `yaml:"identities"`
		JWKS       string `yaml:"jwks"`
	} `yaml:"workloadIdentity"`
}

func readValues(t *testing.T, path string) chartValues {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// TestChartConfigurationLoads: the default chat configuration parses, and the workload-identity
// example's identities file (with its JWKS at the path the chart mounts it) loads as the secrets
// service loads -workload-identity-file.
func TestChartConfigurationLoads(t *testing.T) {
	defaults := readValues(t, filepath.Join("gantry", "values.yaml"))
	if defaults.Chat.Config == nil {
		t.Fatal("values.yaml has no chat.config")
	}
	if _, err := chat.ParseFileConfig([]byte(*defaults.Chat.Config)); err != nil {
		t.Fatalf("values.yaml chat.config: %v", err)
	}

	files, err := filepath.Glob(filepath.Join("gantry", "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("ci values files: %v %v", files, err)
	}
	var identities int
	for _, f := range files {
		v := readValues(t, f)
		if v.Chat.Config != nil {
			if _, err := chat.ParseFileConfig([]byte(*v.Chat.Config)); err != nil {
				t.Errorf("%s chat.config: %v", f, err)
			}
		}
		if v.WorkloadIdentity.Identities == "" {
			continue
		}
		identities++
		dir := t.TempDir()
		// The chart mounts jwks.json at /etc/gantry/jwks.json; here it is in dir.
		doc := strings.ReplaceAll(v.WorkloadIdentity.Identities, "/etc/gantry/jwks.json", filepath.Join(dir, "jwks.json"))
		if err := os.WriteFile(filepath.Join(dir, "jwks.json"), []byte(v.WorkloadIdentity.JWKS), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "identities.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		verifier, err := secrets.LoadWorkloadIdentities(path, 0)
		if err != nil || verifier == nil {
			t.Errorf("%s workloadIdentity.identities: verifier %v, %v", f, verifier, err)
		}
	}
	if identities == 0 {
		t.Error("no ci values file has workloadIdentity.identities")
	}
}
