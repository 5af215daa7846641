package jwtkeys

import (
	"strings"
	"testing"
)

// TestDuplicateMemberNamesRefused: a JWT header or claims object naming a member twice, at any
// depth, is refused (issue 40): two parsers taking different ones would read one token two ways.
func TestDuplicateMemberNamesRefused(t *testing.T) {
	for _, tc := range []struct {
		json string
		dup  string
	}{
		{`{"alg":"RS256","alg":"none"}`, "alg"},
		{`{"sub":"orders","aud":["gantry"],"sub":"billing"}`, "sub"},
		{`{"a":{"b":1,"c":{"d":2,"d":3}}}`, "d"},
		{`{"a":[{"x":1},{"x":2,"x":3}]}`, "x"},
	} {
		var v map[string]any
		if err := DecodeJSONObject([]byte(tc.json), &v); err == nil || !strings.Contains(err.Error(), `"`+tc.dup+`" named twice`) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.json, err, tc.dup)
		}
	}
	for _, ok := range []string{
		`{"alg":"RS256","kid":"k1"}`,
		`{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}],"x":[1,1]}`,
		`{"a":"x","b":"x","x":"a"}`,
	} {
		var v map[string]any
		if err := DecodeJSONObject([]byte(ok), &v); err != nil {
			t.Errorf("%s: %v, want it decoded", ok, err)
		}
	}
}
