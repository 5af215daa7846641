package secrets

import (
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gantry-dev/gantry/pkg/rpcerr"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// TestStoreErrorStatus: the store errors an adapter returns for a write too large for it, and for
// storage that is unavailable, answer InvalidArgument and Unavailable (a dependency failure).
func TestStoreErrorStatus(t *testing.T) {
	if st := toStatus(zap.NewNop(), fmt.Errorf("wrapped: %w", store.ErrTooLarge)); !strings.Contains(st.Error(), "InvalidArgument") {
		t.Errorf("toStatus(ErrTooLarge) = %v, want InvalidArgument", st)
	}
	st := toStatus(zap.NewNop(), fmt.Errorf("wrapped: %w", store.ErrStorage))
	if status.Code(st) != codes.Unavailable || status.Convert(st).Message() != "storage unavailable" || !rpcerr.IsDependencyFailure(st) {
		t.Errorf("toStatus(ErrStorage) = %v, want Unavailable \"storage unavailable\" marked as a dependency failure", st)
	}
}
