package credpair

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"
)

func TestRoundTripKeepsTypes(t *testing.T) {
	const in = `{"big":12345678901234567890,"debug":true,"maybe":null,"off":false,"password":"s3cr3t","port":5432,"port_text":"5432","ratio":1.5,"tiny":1e-07}`
	m, err := Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(m)
	if err != nil || string(out) != in {
		t.Fatalf("round trip = %s, %v; want %s", out, err, in)
	}
	if m["port"] == m["port_text"] || m["port"].Kind() != Number || m["port_text"].Kind() != String || !m["maybe"].IsNull() {
		t.Errorf("types: port %v, port_text %v, maybe %v", m["port"], m["port_text"], m["maybe"])
	}
	if m["port"].Text() != "5432" || m["debug"].Text() != "true" || m["maybe"].Text() != "" {
		t.Errorf("texts: %q %q %q", m["port"].Text(), m["debug"].Text(), m["maybe"].Text())
	}
	if got := Str("a <&> \"b\"").JSON(); got != `"a <&> \"b\""` {
		t.Errorf("JSON of a string = %s", got)
	}
	back, err := FromJSONTexts(JSONTexts(m))
	if err != nil || !maps.Equal(back, m) {
		t.Errorf("JSON texts round trip = %v, %v", back, err)
	}
	// Records written before types were kept: strings only, read as strings.
	old, err := Decode([]byte(`{"port":"5432"}`))
	if err != nil || old["port"] != Str("5432") {
		t.Errorf("a string record reads as %v, %v", old, err)
	}
}

func TestObjectsAndArraysAreNotValues(t *testing.T) {
	for _, in := range []string{`{"a":{"b":1}}`, `{"a":[1]}`} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrNotScalar) {
			t.Errorf("%s: %v, want ErrNotScalar", in, err)
		}
	}
	if _, err := FromAny(map[string]any{}); !errors.Is(err, ErrNotScalar) {
		t.Errorf("an object from structpb: %v", err)
	}
}

func TestFormatFloatAsPython(t *testing.T) {
	for f, want := range map[float64]string{5432: "5432", -7: "-7", 0: "0", 1.5: "1.5", 1e-7: "1e-07", 0.0001: "0.0001",
		123456.789: "123456.789", 1.5e16: "", 1.25e17: "", 2.5e-5: "2.5e-05", 9007199254740992: "9007199254740992"} {
		got, err := FormatFloat(f)
		if want == "" {
			if !errors.Is(err, ErrInexact) {
				t.Errorf("%g: %q, %v; want ErrInexact", f, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%g = %q, %v; want %q", f, got, err, want)
		}
	}
}
