// Package gateway is gantry's edge proxy. It translates the documented REST paths of the secrets and
// chat services into gRPC calls (grpc-gateway) to upstream clusters (package upstream, the cluster
// manager: weighted hosts, health checks, outlier detection, retries and circuit breakers), so every
// request goes to a healthy host. It keeps Envoy-named statistics and an access log, renders every
// error as JSON, marks requests from internal networks with x-proxy-internal, bounds request bodies,
// answers /healthcheck (and drains after the admin /healthcheck/fail), optionally serves HTTPS, and
// runs the Envoy-style admin interface (package proxyadmin, over the Gateway's proxyadmin.Proxy
// methods) on a separate loopback listener.
package gateway
