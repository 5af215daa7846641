package gateway

import (
	"context"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// heldChangeField is the field a write's answer sets instead of the written record when an approval
// rule held the write: a change request (secrets.v1.ChangeRequest).
const heldChangeField = "change_request"

// heldChangeRewriter makes a held write's REST body the change request itself. The write's route
// selects the record as its body (response_body: "credential"), which is unset then; the secrets
// service has also set the status (202) and a Location header through response metadata. A write
// that applied answers as it always did: an answer whose whole message is the body (the archive's)
// loses the unset field, so a Confidant client sees exactly Confidant's fields. Every other answer
// passes untouched.
func heldChangeRewriter(marshal protojson.MarshalOptions) func(context.Context, proto.Message) (any, error) {
	return func(_ context.Context, resp proto.Message) (any, error) {
		m := resp.ProtoReflect()
		fd := m.Descriptor().Fields().ByName(heldChangeField)
		if fd == nil || fd.Message() == nil || fd.Message().FullName() != "secrets.v1.ChangeRequest" {
			return resp, nil
		}
		if m.Has(fd) {
			return m.Get(fd).Message().Interface(), nil
		}
		if _, selected := resp.(interface{ XXX_ResponseBody() any }); selected {
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
		delete(out.Fields, heldChangeField)
		return &out, nil
	}
}

// chainRewriters runs response rewriters in order, each on the previous one's result while it is
// still a message.
func chainRewriters(rewriters ...func(context.Context, proto.Message) (any, error)) func(context.Context, proto.Message) (any, error) {
	return func(ctx context.Context, resp proto.Message) (any, error) {
		var out any = resp
		for _, rw := range rewriters {
			msg, ok := out.(proto.Message)
			if !ok {
				return out, nil
			}
			var err error
			if out, err = rw(ctx, msg); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}
