// Package gateway is gantry's edge proxy. It translates the documented REST paths of the secrets and
// chat services into gRPC calls (grpc-gateway), renders every error as JSON, marks requests from
// internal networks with x-proxy-internal, bounds request bodies, and runs the Envoy-style admin
// interface (package proxyadmin) on a separate loopback listener.
package gateway
