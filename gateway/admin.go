package gateway

import (
	"context"
	"net/http"
	"net/url"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gantry-dev/gantry/services/proxyadmin"
)

// rawQueryParser hands the admin services their whole query string: Envoy's admin parameters have
// free-form names (/logging?<logger>=<level>) that no request field could declare. Messages with a
// raw_query field (only admin requests have one) get the re-encoded query; every other message is
// parsed the default way. grpc-gateway keeps the query parser in a package variable shared by all
// muxes, which is why this parser must also do the default job.
type rawQueryParser struct{}

func (rawQueryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	m := msg.ProtoReflect()
	if fd := m.Descriptor().Fields().ByName("raw_query"); fd != nil && fd.Kind() == protoreflect.StringKind {
		m.Set(fd, protoreflect.ValueOfString(values.Encode()))
		return nil
	}
	return (&runtime.DefaultQueryParser{}).Parse(msg, values, filter)
}

// adminRoutingErrorHandler answers an unknown admin path with the menu and 404, as Envoy 1.x does.
func adminRoutingErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	if httpStatus != http.StatusNotFound {
		routingErrorHandler(r.Context(), nil, nil, w, r, httpStatus)
		return
	}
	w.Header().Set("Content-Type", proxyadmin.TextContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte(proxyadmin.Menu()))
}
