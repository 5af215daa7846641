// Package secrets is gantry's secrets service, compatible with Lyft Confidant's REST API.
//
// Layering: server.go is the gRPC transport (validate, convert, call, map errors, convert back);
// the domain rules import neither grpc nor storage: service.go (the Service, shared rules, client
// configuration), credentials.go (credentials, their revisions and archive), services.go (service
// mappings and their revisions), certs.go, grants.go, auth.go; store.go is the storage interface that
// boltstore.go and etcdstore.go implement (its conformance suite is package storetest); errors.go owns the sentinel errors and the single mapping
// to gRPC status codes.
package secrets
