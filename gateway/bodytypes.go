package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// bodyTypeError names the first field of a JSON body whose value has the wrong JSON type for its
// field, with the type it must have ("credential_pairs must be an object", "enabled must be a
// boolean"); "" when it finds none (then the decoder's own message is used). It runs only after the
// decoder refused the body, whose messages name neither the field of a wrapper
// ("invalid value for bool field value") nor any field at all ("unexpected token ["). The value is
// never quoted: it may be a secret.
func bodyTypeError(md protoreflect.MessageDescriptor, data []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return ""
	}
	obj, ok := v.(map[string]any)
	if !ok {
		// [], "text", 3, null: protojson says "unexpected token" without a word of what it wanted.
		return "the body must be a JSON object"
	}
	return objectTypeError(md, obj, "")
}

func objectTypeError(md protoreflect.MessageDescriptor, obj map[string]any, prefix string) string {
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ { // declaration order: the same field is named every time
		fd := fields.Get(i)
		v, ok := obj[fd.JSONName()]
		if !ok {
			v, ok = obj[string(fd.Name())]
		}
		if !ok || v == nil { // null leaves any field unset
			continue
		}
		name := prefix + string(fd.Name())
		if msg := fieldTypeError(fd, v, name); msg != "" {
			return msg
		}
	}
	return ""
}

func fieldTypeError(fd protoreflect.FieldDescriptor, v any, name string) string {
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		valueFd := fd.MapValue()
		if !ok {
			return fmt.Sprintf("%s must be an object of %s", name, plural(valueFd))
		}
		for _, item := range obj {
			if item == nil || !singleMatches(valueFd, item) {
				return fmt.Sprintf("%s must be an object of %s", name, plural(valueFd))
			}
			if msg := nestedTypeError(valueFd, item, name+"."); msg != "" {
				return msg
			}
		}
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			return fmt.Sprintf("%s must be a list of %s", name, plural(fd))
		}
		for _, item := range list {
			if item == nil || !singleMatches(fd, item) {
				return fmt.Sprintf("%s must be a list of %s", name, plural(fd))
			}
			if msg := nestedTypeError(fd, item, name+"."); msg != "" {
				return msg
			}
		}
	default:
		if !singleMatches(fd, v) {
			return fmt.Sprintf("%s must be %s", name, singular(fd))
		}
		return nestedTypeError(fd, v, name+".")
	}
	return ""
}

// nestedTypeError descends into a plain message value (not a well-known type).
func nestedTypeError(fd protoreflect.FieldDescriptor, v any, prefix string) string {
	if fd.Kind() != protoreflect.MessageKind || fd.Message().ParentFile().Package() == "google.protobuf" {
		return ""
	}
	obj, _ := v.(map[string]any)
	return objectTypeError(fd.Message(), obj, prefix)
}

// singleMatches reports whether a JSON value can be one value of fd (an element, for lists and maps),
// as protojson reads it: integers and numbers may also be written as strings.
func singleMatches(fd protoreflect.FieldDescriptor, v any) bool {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		switch fd.Message().FullName() {
		case "google.protobuf.Value":
			return true
		case "google.protobuf.Struct", "google.protobuf.Any":
			_, ok := v.(map[string]any)
			return ok
		case "google.protobuf.ListValue":
			_, ok := v.([]any)
			return ok
		case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask":
			_, ok := v.(string)
			return ok
		}
		if !isWrapper(fd.Message()) {
			_, ok := v.(map[string]any)
			return ok
		}
	}
	switch scalarKind(fd) {
	case protoreflect.StringKind, protoreflect.BytesKind:
		_, ok := v.(string)
		return ok
	case protoreflect.BoolKind:
		_, ok := v.(bool)
		return ok
	case protoreflect.EnumKind:
		switch v.(type) {
		case string, json.Number:
			return true
		}
		return false
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch v.(type) {
		case string, json.Number:
			return true
		}
		return false
	default: // integers
		var text string
		switch n := v.(type) {
		case json.Number:
			text = n.String()
		case string:
			text = n
		default:
			return false
		}
		f, err := strconv.ParseFloat(text, 64)
		return err == nil && f == math.Trunc(f)
	}
}

// singular describes the JSON type of one value of fd.
func singular(fd protoreflect.FieldDescriptor) string {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		switch fd.Message().FullName() {
		case "google.protobuf.Struct", "google.protobuf.Any":
			return "an object"
		case "google.protobuf.ListValue":
			return "a list"
		case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask":
			return "a string"
		}
		if !isWrapper(fd.Message()) {
			return "an object"
		}
	}
	switch scalarKind(fd) {
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BytesKind:
		return "a base64 string"
	case protoreflect.BoolKind:
		return "a boolean"
	case protoreflect.EnumKind:
		return "a string"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	default:
		return "an integer"
	}
}

// plural describes the JSON type of the elements of a list or the values of a map.
func plural(fd protoreflect.FieldDescriptor) string {
	switch s := singular(fd); s {
	case "a string", "a base64 string":
		return "strings"
	case "a boolean":
		return "booleans"
	case "a number":
		return "numbers"
	case "an integer":
		return "integers"
	case "a list":
		return "lists"
	default:
		return "objects"
	}
}
