package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/gateway/upstream"
	"github.com/gantry-dev/gantry/gateway/webui"
	"github.com/gantry-dev/gantry/pkg/logging"
	"github.com/gantry-dev/gantry/pkg/wirekeys"
)

// writeJSONError writes {"error": message} with the given status. Extra fields (Confidant's reference
// and conflicts, Omnibot's team_name and email) are merged in from fields.
func writeJSONError(w http.ResponseWriter, code int, message string, fields map[string]any) {
	body := map[string]any{}
	for k, v := range fields {
		body[k] = v
	}
	body["error"] = message
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // messages like "<user_type>" stay readable; the content type is JSON
	_ = enc.Encode(body)
}

// errorHandler renders a gRPC status as JSON. Services attach extra body fields as a
// google.protobuf.Struct status detail. Internal and unknown errors never reach the client in detail;
// transport failures arrive here already replaced by the cluster (package upstream), so no upstream
// address reaches a client.
func errorHandler(logger *zap.Logger) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		if errors.Is(err, upstream.ErrOverloaded) {
			// Envoy's mark of a circuit-breaker refusal: the client may go elsewhere at once.
			w.Header().Set("X-Envoy-Overloaded", "true")
		}
		st := describeParamError(ctx, status.Convert(err))
		code := errorMetadata(ctx, w, upstream.HTTPStatusFromCode(st.Code()))
		msg := st.Message()
		switch st.Code() {
		case codes.Unknown, codes.Internal, codes.DataLoss:
			logger.Error("request failed", logging.Untrusted("path", r.URL.Path), zap.String("code", st.Code().String()), zap.String("detail", msg),
				zap.String("request_id", r.Header.Get(wirekeys.RequestID)))
			msg = "internal error"
		}
		var fields map[string]any
		for _, d := range st.Details() {
			if s, ok := d.(*structpb.Struct); ok {
				fields = s.AsMap()
			}
		}
		if webui.WantsLoginErrorPage(r) {
			webui.WriteLoginErrorPage(w, code, msg)
			return
		}
		writeJSONError(w, code, msg, notOKFields(r, code, fields))
	}
}

// routingErrorHandler answers paths and methods no route serves.
func routingErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		writeJSONError(w, httpStatus, "method "+r.Method+" not allowed on "+r.URL.Path, nil)
	case http.StatusNotFound:
		writeJSONError(w, httpStatus, "no route for "+r.URL.Path, nil)
	default:
		writeJSONError(w, httpStatus, http.StatusText(httpStatus), nil)
	}
}

// requestMarshaler is the JSON marshaler with request-decoding errors that say what was wrong with
// the body, instead of protojson's bare "unexpected EOF" or "proto: (line 1:12): ...".
type requestMarshaler struct {
	*runtime.JSONPb
}

func (m requestMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	// The body is already in memory (limitBody read it, bounded): read it once more here to refuse
	// data after the JSON value, which protojson's stream decoder would silently ignore.
	data, readErr := io.ReadAll(r)
	inner := m.JSONPb.NewDecoder(bytes.NewReader(data))
	return runtime.DecoderFunc(func(v any) error {
		if readErr != nil {
			return fmt.Errorf("invalid JSON request body: %v", readErr)
		}
		if trailingData(data) {
			return errors.New("invalid JSON request body: data after the JSON value")
		}
		err := inner.Decode(v)
		if err == nil {
			if msg, ok := v.(proto.Message); ok {
				fillUpdateMask(msg, data)
			}
			return nil
		}
		if errors.Is(err, io.EOF) {
			// io.EOF is an empty body, which grpc-gateway treats as an empty message.
			if msg, ok := v.(proto.Message); ok {
				fillUpdateMask(msg, nil)
			}
			return err
		}
		if msg, ok := v.(proto.Message); ok {
			if typeErr := bodyTypeError(msg.ProtoReflect().Descriptor(), data); typeErr != "" {
				return errors.New("invalid JSON request body: " + typeErr)
			}
		}
		// protojson randomly writes a non-breaking space after "proto:" (so that callers do not
		// match its messages); either way the prefix says nothing to a client.
		detail := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "proto: "), "proto:\u00a0")
		return fmt.Errorf("invalid JSON request body: %s", redactToken(detail))
	})
}

// fillUpdateMask sets the update_mask of a request that has one (google.protobuf.FieldMask) and whose
// body did not give it, to the fields the JSON body names: the service then keeps the fields the body
// left out, where protojson alone cannot tell an absent list from an empty one (PUT
// /v1/services/<id> {"enabled": false} must not drop the mapping). An empty body names no field.
func fillUpdateMask(msg proto.Message, data []byte) {
	m := msg.ProtoReflect()
	fd := m.Descriptor().Fields().ByName("update_mask")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "google.protobuf.FieldMask" || m.Has(fd) {
		return
	}
	var obj map[string]json.RawMessage
	if len(data) > 0 && json.Unmarshal(data, &obj) != nil {
		return
	}
	mask := &fieldmaskpb.FieldMask{Paths: []string{}}
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		if f == fd {
			continue
		}
		_, byName := obj[string(f.Name())]
		_, byJSON := obj[f.JSONName()]
		if byName || byJSON {
			mask.Paths = append(mask.Paths, string(f.Name()))
		}
	}
	m.Set(fd, protoreflect.ValueOfMessage(mask.ProtoReflect()))
}

// trailingData reports whether data holds more than one JSON value (with whitespace around it). A body
// that is not JSON at all is left to the decoder, whose error says what is wrong.
func trailingData(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var first json.RawMessage
	if err := dec.Decode(&first); err != nil {
		return false
	}
	_, err := dec.Token()
	return err != io.EOF
}

// Decoder messages quote the offending token of the body, which may be a secret value (a credential
// pair of the wrong type, a password in a broken body): error bodies and logs must never echo it.
var tokenInMessage = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`unexpected token .*$`), "unexpected token"},
	{regexp.MustCompile(`(invalid value for [^:]*): .*$`), "$1"},
	{regexp.MustCompile(`invalid escape code .* in string`), "invalid escape code in string"},
	{regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), `"…"`},
}

// redactToken removes the body's own text from a decoder error message, keeping what was wrong.
func redactToken(msg string) string {
	for _, r := range tokenInMessage {
		msg = r.re.ReplaceAllString(msg, r.repl)
	}
	return msg
}
