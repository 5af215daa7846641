// Package importrules holds no code: its tests check rules of ARCHITECTURE.md about what imports
// what, on the tree as it is, so that breaking one fails `go test ./...` rather than waiting for a
// review to notice:
//
//   - no test package (a dependency's test tree, such as grpc's test/bufconn, or one of our fakes:
//     pkg/awstest, pkg/dynamotest, internal/stacktest, ...) is linked into the gantry binary, but for
//     those listed with the reason they are;
//   - domain code imports neither grpc nor bbolt: in the service packages, where transport and
//     domain share a package, only the transport files (server*.go, adminserver*.go) and a short
//     list of known exceptions import them; the storage contract packages import neither;
//   - the floors of the tree (proto, pkg, services, gateway, internal, cmd and scripts) are imported
//     downwards only, and the cluster manager (gateway/upstream) imports no service.
package importrules
