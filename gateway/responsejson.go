package gateway

import (
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/wrapperspb"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// Marshal writes the JSON of a response. The two hottest answers of the API, a credential
// (GET /v1/credentials/{id}) and a service with its credentials (GET /v1/services/{id}), are
// written by hand: protojson reaches every field through reflection and sorts every map through
// interfaces, which was half of the gateway's CPU on a read (and most of it for a service of ten
// credentials). The hand-written form is the JSON protojson writes with the gateway's options
// (proto field names, unpopulated fields emitted) and restPairs rewrites (credential_pairs typed,
// credential_pairs_json not shown), value for value: TestResponseJSONMatchesProtojson
// compares the two on random messages. Anything else, and a message these encoders decline (a
// string that is not UTF-8, which protojson refuses with its own error; a service carrying blind
// credentials), goes to protojson.
func (m requestMarshaler) Marshal(v any) ([]byte, error) {
	if out, ok := fastResponseJSON(v); ok {
		return out, nil
	}
	out, err := m.JSONPb.Marshal(v)
	if err != nil {
		return nil, err
	}
	return restPairs(v, out)
}

// responseBuffers recycles the encoders' scratch space; the returned JSON is a copy of it, since
// grpc-gateway keeps the slice until the response is written.
var responseBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func fastResponseJSON(v any) ([]byte, bool) {
	var enc func([]byte) ([]byte, bool)
	switch msg := v.(type) {
	case *secretsv1.Credential:
		enc = func(b []byte) ([]byte, bool) { return appendCredentialJSON(b, msg) }
	case *secretsv1.Service:
		if len(msg.GetBlindCredentials()) > 0 {
			return nil, false
		}
		enc = func(b []byte) ([]byte, bool) { return appendServiceJSON(b, msg) }
	default:
		return nil, false
	}
	bp := responseBuffers.Get().(*[]byte)
	out, ok := enc((*bp)[:0])
	var result []byte
	if ok {
		result = slices.Clone(out)
	}
	if cap(out) <= 64<<10 {
		*bp = out[:0]
		responseBuffers.Put(bp)
	}
	return result, ok
}

// jsonWriter appends one JSON object's members, tracking commas and UTF-8 validity.
type jsonWriter struct {
	b     []byte
	first bool
	ok    bool
}

func (w *jsonWriter) name(name string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

func (w *jsonWriter) str(s string) {
	var ok bool
	w.b, ok = appendJSONString(w.b, s)
	w.ok = w.ok && ok
}

func (w *jsonWriter) strings(list []string) {
	w.b = append(w.b, '[')
	for i, s := range list {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.str(s)
	}
	w.b = append(w.b, ']')
}

func (w *jsonWriter) stringMap(m map[string]string) { writeMap(w, m, (*jsonWriter).str) }

func (w *jsonWriter) boolMap(m map[string]bool) {
	writeMap(w, m, func(w *jsonWriter, v bool) { w.b = strconv.AppendBool(w.b, v) })
}

// writeMap writes a JSON object of m's entries in key order (protojson's), each value by value.
func writeMap[V any](w *jsonWriter, m map[string]V, value func(*jsonWriter, V)) {
	w.b = append(w.b, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.str(k)
		w.b = append(w.b, ':')
		value(w, m[k])
	}
	w.b = append(w.b, '}')
}

func (w *jsonWriter) wrapped(v *wrapperspb.StringValue) {
	if v == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.str(v.GetValue())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendCredentialJSON writes c's fields in field-number order, as protojson does.
func appendCredentialJSON(b []byte, c *secretsv1.Credential) ([]byte, bool) {
	w := jsonWriter{b: append(b, '{'), first: true, ok: true}
	w.name("id")
	w.str(c.GetId())
	w.name("name")
	w.str(c.GetName())
	w.name("credential_keys")
	w.strings(c.GetCredentialKeys())
	w.name("credential_pairs")
	if texts := c.GetCredentialPairsJson(); len(texts) > 0 {
		w.typedPairs(texts) // the values with their JSON types (pairsjson.go)
		for _, v := range c.GetCredentialPairs() {
			w.ok = w.ok && utf8.ValidString(v) // protojson refuses the message otherwise
		}
	} else {
		w.stringMap(c.GetCredentialPairs())
	}
	w.name("metadata")
	w.stringMap(c.GetMetadata())
	w.name("revision")
	w.b = strconv.AppendInt(w.b, int64(c.GetRevision()), 10)
	w.name("enabled")
	w.b = strconv.AppendBool(w.b, c.GetEnabled())
	w.name("documentation")
	w.wrapped(c.GetDocumentation())
	w.name("modified_date")
	w.str(c.GetModifiedDate())
	w.name("modified_by")
	w.str(c.GetModifiedBy())
	w.name("permissions")
	w.boolMap(c.GetPermissions())
	w.name("tags")
	w.strings(c.GetTags())
	w.name("last_decrypted_date")
	w.wrapped(c.GetLastDecryptedDate())
	w.name("last_rotation_date")
	w.wrapped(c.GetLastRotationDate())
	w.name("next_rotation_date")
	w.wrapped(c.GetNextRotationDate())
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// appendServiceJSON writes a service without blind credentials (fastResponseJSON checks).
func appendServiceJSON(b []byte, s *secretsv1.Service) ([]byte, bool) {
	w := jsonWriter{b: append(b, '{'), first: true, ok: true}
	w.name("id")
	w.str(s.GetId())
	w.name("revision")
	w.b = strconv.AppendInt(w.b, int64(s.GetRevision()), 10)
	w.name("enabled")
	w.b = strconv.AppendBool(w.b, s.GetEnabled())
	w.name("modified_date")
	w.str(s.GetModifiedDate())
	w.name("modified_by")
	w.str(s.GetModifiedBy())
	w.name("account")
	w.wrapped(s.GetAccount())
	w.name("credentials")
	w.b = append(w.b, '[')
	for i, c := range s.GetCredentials() {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		var ok bool
		if w.b, ok = appendCredentialJSON(w.b, c); !ok {
			w.ok = false
		}
	}
	w.b = append(w.b, ']')
	w.name("blind_credentials")
	w.b = append(w.b, '[', ']')
	w.name("permissions")
	w.boolMap(s.GetPermissions())
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// appendJSONString is protojson's string encoding: '"' and '\' escaped, control characters and DEL
// as \b \f \n \r \t or \u00XX, everything else (including '<', '>' and '&') as it is. ok is false for
// a string that is not valid UTF-8, which protojson refuses.
func appendJSONString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return b, false
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' && c != 0x7f {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\')
		switch c {
		case '"', '\\':
			b = append(b, c)
		case '\b':
			b = append(b, 'b')
		case '\f':
			b = append(b, 'f')
		case '\n':
			b = append(b, 'n')
		case '\r':
			b = append(b, 'r')
		case '\t':
			b = append(b, 't')
		default:
			b = append(b, 'u')
			b = append(b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}
