package settings

import "testing"

func TestDescribe(t *testing.T) {
	for name, want := range map[string]string{
		"shutdown-timeout":        "-shutdown-timeout (GANTRY_SHUTDOWN_TIMEOUT)",
		"ACM_PRIVATE_CA_ARN_PROD": "ACM_PRIVATE_CA_ARN_PROD",
	} {
		if got := Describe(Prefix, name); got != want {
			t.Errorf("Describe(%q) = %q, want %q", name, got, want)
		}
	}
}
