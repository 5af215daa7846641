package secrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/gantry-dev/gantry/pkg/rpcerr"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

var (
	// errUnavailable marks a dependency (KMS, storage) that cannot serve right now.
	errUnavailable = errors.New("secrets: dependency unavailable")
	// errMaintenance: writes are disabled.
	errMaintenance = errors.New("secrets: maintenance mode")
	// errAccountMismatch: a kmsauth caller whose key is scoped to another account than the service's.
	errAccountMismatch = errors.New("secrets: service scoped to another account")
	// errBusy: a write kept losing the compare-and-set race to writers on other replicas until its
	// retry window (see writeRecord) ran out.
	errBusy = errors.New("secrets: too many concurrent updates of this record")
)

// invalidError is bad input: 400 with the message as the client's error.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// notFoundError is a missing resource: 404 with the message.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// deniedError is an access-control refusal: 403, with the resource id as Confidant's "reference".
type deniedError struct {
	msg       string
	reference string
}

func (e *deniedError) Error() string { return e.msg }

// conflictError is a credential-key conflict: 400 with Confidant's "conflicts" map.
type conflictError struct {
	conflicts map[string]map[string][]string
}

func (e *conflictError) Error() string { return "Conflicting key pairs in mapped service." }

// toStatus is the one place where domain errors become gRPC status codes. Unknown errors become
// Internal with a generic message; their detail goes to the log only.
func toStatus(logger *zap.Logger, err error) error {
	var (
		authErr  *authError
		inv      *invalidError
		nf       *notFoundError
		denied   *deniedError
		conflict *conflictError
		taken    *store.NameTakenError
		unknown  *store.UnknownCredentialsError
		limit    *LimitError
		limited  *RateLimitedError
		stale    *StaleRevisionError
		stalled  *store.WriteStalledError

		changeState *changeStateError

		readStalled *store.ReadStalledError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &authErr):
		return status.Error(authErr.code, authErr.msg)
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, inv.msg)
	case errors.As(err, &nf):
		return status.Error(codes.NotFound, nf.msg)
	case errors.As(err, &denied):
		return withFields(codes.PermissionDenied, denied.msg, referenceField(denied.reference))
	case errors.As(err, &conflict):
		conflicts := map[string]any{}
		for key, byKind := range conflict.conflicts {
			kinds := map[string]any{}
			for kind, ids := range byKind {
				list := make([]any, len(ids))
				for i, id := range ids {
					list[i] = id
				}
				kinds[kind] = list
			}
			conflicts[key] = kinds
		}
		return withFields(codes.InvalidArgument, conflict.Error(), map[string]any{"conflicts": conflicts})
	case errors.As(err, &taken):
		return withFields(codes.AlreadyExists, "Name already exists. See id: "+taken.ID, referenceField(taken.ID))
	case errors.As(err, &unknown):
		return status.Error(codes.InvalidArgument, unknown.Message())
	case errors.As(err, &changeState):
		return status.Error(codes.FailedPrecondition, changeState.Error())
	case errors.As(err, &stale):
		// The gateway answers FailedPrecondition with 412 Precondition Failed (If-Match).
		return status.Error(codes.FailedPrecondition, stale.Error())
	case errors.As(err, &limit):
		return status.Error(codes.InvalidArgument, limit.Error())
	case errors.As(err, &limited):
		// RetryInfo tells gRPC callers when to come back; REST callers get Retry-After (see
		// retryAfterHeader).
		st := status.New(codes.ResourceExhausted, limited.Error())
		if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(limited.RetryAfterSeconds()) * time.Second)}); err == nil {
			return withRetry.Err()
		}
		return st.Err()
	case errors.Is(err, store.ErrTooLarge):
		return status.Error(codes.InvalidArgument, "The credential or service is too large to store: reduce the size of its values or the number of mapped credentials.")
	case errors.Is(err, store.ErrBadPageToken):
		return status.Error(codes.InvalidArgument, "Failed to parse page")
	case errors.Is(err, errMaintenance):
		return status.Error(codes.PermissionDenied, "Server in maintenance mode.")
	case errors.Is(err, errAccountMismatch):
		return status.Error(codes.Unauthenticated, "Authenticated user is not authorized.")
	case errors.Is(err, errVersionsNotVisible):
		return status.Error(codes.FailedPrecondition, errVersionsNotVisible.Error())
	case errors.Is(err, errBusy):
		return status.Error(codes.Aborted, "the record is being updated concurrently; retry")
	case errors.Is(err, errUndecryptable):
		logger.Error("credential cannot be decrypted", zap.Error(err))
		return rpcerr.DependencyUnavailable("credential cannot be decrypted with the configured keys (was the keyring or KMS_MASTER_KEY replaced, or the record damaged?)", "kms")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request timed out")
	case errors.As(err, &stalled):
		// Logged by the store; RetryInfo becomes the REST answer's Retry-After (RetryAfterHeaders).
		return stalledStatus("storage unavailable: writes are stalled; retry later", stalled.RetryAfterSeconds())
	case errors.As(err, &readStalled):
		return stalledStatus("storage unavailable: reads are stalled; retry later", readStalled.RetryAfterSeconds())
	case errors.Is(err, errAuditDisclosure):
		return rpcerr.DependencyUnavailable(errAuditDisclosure.Error(), "audit")
	case errors.Is(err, store.ErrStorage):
		// Logged where it happened (the store), with the operation.
		return rpcerr.DependencyUnavailable("storage unavailable", "storage")
	case errors.Is(err, errUnavailable):
		logger.Warn("dependency unavailable", zap.Error(err))
		return rpcerr.DependencyUnavailable("a dependency of the secrets service is unavailable", "kms")
	default:
		logger.Error("unexpected error", zap.Error(err))
		return status.Error(codes.Internal, "internal error")
	}
}

// stalledStatus is the Unavailable answer to a call refused by a stalled store: the storage
// dependency, and RetryInfo, which becomes the REST answer's Retry-After (RetryAfterHeaders).
func stalledStatus(msg string, retryAfterSeconds int) error {
	st := status.New(codes.Unavailable, msg)
	if withRetry, err := st.WithDetails(
		&errdetails.ErrorInfo{Domain: rpcerr.Domain, Reason: rpcerr.ReasonDependency, Metadata: map[string]string{"dependency": "storage"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retryAfterSeconds) * time.Second)},
	); err == nil {
		return withRetry.Err()
	}
	return st.Err()
}

// statusMessage is what a client is told of err (for a change request that failed to apply).
func statusMessage(err error) string { return status.Convert(toStatus(zap.NewNop(), err)).Message() }

// statusCodeName is the name of the gRPC code err is answered with (for the audit trail).
func statusCodeName(err error) string { return status.Code(toStatus(zap.NewNop(), err)).String() }

func referenceField(id string) map[string]any {
	if id == "" {
		return nil
	}
	return map[string]any{"reference": id}
}

// withFields attaches extra JSON body fields as a Struct detail, which the gateway merges into
// {"error": ...}.
func withFields(code codes.Code, msg string, fields map[string]any) error {
	st := status.New(code, msg)
	if len(fields) == 0 {
		return st.Err()
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		return st.Err()
	}
	if withDetails, err := st.WithDetails(s); err == nil {
		return withDetails.Err()
	}
	return st.Err()
}
