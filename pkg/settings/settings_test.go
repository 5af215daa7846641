package settings

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// testConfig stands for a package's Config in these tests.
type testConfig struct {
	Listen   string
	Timeout  time.Duration
	Lifetime time.Duration
	Secret   string
	Strict   bool
	Loose    bool
	Count    int
	CAs      []string
	PerCA    map[string]string
}

func (c *testConfig) part() Part {
	return Part{Settings: []Setting{
		{Name: "listen", Group: "net", Value: String(&c.Listen), Usage: "listen address"},
		{Name: "read-timeout", Legacy: []string{"READ_TIMEOUT", "OLD_READ_TIMEOUT"}, Group: "net", Value: Seconds(&c.Timeout), Usage: "seconds"},
		{Name: "lifetime", Legacy: []string{"LIFETIME"}, Group: "auth", Value: WholeUnits(&c.Lifetime, time.Minute, "minutes"), Usage: "minutes"},
		{Name: "secret", Legacy: []string{"SECRET"}, Group: "auth", Value: String(&c.Secret), Secret: true, Usage: "a secret"},
		{Name: "strict", Group: "auth", Value: Bool(&c.Strict), Usage: "gantry boolean"},
		{Name: "loose", Legacy: []string{"LOOSE"}, Group: "auth", Value: ConfidantBool(&c.Loose), Usage: "Confidant boolean"},
		{Name: "count", Group: "net", Value: Int(&c.Count), Usage: "a number"},
		{Name: "cas", Legacy: []string{"CAS"}, Group: "certs", Value: List(&c.CAs), Usage: "CA names"},
	}, Families: []Family{{
		Pattern: "CA_ARN_<CA>", Group: "certs", Kind: "string", Usage: "ARN of a CA",
		Instances: func() []string { return c.CAs },
		Set: func(name, v string) error {
			if c.PerCA == nil {
				c.PerCA = map[string]string{}
			}
			c.PerCA[name] = v
			return nil
		},
	}}}
}

func defaults() *testConfig {
	return &testConfig{Listen: ":1", Timeout: time.Second, Lifetime: time.Hour, Secret: "hunter2hunter2", Count: 3, CAs: []string{"dev"}}
}

func TestPrecedence(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
		src  string
	}{
		{name: "default", want: time.Second},
		{name: "legacy name", env: map[string]string{"OLD_READ_TIMEOUT": "3"}, want: 3 * time.Second, src: "OLD_READ_TIMEOUT (env)"},
		{name: "first legacy name wins", env: map[string]string{"READ_TIMEOUT": "2", "OLD_READ_TIMEOUT": "3"}, want: 2 * time.Second, src: "READ_TIMEOUT (env)"},
		{name: "GANTRY_ wins over legacy", env: map[string]string{"GANTRY_READ_TIMEOUT": "4", "READ_TIMEOUT": "2"}, want: 4 * time.Second, src: "GANTRY_READ_TIMEOUT (env)"},
		{name: "flag wins over everything", args: []string{"-read-timeout=5"}, env: map[string]string{"GANTRY_READ_TIMEOUT": "4"}, want: 5 * time.Second, src: "-read-timeout (flag)"},
		{name: "blank keeps the default", env: map[string]string{"GANTRY_READ_TIMEOUT": ""}, want: time.Second, src: "GANTRY_READ_TIMEOUT (env)"},
		{name: "fractional seconds", env: map[string]string{"READ_TIMEOUT": "2.5"}, want: 2500 * time.Millisecond, src: "READ_TIMEOUT (env)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults()
			table := New(c.part())
			if err := table.Parse(tt.args, MapLookup(tt.env)); err != nil {
				t.Fatal(err)
			}
			if c.Timeout != tt.want || table.Source("read-timeout") != tt.src {
				t.Errorf("timeout %v from %q, want %v from %q", c.Timeout, table.Source("read-timeout"), tt.want, tt.src)
			}
		})
	}
}

func TestValues(t *testing.T) {
	c := defaults()
	env := map[string]string{"LOOSE": "no", "GANTRY_STRICT": "true", "LIFETIME": "0", "GANTRY_COUNT": "", "CAS": " a, ,b "}
	if err := New(c.part()).Parse([]string{"-listen="}, MapLookup(env)); err != nil {
		t.Fatal(err)
	}
	// Confidant reads any string but "", false, False and 0 as true; zero minutes keeps the default;
	// an empty string empties a string but keeps a number.
	if !c.Loose || !c.Strict || c.Lifetime != time.Hour || c.Count != 3 || c.Listen != "" || strings.Join(c.CAs, "|") != "a|b" {
		t.Errorf("loaded %+v", c)
	}
	for _, falsy := range []string{"", "false", "False", "0"} {
		c := defaults()
		c.Loose = true
		if err := New(c.part()).Parse(nil, MapLookup(map[string]string{"LOOSE": falsy})); err != nil || c.Loose {
			t.Errorf("LOOSE=%q: %v, loose=%v", falsy, err, c.Loose)
		}
	}
	c = defaults()
	if err := New(c.part()).Parse([]string{"-loose", "-strict"}, MapLookup(nil)); err != nil || !c.Loose || !c.Strict {
		t.Errorf("bare boolean flags: %v %+v", err, c)
	}
}

