package gateway

import (
	"context"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	optionsv1 "github.com/gantry-dev/gantry/proto/gantry/options/v1"
)

// inlineRewriter writes the google.protobuf.Struct fields marked (gantry.options.v1.json_inline) as
// fields of their enclosing JSON object: chat answers Slack's objects flat, as Omnibot does, beside
// the spec's typed fields. Answers without such a field, raw HttpBody answers among them, pass
// untouched, and cost one cached lookup.
func inlineRewriter(marshal protojson.MarshalOptions) func(context.Context, proto.Message) (any, error) {
	return func(_ context.Context, resp proto.Message) (any, error) {
		md := resp.ProtoReflect().Descriptor()
		if !inlines.has(md) {
			return resp, nil
		}
		data, err := marshal.Marshal(resp)
		if err != nil {
			return nil, err
		}
		var out structpb.Struct
		if err := protojson.Unmarshal(data, &out); err != nil {
			return nil, err
		}
		inlineFields(md, &out)
		return &out, nil
	}
}

// inlineFields moves the inline fields of obj, the JSON of a message of type md, into obj itself,
// and recurses into message fields that hold some.
func inlineFields(md protoreflect.MessageDescriptor, obj *structpb.Struct) {
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := string(fd.Name()) // the gateway writes proto field names
		val, ok := obj.GetFields()[name]
		if !ok {
			continue
		}
		if isInline(fd) {
			delete(obj.Fields, name)
			for k, v := range val.GetStructValue().GetFields() {
				if _, taken := obj.Fields[k]; !taken {
					obj.Fields[k] = v
				}
			}
			continue
		}
		if fd.Message() == nil || fd.IsMap() || !inlines.has(fd.Message()) {
			continue
		}
		if fd.IsList() {
			for _, item := range val.GetListValue().GetValues() {
				if s := item.GetStructValue(); s != nil {
					inlineFields(fd.Message(), s)
				}
			}
		} else if s := val.GetStructValue(); s != nil {
			inlineFields(fd.Message(), s)
		}
	}
}

func isInline(fd protoreflect.FieldDescriptor) bool {
	if fd.Message() == nil || fd.Message().FullName() != "google.protobuf.Struct" || fd.IsList() || fd.IsMap() {
		return false
	}
	inline, _ := proto.GetExtension(fd.Options(), optionsv1.E_JsonInline).(bool)
	return inline
}

// inlineIndex remembers, per message type, whether it or a message it holds has an inline field.
type inlineIndex struct{ known sync.Map }

var inlines inlineIndex

func (x *inlineIndex) has(md protoreflect.MessageDescriptor) bool {
	if v, ok := x.known.Load(md.FullName()); ok {
		return v.(bool)
	}
	v := hasInline(md, map[protoreflect.FullName]bool{})
	x.known.Store(md.FullName(), v)
	return v
}

// hasInline walks md's message fields; seen stops recursive types (Struct holds Value holds Struct).
func hasInline(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if isInline(fd) {
			return true
		}
		if fd.Message() != nil && !fd.IsMap() && hasInline(fd.Message(), seen) {
			return true
		}
	}
	return false
}
