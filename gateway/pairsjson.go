package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	secretsv1 "github.com/gantry-dev/gantry/proto/secrets/v1"
)

// A credential's pairs keep their JSON type (string, number, boolean, null), as Confidant serves
// them. gRPC carries them twice in secrets.v1.Credential: credential_pairs, a map of strings (each
// value as text, for clients that read strings), and credential_pairs_json, each value's JSON text.
// A REST answer shows Confidant's shape: credential_pairs holds the typed values, and
// credential_pairs_json is never shown. The hand-written encoders write that directly
// (responsejson.go); any other answer that holds a credential is protojson's JSON rewritten here.

const credentialPairsJSONField = "credential_pairs_json"

var errPairJSON = errors.New("credential_pairs_json holds a value that is not a JSON string, number, boolean or null")

// scalarJSON reports whether text is one JSON string, number, boolean or null, written compactly
// (no whitespace around it; a valid scalar has none inside but in a string).
func scalarJSON(text string) bool {
	if text == "" || text[0] == '{' || text[0] == '[' || isJSONSpace(text[0]) || isJSONSpace(text[len(text)-1]) {
		return false
	}
	// json.Valid only reads its argument: no copy of the value for the check.
	return json.Valid(unsafe.Slice(unsafe.StringData(text), len(text)))
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// typedPairs writes the object of a credential's pairs from their JSON texts, in key order.
func (w *jsonWriter) typedPairs(texts map[string]string) {
	writeMap(w, texts, func(w *jsonWriter, text string) {
		if !scalarJSON(text) {
			w.ok = false
			return
		}
		w.b = append(w.b, text...)
	})
}

// pairHolders remembers, per message type, whether it is or holds a secrets.v1.Credential.
var pairHolders sync.Map

func holdsCredential(md protoreflect.MessageDescriptor) bool {
	if v, ok := pairHolders.Load(md.FullName()); ok {
		return v.(bool)
	}
	v := reachesCredential(md, map[protoreflect.FullName]bool{})
	pairHolders.Store(md.FullName(), v)
	return v
}

var credentialName = (&secretsv1.Credential{}).ProtoReflect().Descriptor().FullName()

func reachesCredential(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if md.FullName() == credentialName {
		return true
	}
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); fd.Message() != nil && !fd.IsMap() && reachesCredential(fd.Message(), seen) {
			return true
		}
	}
	return false
}

// restPairs rewrites protojson's JSON of v for REST when v holds a credential: in every object with a
// credential_pairs_json member, that member is dropped and, when it holds values, credential_pairs
// becomes the object of those typed values. Every other byte (member order, number text) is kept.
func restPairs(v any, data []byte) ([]byte, error) {
	msg, ok := v.(proto.Message)
	if !ok || !holdsCredential(msg.ProtoReflect().Descriptor()) {
		return data, nil
	}
	var out bytes.Buffer
	out.Grow(len(data))
	if err := rewritePairs(data, &out); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

type jsonMember struct {
	key string
	val json.RawMessage
}

func rewritePairs(raw []byte, out *bytes.Buffer) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return errors.New("empty JSON value")
	}
	switch raw[0] {
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return err
		}
		out.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := rewritePairs(item, out); err != nil {
				return err
			}
		}
		out.WriteByte(']')
		return nil
	case '{':
	default:
		out.Write(raw)
		return nil
	}
	members, err := objectMembers(raw)
	if err != nil {
		return err
	}
	var texts map[string]string
	hasTexts := false
	for _, m := range members {
		if m.key == credentialPairsJSONField {
			hasTexts = true
			if err := json.Unmarshal(m.val, &texts); err != nil {
				return err
			}
		}
	}
	out.WriteByte('{')
	first := true
	for _, m := range members {
		if hasTexts && m.key == credentialPairsJSONField {
			continue
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		key, _ := appendJSONString(nil, m.key)
		out.Write(key)
		out.WriteByte(':')
		if hasTexts && len(texts) > 0 && m.key == "credential_pairs" {
			w := jsonWriter{first: true, ok: true}
			w.typedPairs(texts)
			if !w.ok {
				return errPairJSON
			}
			out.Write(w.b)
			continue
		}
		if err := rewritePairs(m.val, out); err != nil {
			return err
		}
	}
	out.WriteByte('}')
	return nil
}

// objectMembers reads a JSON object's members in order, each value as its raw text.
func objectMembers(raw []byte) ([]jsonMember, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var members []jsonMember
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		members = append(members, jsonMember{key, val})
	}
	return members, nil
}
