// Package secrets is gantry's secrets service, compatible with Lyft Confidant's REST API.
//
// Layering: server.go is the gRPC transport (validate, convert, call, map errors, convert back);
// service.go holds the domain rules and imports neither grpc nor storage; errors.go owns the sentinel
// errors and the single mapping to gRPC status codes.
package secrets
