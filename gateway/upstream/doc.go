// Package upstream is the gateway's cluster manager (Envoy's source/common/upstream): named
// clusters of weighted hosts, each host with its own gRPC connection (or a direct one to a service
// of the same process), actively health-checked with the gRPC health protocol and passively watched
// by outlier detection, so every call goes to a healthy host. A cluster is a
// grpc.ClientConnInterface: it retries by its retry policy (retryState, Envoy's RetryStateImpl),
// bounds itself by its circuit breakers and retry budget (limits, Envoy's ResourceManagerImpl), and
// keeps Envoy-named statistics. The Manager runs the clusters of a configuration and swaps them
// whole on reload. The HTTP edge, the access log and the admin interface are package gateway's.
package upstream
