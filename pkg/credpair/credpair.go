// Package credpair holds credential pair values with their JSON type, as Confidant keeps them: a string,
// a number, a boolean or null. Objects and arrays are not values (Confidant answers 400 "credential
// pairs must be key: value").
//
// A Value is comparable: two values are equal only when their types and contents are, so 5432 and
// "5432" differ, and maps of them compare with maps.Equal. A number is kept as its JSON text, so a
// number read from Confidant's decrypted pairs is written back digit for digit.
package credpair

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Kind is a value's JSON type.
type Kind uint8

// The JSON types of a pair value. The zero Value is null.
const (
	Null Kind = iota
	String
	Number
	Bool
)

func (k Kind) String() string {
	switch k {
	case String:
		return "string"
	case Number:
		return "number"
	case Bool:
		return "boolean"
	}
	return "null"
}

// Value is one credential pair value. text is a string's content, a number's JSON text, "true" or
// "false", or "" for null.
type Value struct {
	kind Kind
	text string
}

// Map is a credential's pairs by key.
type Map = map[string]Value

// Str is the string value s.
func Str(s string) Value { return Value{String, s} }

// Boolean is the boolean value b.
func Boolean(b bool) Value { return Value{Bool, strconv.FormatBool(b)} }

// NullValue is null.
func NullValue() Value { return Value{} }

// Num is the number written as the JSON number literal lit; ok is false when lit is not one.
func Num(lit string) (Value, bool) {
	if !isNumber(lit) {
		return Value{}, false
	}
	return Value{Number, lit}, true
}

// ErrNotScalar is the error of a value that is an object or an array.
var ErrNotScalar = errors.New("credential pairs must be key: value")

// ErrInexact is the error of a number a float64 cannot hold exactly.
var ErrInexact = errors.New("an integer beyond 2^53 cannot be kept exactly once read as a float64")

// FromAny turns a decoded JSON value (encoding/json's or structpb's: string, float64, json.Number,
// bool, nil) into a Value. An object or an array is ErrNotScalar. A float64 that is an integer
// beyond ±2^53 is ErrInexact: its digits were lost when it was read, and storing the rounded number
// silently would change the secret.
func FromAny(v any) (Value, error) {
	switch x := v.(type) {
	case nil:
		return Value{}, nil
	case string:
		return Str(x), nil
	case bool:
		return Boolean(x), nil
	case json.Number:
		if n, ok := Num(string(x)); ok {
			return n, nil
		}
		return Value{}, fmt.Errorf("%q is not a JSON number", string(x))
	case float64:
		lit, err := FormatFloat(x)
		if err != nil {
			return Value{}, err
		}
		return Value{Number, lit}, nil
	}
	return Value{}, ErrNotScalar
}

// FormatFloat writes f as Python's json.dumps writes the number a JSON text parsed to: an integer
// without a fraction (5432), anything else as Python's repr (1.5, 1e-05, 1e+16). f must be finite,
// and an integer only up to 2^53 (beyond it the text it was parsed from is unknown: ErrInexact).
func FormatFloat(f float64) (string, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", errors.New("a number must be finite")
	}
	if f == math.Trunc(f) {
		if math.Abs(f) > 1<<53 {
			return "", ErrInexact
		}
		return strconv.FormatInt(int64(f), 10), nil
	}
	// Python's repr: the shortest digits that round-trip, in exponent form when the decimal exponent
	// is below -4 or at least 16, with a two-digit exponent at least.
	exp := int(math.Floor(math.Log10(math.Abs(f))))
	if exp < -4 || exp >= 16 {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		return s, nil
	}
	return strconv.FormatFloat(f, 'f', -1, 64), nil
}

// Kind is v's JSON type.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether v is null.
func (v Value) IsNull() bool { return v.kind == Null }

// Text is v as text: a string's content, a number's JSON text, "true" or "false", and "" for null.
// It is what gRPC's credential_pairs (a map of strings) carries and what an environment variable
// gets.
func (v Value) Text() string { return v.text }

// JSON is v's JSON text: "\"abc\"", 5432, true, null.
func (v Value) JSON() string {
	switch v.kind {
	case String:
		b, _ := marshalString(v.text)
		return string(b)
	case Number, Bool:
		return v.text
	}
	return "null"
}

// Any is v as encoding/json decodes it with UseNumber: string, json.Number, bool or nil.
func (v Value) Any() any {
	switch v.kind {
	case String:
		return v.text
	case Number:
		return json.Number(v.text)
	case Bool:
		return v.text == "true"
	}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (v Value) MarshalJSON() ([]byte, error) {
	if v.kind == String {
		return marshalString(v.text)
	}
	return []byte(v.JSON()), nil
}

// UnmarshalJSON implements json.Unmarshaler: a string, number, boolean or null; an object or an array
// is ErrNotScalar.
func (v *Value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errors.New("empty credential pair value")
	}
	switch b[0] {
	case '{', '[':
		return ErrNotScalar
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = Str(s)
	case 't', 'f':
		var x bool
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		*v = Boolean(x)
	case 'n':
		if string(b) != "null" {
			return errors.New("invalid credential pair value")
		}
		*v = Value{}
	default:
		n, ok := Num(string(b))
		if !ok {
			return errors.New("invalid credential pair value")
		}
		*v = n
	}
	return nil
}

func marshalString(s string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// isNumber reports whether s is a JSON number literal.
func isNumber(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil || d.More() {
		return false
	}
	n, ok := x.(json.Number)
	return ok && string(n) == s
}

// Strings is the map of string values of m; for callers and tests that hold strings only.
func Strings(m map[string]string) Map {
	if m == nil {
		return nil
	}
	out := make(Map, len(m))
	for k, s := range m {
		out[k] = Str(s)
	}
	return out
}

// Texts is Text of every value of m: the map gRPC's credential_pairs carries.
func Texts(m Map) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v.Text()
	}
	return out
}

// TypedJSONTexts is JSONTexts of m when one of its values is not a string, else nil: gRPC's
// credential_pairs_json, which a credential of strings alone (most of them) does without, so that
// its reads copy nothing more than before values had types.
func TypedJSONTexts(m Map) map[string]string {
	for _, v := range m {
		if v.Kind() != String {
			return JSONTexts(m)
		}
	}
	return nil
}

// JSONTexts is JSON of every value of m.
func JSONTexts(m Map) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v.JSON()
	}
	return out
}

// FromJSONTexts is the inverse of JSONTexts.
func FromJSONTexts(m map[string]string) (Map, error) {
	out := make(Map, len(m))
	for k, s := range m {
		var v Value
		if err := v.UnmarshalJSON([]byte(s)); err != nil {
			return nil, fmt.Errorf("credential pair %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

// Decode reads a JSON object of pair values (the sealed plaintext, or Confidant's decrypted pairs),
// keeping every number's text.
func Decode(data []byte) (Map, error) {
	// Most credentials hold strings alone: decoded as such, without a decoder per value (every read
	// of a credential opens its pairs here). Any other type falls back to the typed decode.
	var texts map[string]string
	if err := json.Unmarshal(data, &texts); err == nil && texts != nil {
		return Strings(texts), nil
	}
	out := Map{}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Keys is m's keys, sorted.
func Keys(m Map) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
