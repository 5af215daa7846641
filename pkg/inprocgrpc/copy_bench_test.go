package inprocgrpc

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// answerLike is shaped like a service read's answer: 10 records of a few fields and small maps.
func answerLike(tb testing.TB) *structpb.Struct {
	records := make([]any, 10)
	for i := range records {
		records[i] = map[string]any{"id": fmt.Sprint("id", i), "name": "n", "enabled": true,
			"credential_pairs": map[string]any{fmt.Sprint("key_", i): "v"},
			"permissions":      map[string]any{"metadata": true, "get": true, "update": true}}
	}
	msg, err := structpb.NewStruct(map[string]any{"id": "bench-service", "credentials": records})
	if err != nil {
		tb.Fatal(err)
	}
	return msg
}

// BenchmarkAnswerCopy compares what answer does with the deep copy it replaced (proto.Merge into the
// caller's reply).
func BenchmarkAnswerCopy(b *testing.B) {
	msg := answerLike(b)
	b.Run("move", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			moveFields(new(structpb.Struct).ProtoReflect(), msg.ProtoReflect())
		}
	})
	b.Run("deep_copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			proto.Merge(new(structpb.Struct), msg)
		}
	})
}
