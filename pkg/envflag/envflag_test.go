package envflag

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestApply(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		wantListen  string
		wantTimeout time.Duration
		wantErr     string
	}{
		{name: "defaults", wantListen: "127.0.0.1:8080", wantTimeout: time.Second},
		{name: "env fills unset flag", env: map[string]string{"GANTRY_GATEWAY_LISTEN": ":9"}, wantListen: ":9", wantTimeout: time.Second},
		{name: "flag wins over env", args: []string{"-gateway-listen=:1"}, env: map[string]string{"GANTRY_GATEWAY_LISTEN": ":9"}, wantListen: ":1", wantTimeout: time.Second},
		{name: "bad env value names the setting", env: map[string]string{"GANTRY_SHUTDOWN_TIMEOUT": "soon"}, wantErr: "-shutdown-timeout (GANTRY_SHUTDOWN_TIMEOUT)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			listen := fs.String("gateway-listen", "127.0.0.1:8080", "")
			timeout := fs.Duration("shutdown-timeout", time.Second, "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := Apply(fs, "GANTRY", func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *listen != tt.wantListen || *timeout != tt.wantTimeout {
				t.Errorf("got listen=%q timeout=%v, want %q %v", *listen, *timeout, tt.wantListen, tt.wantTimeout)
			}
		})
	}
}
