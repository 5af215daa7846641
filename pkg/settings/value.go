package settings

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Value holds one setting's value inside a Config: Set parses what the user wrote, String shows the
// current value (the default, when the table is built), Kind names the accepted syntax in -h and the
// docs.
type Value interface {
	Set(string) error
	String() string
	Kind() string
}

// boolValue is implemented by values that a bare flag (-name) sets to true.
type boolValue interface{ IsBoolFlag() bool }

// funcValue adapts three functions to Value.
type funcValue struct {
	kind   string
	show   func() string
	set    func(string) error
	isBool bool
}

func (v funcValue) Set(s string) error { return v.set(s) }
func (v funcValue) String() string     { return v.show() }
func (v funcValue) Kind() string       { return v.kind }
func (v funcValue) IsBoolFlag() bool   { return v.isBool }

// Func is a Value of a custom kind: show returns the current value, set parses one.
func Func(kind string, show func() string, set func(string) error) Value {
	return funcValue{kind: kind, show: show, set: set}
}

// String sets *p to the text as written (an empty text sets it empty).
func String(p *string) Value {
	return Func("string", func() string { return *p }, func(s string) error { *p = s; return nil })
}

// blank reports a value that numbers, durations and JSON treat as "not set": compose files and
// Confidant env files often carry NAME= lines, which must not clobber the default.
func blank(s string) bool { return strings.TrimSpace(s) == "" }

// Int parses a whole number; a blank text keeps the default.
func Int(p *int) Value {
	return Func("int", func() string { return strconv.Itoa(*p) }, func(s string) error {
		if blank(s) {
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*p = n
		return nil
	})
}

// Int64 parses a whole number; a blank text keeps the default.
func Int64(p *int64) Value {
	return Func("int", func() string { return strconv.FormatInt(*p, 10) }, func(s string) error {
		if blank(s) {
			return nil
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		*p = n
		return nil
	})
}

// Uint32 parses a whole number from 0 to 2^32-1; a blank text keeps the default.
func Uint32(p *uint32) Value {
	return Func("uint", func() string { return strconv.FormatUint(uint64(*p), 10) }, func(s string) error {
		if blank(s) {
			return nil
		}
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a whole number from 0 to %d", s, uint32(1<<32-1))
		}
		*p = uint32(n)
		return nil
	})
}

// Float parses a decimal number; a blank text keeps the default.
func Float(p *float64) Value {
	return Func("number", func() string { return strconv.FormatFloat(*p, 'g', -1, 64) }, func(s string) error {
		if blank(s) {
			return nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		*p = f
		return nil
	})
}

// Bool parses true/false (and 1/0, t/f) strictly; -name alone means true.
func Bool(p *bool) Value {
	v := Func("bool", func() string { return strconv.FormatBool(*p) }, func(s string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		*p = b
		return nil
	}).(funcValue)
	v.isBool = true
	return v
}

// ConfidantBool parses a boolean the way Confidant does: "", "false", "False" and "0" are false,
// anything else is true, so a Confidant env file means the same here. -name alone means true.
func ConfidantBool(p *bool) Value {
	v := Func("bool", func() string { return strconv.FormatBool(*p) }, func(s string) error {
		*p = ConfidantTruth(s)
		return nil
	}).(funcValue)
	v.isBool = true
	return v
}

// ConfidantTruth is Confidant's reading of a boolean variable (see ConfidantBool).
func ConfidantTruth(s string) bool {
	switch s {
	case "", "false", "False", "0":
		return false
	}
	return true
}

// Duration parses a Go duration (30s, 5m, 1h30m); a blank text keeps the default.
func Duration(p *time.Duration) Value {
	return Func("duration", func() string { return p.String() }, func(s string) error {
		if blank(s) {
			return nil
		}
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 30s, 5m, 1h)", s)
		}
		*p = d
		return nil
	})
}

// Seconds parses Confidant's positive, possibly fractional, number of seconds (2.5); a blank text
// keeps the default.
func Seconds(p *time.Duration) Value {
	return Func("seconds", func() string { return strconv.FormatFloat(p.Seconds(), 'g', -1, 64) }, func(s string) error {
		if blank(s) {
			return nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("%q is not a positive number of seconds", s)
		}
		*p = time.Duration(f * float64(time.Second))
		return nil
	})
}

// WholeUnits parses Confidant's whole number of units (minutes, seconds). As in Confidant, zero or a
// negative number keeps the default rather than failing; a blank text keeps it too.
func WholeUnits(p *time.Duration, unit time.Duration, kind string) Value {
	return Func(kind, func() string { return strconv.FormatInt(int64(*p/unit), 10) }, func(s string) error {
		if blank(s) {
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("%q is not a whole number of %s", s, kind)
		}
		if n > 0 {
			*p = time.Duration(n) * unit
		}
		return nil
	})
}

// List parses a comma list; blanks around and between items are dropped.
func List(p *[]string) Value {
	return Func("list", func() string { return strings.Join(*p, ",") }, func(s string) error {
		*p = SplitList(s)
		return nil
	})
}

// SplitList splits a comma list, dropping spaces and empty items.
func SplitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// JSON parses a JSON document into *p (a map, a list); a blank text keeps the default.
func JSON[T any](p *T) Value {
	return Func("json", func() string {
		b, _ := json.Marshal(*p)
		if string(b) == "null" {
			return ""
		}
		return string(b)
	}, func(s string) error {
		if blank(s) {
			return nil
		}
		if err := json.Unmarshal([]byte(s), p); err != nil {
			return fmt.Errorf("invalid JSON: %v", err)
		}
		return nil
	})
}
