package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// This file is the one place where path and query parameters of the wrong type are answered: 400
// naming the parameter and the type it must have, instead of Go's parser messages
// (`strconv.ParseInt: parsing "None": invalid syntax`), which say neither and quote the value.

// queryBooleans are the spellings a boolean query parameter takes: Confidant's (misc.get_boolean reads
// True, true and 1 as true; python-confidant-client sends True/False) and their false counterparts. An
// empty value is false, as an absent one. Confidant read every other spelling as false; a typo
// (metadata_only=yes) then silently returned secret values, so gantry refuses it.
var queryBooleans = map[string]string{
	"true": "true", "True": "true", "1": "true",
	"false": "false", "False": "false", "0": "false", "": "false",
}

const booleanSpellings = "true, false, True, False, 1 or 0"

// paramTypeError is the answer to a parameter whose value does not parse as its field's type.
// outOfRange tells an integer too large for its field from one that is no integer at all.
func paramTypeError(name string, fd protoreflect.FieldDescriptor, outOfRange bool) error {
	kind := scalarKind(fd)
	switch kind {
	case protoreflect.BoolKind:
		return fmt.Errorf("%s must be a boolean: %s", name, booleanSpellings)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return fmt.Errorf("%s must be a number", name)
	}
	if lo, hi, ok := integerRange(kind); ok {
		if outOfRange {
			return fmt.Errorf("%s must be an integer from %s to %s", name, lo, hi)
		}
		return fmt.Errorf("%s must be an integer", name)
	}
	return fmt.Errorf("%s has the wrong type", name)
}

// scalarKind is the kind of a field, seeing through the wrapper messages (google.protobuf.Int32Value
// and the like), which requests use for optional scalars.
func scalarKind(fd protoreflect.FieldDescriptor) protoreflect.Kind {
	if fd.Kind() == protoreflect.MessageKind && isWrapper(fd.Message()) {
		return fd.Message().Fields().ByName("value").Kind()
	}
	return fd.Kind()
}

func isWrapper(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf" && strings.HasSuffix(string(md.Name()), "Value") &&
		md.Fields().Len() == 1 && md.Fields().ByName("value") != nil
}

// integerRange gives the bounds of an integer kind as text.
func integerRange(kind protoreflect.Kind) (lo, hi string, ok bool) {
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.Itoa(math.MinInt32), strconv.Itoa(math.MaxInt32), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.FormatInt(math.MinInt64, 10), strconv.FormatInt(math.MaxInt64, 10), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "0", strconv.FormatUint(math.MaxUint32, 10), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return "0", strconv.FormatUint(math.MaxUint64, 10), true
	}
	return "", "", false
}

// normalizeParam checks one query value against its field and returns the spelling grpc-gateway's
// parser reads (booleans in Confidant's spellings become true/false).
func normalizeParam(name string, fd protoreflect.FieldDescriptor, value string) (string, error) {
	kind := scalarKind(fd)
	if kind == protoreflect.BoolKind {
		if b, ok := queryBooleans[value]; ok {
			return b, nil
		}
		return "", paramTypeError(name, fd, false)
	}
	var err error
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		_, err = strconv.ParseInt(value, 10, 32)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		_, err = strconv.ParseInt(value, 10, 64)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		_, err = strconv.ParseUint(value, 10, 32)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		_, err = strconv.ParseUint(value, 10, 64)
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		_, err = strconv.ParseFloat(value, 64)
	}
	if err != nil {
		return "", paramTypeError(name, fd, errors.Is(err, strconv.ErrRange))
	}
	return value, nil
}

// queryField finds the field a query key names (dotted path, proto or JSON names), with the path in
// proto names as grpc-gateway's filter of path parameters has it; nil when no field matches, which
// grpc-gateway's parser then ignores.
func queryField(md protoreflect.MessageDescriptor, key string) (protoreflect.FieldDescriptor, []string) {
	var fd protoreflect.FieldDescriptor
	var path []string
	for i, part := range strings.Split(key, ".") {
		if i > 0 {
			if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
				return nil, nil
			}
			md = fd.Message()
		}
		fd = md.Fields().ByName(protoreflect.Name(part))
		if fd == nil {
			fd = md.Fields().ByJSONName(part)
		}
		if fd == nil {
			return nil, nil
		}
		path = append(path, string(fd.Name()))
	}
	return fd, path
}

// checkQuery returns the query with every value of a known scalar field checked and normalised, or
// the error naming the first parameter of the wrong type.
func checkQuery(msg proto.Message, values url.Values, filter *utilities.DoubleArray) (url.Values, error) {
	md := msg.ProtoReflect().Descriptor()
	out := make(url.Values, len(values))
	for key, vals := range values {
		out[key] = vals
		if strings.Contains(key, "[") { // map entries (field[key]=value) are left to grpc-gateway
			continue
		}
		fd, path := queryField(md, key)
		if fd == nil || fd.IsMap() || (filter != nil && filter.HasCommonPrefix(path)) {
			continue
		}
		if fd.Kind() == protoreflect.MessageKind && !isWrapper(fd.Message()) {
			continue
		}
		checked := make([]string, len(vals))
		for i, v := range vals {
			n, err := normalizeParam(key, fd, v)
			if err != nil {
				return nil, err
			}
			checked[i] = n
		}
		out[key] = checked
	}
	return out, nil
}

// pathTypeMismatch is grpc-gateway's message for a path parameter that does not parse; the generated
// handlers build it, so it is rewritten where errors are rendered (describeParamError).
var pathTypeMismatch = regexp.MustCompile(`^type mismatch, parameter: ([A-Za-z0-9_.]+), error: (.*)$`)

// describeParamError replaces grpc-gateway's message for a path parameter of the wrong type with one
// naming the parameter and its type; other errors are returned as they are.
func describeParamError(ctx context.Context, st *status.Status) *status.Status {
	if st.Code() != codes.InvalidArgument {
		return st
	}
	m := pathTypeMismatch.FindStringSubmatch(st.Message())
	if m == nil {
		return st
	}
	name, detail := m[1], m[2]
	outOfRange := strings.Contains(detail, strconv.ErrRange.Error())
	if fd := rpcInputField(ctx, name); fd != nil {
		return status.New(codes.InvalidArgument, paramTypeError(name, fd, outOfRange).Error())
	}
	// The method is unknown (no annotated context): the parser's name still tells the type.
	msg := name + " has the wrong type"
	switch {
	case strings.Contains(detail, "ParseBool"):
		msg = fmt.Sprintf("%s must be a boolean: %s", name, booleanSpellings)
	case strings.Contains(detail, "ParseInt"), strings.Contains(detail, "ParseUint"):
		msg = name + " must be an integer"
	case strings.Contains(detail, "ParseFloat"):
		msg = name + " must be a number"
	}
	return status.New(codes.InvalidArgument, msg)
}

// rpcInputField finds the request field a path parameter fills, from the method grpc-gateway put in
// the context.
func rpcInputField(ctx context.Context, name string) protoreflect.FieldDescriptor {
	method, ok := runtime.RPCMethod(ctx) // "/secrets.v1.SecretsService/RevertCredential"
	if !ok {
		return nil
	}
	full := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(full)
	if err != nil {
		return nil
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil
	}
	fd, _ := queryField(md.Input(), name)
	return fd
}
