// Package rpcerr marks the gRPC errors a service returns because a dependency failed (its store, its
// KMS) rather than the service itself. The gateway's outlier detection counts an Unavailable answer
// against the host that sent it; a dependency failure is not that host's fault (every replica shares
// the dependency, or the replica's health check already takes it out of rotation), so ejecting the
// host would only turn a partial outage (reads still work, writes do not) into a total one.
//
// The mark is a google.rpc.ErrorInfo detail, the standard way to say why a call failed; clients that
// do not know it see an ordinary Unavailable status.
package rpcerr

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of gantry's reasons.
const Domain = "gantry.dev"

// ReasonDependency is the ErrorInfo reason of a dependency failure.
const ReasonDependency = "DEPENDENCY_UNAVAILABLE"

// DependencyUnavailable returns an Unavailable status with msg, marked as the failure of dependency
// (e.g. "storage", "kms").
func DependencyUnavailable(msg, dependency string) error {
	st := status.New(codes.Unavailable, msg)
	if marked, err := st.WithDetails(&errdetails.ErrorInfo{
		Domain: Domain, Reason: ReasonDependency, Metadata: map[string]string{"dependency": dependency},
	}); err == nil {
		return marked.Err()
	}
	return st.Err()
}

// IsDependencyFailure reports whether err is a status made by DependencyUnavailable.
func IsDependencyFailure(err error) bool {
	var withStatus interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &withStatus) {
		return false
	}
	for _, d := range withStatus.GRPCStatus().Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain && info.GetReason() == ReasonDependency {
			return true
		}
	}
	return false
}