func TestErrorsNameTheSettingAsGiven(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{env: map[string]string{"LIFETIME": "x"}, want: `LIFETIME (env): "x" is not a whole number of minutes`},
		{env: map[string]string{"GANTRY_READ_TIMEOUT": "-1"}, want: `GANTRY_READ_TIMEOUT (env): "-1" is not a positive number of seconds`},
		{args: []string{"-count=many"}, want: `-count (flag): "many" is not an integer`},
		{args: []string{"-strict=maybe"}, want: `-strict (flag): "maybe" is not true or false`},
	}
	for _, tt := range tests {
		err := New(defaults().part()).Parse(tt.args, MapLookup(tt.env))
		var se *Error
		if !errors.As(err, &se) || err.Error() != tt.want {
			t.Errorf("%v %v: error %v, want %q", tt.args, tt.env, err, tt.want)
		}
	}
}

func TestExplain(t *testing.T) {
	c := defaults()
	table := New(c.part())
	if err := table.Parse([]string{"-count=7"}, MapLookup(map[string]string{"SECRET": "x", "CA_ARN_DEV": "arn"})); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[error]string{
		Invalid("secret", "too short"):      "SECRET (env): too short",
		Invalid("count", "too big"):         "-count (flag): too big",
		Invalid("listen", "bad"):            "-listen / GANTRY_LISTEN (default): bad",
		Invalid("CA_ARN_DEV", "not an ARN"): "CA_ARN_DEV (env): not an ARN",
		Invalid("CA_ARN_PROD", "required"):  "CA_ARN_PROD (default): required",
	} {
		if got := table.Explain(in); got == nil || got.Error() != want {
			t.Errorf("Explain(%v) = %v, want %q", in, got, want)
		}
	}
	other := errors.New("disk full")
	if table.Explain(other) != other || table.Explain(nil) != nil {
		t.Error("Explain changed an error that names no setting")
	}
}

func TestFamilies(t *testing.T) {
	c := defaults()
	env := map[string]string{"GANTRY_CAS": "prod,my-ca", "CA_ARN_PROD": "p", "CA_ARN_MY_CA": "m", "CA_ARN_DEV": "ignored: not a CA"}
	if err := New(c.part()).Parse(nil, MapLookup(env)); err != nil {
		t.Fatal(err)
	}
	if c.PerCA["prod"] != "p" || c.PerCA["my-ca"] != "m" || len(c.PerCA) != 2 {
		t.Errorf("per-CA values %v", c.PerCA)
	}
	f := c.part().Families[0]
	if got := strings.Join(f.EnvNames("my-ca"), " "); got != "CA_ARN_MY-CA CA_ARN_MY_CA" {
		t.Errorf("EnvNames(my-ca) = %s", got)
	}
	table := New(c.part())
	for name, want := range map[string]bool{"GANTRY_LISTEN": true, "OLD_READ_TIMEOUT": true, "CA_ARN_X": true, "CA_ARN_": false, "LISTEN": false} {
		if table.Reads(name) != want {
			t.Errorf("Reads(%s) = %v", name, !want)
		}
	}
}

func TestSecretsNeverShow(t *testing.T) {
	c := defaults()
	table := New(c.part())
	if err := table.Parse([]string{"-secret=s3cr3t-value-of-32-bytes-or-more"}, MapLookup(nil)); err != nil {
		t.Fatal(err)
	}
	var usage bytes.Buffer
	table.PrintUsage(&usage, "gantry")
	changed := strings.Join(table.Changed(), " ")
	var docs bytes.Buffer
	table.WriteMarkdown(&docs)
	for what, text := range map[string]string{"usage": usage.String(), "changed": changed, "docs": docs.String()} {
		if strings.Contains(text, "hunter2") || strings.Contains(text, "s3cr3t") {
			t.Errorf("%s shows a secret: %s", what, text)
		}
	}
	if table.Default("secret") != "(set)" || !strings.Contains(changed, "-secret (flag)=(set)") {
		t.Errorf("default %q, changed %q", table.Default("secret"), changed)
	}
}

func TestDuplicateNamePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a name declared twice was accepted")
		}
	}()
	c := defaults()
	New(c.part(), c.part())
}
