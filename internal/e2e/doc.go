// Package e2e holds gantry's end-to-end suite: it starts the whole stack in-process on 127.0.0.1:0
// ports with a temporary data folder, and drives it the way users do — REST through the gateway with
// a plain HTTP client, and gRPC straight to the services. Skipped under -short.
package e2e
