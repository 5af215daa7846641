// Package wirekeys spells the wire keys of gantry, each once. A wire key is a header or gRPC
// metadata key that two sides of a call both read or write: the gateway and the services behind
// it, or a service and its clients. Both sides import the key from here, so they cannot drift
// apart, as etcd's rpctypes does for its metadata keys.
//
// Keys are lower-case: gRPC metadata requires it, and http.Header's Get, Set, Del and Values
// canonicalise what they are given. Indexing an http.Header map directly needs
// http.CanonicalHeaderKey(key).
//
// A header only one side knows (the browser-hardening headers the gateway sets, a third party's
// own headers such as Slack's signature) is not a wire key and stays with its side.
package wirekeys

// Status and flow control, set by a service on its response and applied by the gateway.
const (
	// HTTPCode is the response metadata key through which a service sets the HTTP status of its
	// answer when gRPC's code cannot say it: the redirects of the login routes, chat's 429 and
	// 502, the admin pages' 404 and 503. The gateway writes it as the status and drops it.
	HTTPCode = "x-http-code"
	// RetryAfter is the response metadata key (and the HTTP header) of a backoff in seconds: a
	// service sets it on a throttled or stalled write, the gateway forwards it as Retry-After, and
	// gantry's clients and chat's Slack client wait as long.
	RetryAfter = "retry-after"
	// SetCookie and Location are response metadata keys of the login routes that the gateway
	// turns into the HTTP headers of the same names.
	SetCookie = "set-cookie"
	Location  = "location"
)

// The caller's credentials: sent by clients over HTTP (and forwarded by the gateway as metadata)
// or directly as gRPC metadata.
const (
	Authorization = "authorization"
	AuthFrom      = "x-auth-from"
	AuthToken     = "x-auth-token"
	Cookie        = "cookie"
	XSRFToken     = "x-xsrf-token"
	// IfMatch is the expected revision of a write, gantry's optimistic concurrency: the HTTP
	// If-Match header, forwarded by the gateway under this key.
	IfMatch = "if-match"
)

// RequestID carries the request id from the client (when well formed) or the gateway into the
// services' logs and audit records, and back to the client.
const RequestID = "x-request-id"

// The gateway's own assertions about a caller: a client never sets them (the gateway removes what
// a client sent), and internal TLS drops them from any peer but the gateway.
const (
	// ProxyInternal is "true" when the downstream address is in one of the internal networks.
	ProxyInternal = "x-proxy-internal"
	// DownstreamServiceCluster names the calling service; the gateway forwards it only from
	// internal downstreams.
	DownstreamServiceCluster = "x-proxy-downstream-service-cluster"
	// EnvoyInternal and EnvoyDownstreamServiceCluster are Envoy's names of the two keys above,
	// which Omnibot's access configuration uses; chat reads them as gantry's own.
	EnvoyInternal                 = "x-envoy-internal"
	EnvoyDownstreamServiceCluster = "x-envoy-downstream-service-cluster"
	// ProxyRoute names the REST route a call came by: its path template as the proto declares it
	// (rpcpolicy.Route.Template), e.g. /api/v2/slack/action/{team_name}/{bot_name}, so a service
	// can decide on the spelling of a route the caller used, as Omnibot's access control does.
	ProxyRoute = "x-proxy-route"
	// ClientCert carries the certificate chain a caller presented on the REST listener and proved
	// it holds the key of, in workload.EncodeChain's form; services verify the chain themselves.
	ClientCert = "x-gantry-client-cert"
)

// ForwardedFor and ForwardedHost are the metadata grpc-gateway derives from the connection; the
// gateway drops a client's headers of these names, and the audit trail records ForwardedFor.
const (
	ForwardedFor  = "x-forwarded-for"
	ForwardedHost = "x-forwarded-host"
)
