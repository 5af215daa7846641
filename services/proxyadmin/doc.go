// Package proxyadmin is the Envoy-style administration interface of gantry's gateway. It serves the
// admin gRPC service over a small Proxy interface that the gateway implements, and renders Envoy 1.x
// text formats.
package proxyadmin
