// Package secrets is gantry's secrets service, compatible with Lyft Confidant's REST API.
//
// Layering: server.go is the gRPC transport (validate, convert, call, map errors, convert back);
// the domain rules import neither grpc nor storage: service.go (the Service, shared rules, client
// configuration), credentials.go (credentials, their revisions and archive), services.go (service
// mappings and their revisions), certs.go, grants.go, auth.go; store.go is the storage interface, its
// records and errors, which the adapters implement: packages store/boltstore (bbolt) and
// store/etcdstore (etcd), sharing the record encoding of package store/codec (the conformance suite
// is package storetest). The adapters import this package, never the reverse: internal/stack opens
// the configured one and hands it to NewService. errors.go owns the sentinel errors and the single
// mapping to gRPC status codes.
package secrets
