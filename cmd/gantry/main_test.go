package main

import (
	"testing"
)

func TestBadConfigurationExitsWithUsageCode(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{name: "unknown flag", args: []string{"-no-such-flag"}},
		{name: "bad target flag", args: []string{"-target=mail"}},
		{name: "bad env value", env: map[string]string{"GANTRY_SHUTDOWN_TIMEOUT": "soon"}},
		{name: "bad env address", env: map[string]string{"GANTRY_GATEWAY_LISTEN": "8080"}},
		{name: "bad listener limit", env: map[string]string{"GANTRY_HTTP_READ_HEADER_TIMEOUT": "0s"}},
		{name: "bad gRPC limit", args: []string{"-grpc-max-concurrent-streams=-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if code := run(tt.args); code != 2 {
				t.Errorf("run(%v) = %d, want 2", tt.args, code)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	if code := run([]string{"version"}); code != 0 {
		t.Errorf("version exit code %d", code)
	}
}
