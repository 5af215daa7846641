package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// formContentType is what browsers post for the SAML HTTP-POST binding.
const formContentType = "application/x-www-form-urlencoded"

// formMarshaler decodes form bodies into request messages, matching each field by its JSON name
// (SAMLResponse) or its proto name (saml_response); only string fields can be set this way. Answers
// are still rendered by the embedded JSON marshaler.
type formMarshaler struct {
	runtime.Marshaler
}

func (m formMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok {
			return errors.New("form body: not a message")
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return io.EOF
		}
		// `curl -d '{...}'` labels a JSON body as a form: read what was meant rather than silently
		// dropping every field and answering "name is a required field".
		if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
			return m.Marshaler.NewDecoder(bytes.NewReader(data)).Decode(v)
		}
		values, err := url.ParseQuery(string(data))
		if err != nil {
			return fmt.Errorf("invalid form request body: %v", err)
		}
		m := msg.ProtoReflect()
		fields := m.Descriptor().Fields()
		for key, vals := range values {
			fd := fields.ByJSONName(key)
			if fd == nil {
				fd = fields.ByName(protoreflect.Name(key))
			}
			if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() || len(vals) == 0 {
				continue
			}
			// A proto string must be UTF-8: the gRPC client would refuse to marshal the request and the
			// caller would get a 500 for what is bad input (a JSON body is checked by protojson).
			if !utf8.ValidString(vals[0]) {
				return fmt.Errorf("invalid form request body: %s is not valid UTF-8", key)
			}
			m.Set(fd, protoreflect.ValueOfString(vals[0]))
		}
		return nil
	})
}
