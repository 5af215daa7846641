package settings

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSelect: a selection keeps the settings' names, variables, defaults and Values, so loading it
// fills the same Config as the whole table would, and registers flags only for what it holds.
func TestSelect(t *testing.T) {
	dir, prefix, timeout, endpoints := "data", "", 5*time.Second, []string(nil)
	table := New(Part{Settings: []Setting{
		{Name: "data-dir", Value: String(&dir)},
		{Name: "etcd-request-timeout", Legacy: []string{"ETCD_TIMEOUT"}, Value: Duration(&timeout)},
		{Name: "etcd-endpoints", Value: List(&endpoints)},
		{Name: "etcd-prefix", Value: String(&prefix), Default: "/gantry/"},
	}})
	etcd := table.Select("etcd-*")
	var names []string
	for _, s := range etcd.Settings() {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"etcd-request-timeout", "etcd-endpoints", "etcd-prefix"}) {
		t.Errorf("Select(etcd-*) = %v", names)
	}
	if etcd.Default("etcd-prefix") != "/gantry/" || etcd.Default("etcd-request-timeout") != "5s" {
		t.Errorf("defaults %q, %q", etcd.Default("etcd-prefix"), etcd.Default("etcd-request-timeout"))
	}
	fs := flag.NewFlagSet("gantry check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	etcd.AddFlags(fs)
	if fs.Lookup("data-dir") != nil || fs.Lookup("etcd-endpoints") == nil {
		t.Error("AddFlags registered the wrong flags")
	}
	if err := fs.Parse([]string{"-etcd-endpoints", "https://a:2379,https://b:2379"}); err != nil {
		t.Fatal(err)
	}
	if err := etcd.Load(MapLookup(map[string]string{"ETCD_TIMEOUT": "7s", "GANTRY_DATA_DIR": "elsewhere"})); err != nil {
		t.Fatal(err)
	}
	if timeout != 7*time.Second || len(endpoints) != 2 || dir != "data" {
		t.Errorf("loaded timeout %v, endpoints %v, data-dir %q (not selected: must keep its default)", timeout, endpoints, dir)
	}
	if err := etcd.Load(MapLookup(map[string]string{"GANTRY_ETCD_REQUEST_TIMEOUT": "soon"})); err == nil || !strings.HasPrefix(err.Error(), "GANTRY_ETCD_REQUEST_TIMEOUT (env)") {
		t.Errorf("bad variable: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Select of a name the table lacks did not panic")
		}
	}()
	table.Select("etcd-endpoint")
}
