// Package iamroles lists the IAM role names of the account, which the secrets service offers as the
// services a credential can be mapped to (Confidant's GET /v1/roles). Roles come from configuration
// (Static), from IAM (AWS), or from either behind a background-refreshed cache (Cached), because
// ListRoles is slow for large accounts and tightly rate-limited.
package iamroles

import (
	"context"
	"slices"
)

// Lister returns role names, sorted. Implementations are safe for concurrent use.
type Lister interface {
	Roles(ctx context.Context) ([]string, error)
}

// Static is a fixed list of roles from configuration, for installations without IAM.
type Static []string

var _ Lister = Static(nil)

// Roles returns the roles sorted and without duplicates (role names are unique in IAM, so a repeat
// is a configuration slip, not a second role). The result is a copy the caller may change.
func (s Static) Roles(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := append([]string{}, s...) // never nil, so an empty list encodes as []
	slices.Sort(out)
	return slices.Compact(out), nil
}
