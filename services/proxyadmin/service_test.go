package proxyadmin

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

type fakeProxy struct{ draining bool }

func (p *fakeProxy) Draining() bool { return p.draining }

func TestServerInfo(t *testing.T) {
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	proxy := &fakeProxy{}
	svc := NewService(proxy, start)
	svc.now = func() time.Time { return start.Add(1571*time.Second + 300*time.Millisecond) }

	line := regexp.MustCompile(`^gantry [0-9a-f]{6}/(RELEASE|DEBUG) (live|draining) 1571 1571 0\n$`)
	if got := svc.ServerInfo(); !line.MatchString(got) || !strings.Contains(got, " live ") {
		t.Errorf("ServerInfo() = %q, want Envoy 1.x line with state live", got)
	}
	proxy.draining = true
	if got := svc.ServerInfo(); !line.MatchString(got) || !strings.Contains(got, " draining ") {
		t.Errorf("ServerInfo() = %q, want state draining", got)
	}
}

func TestMenuListsEveryEndpointOfTheSpec(t *testing.T) {
	menu := Menu()
	for _, p := range []string{"/certs", "/clusters", "/cpuprofiler", "/healthcheck/fail", "/healthcheck/ok",
		"/hot_restart_version", "/logging", "/quitquitquit", "/reset_counters", "/server_info", "/stats"} {
		if !strings.Contains(menu, "\n  "+p+": ") {
			t.Errorf("menu lacks %s:\n%s", p, menu)
		}
	}
}
