package etcdstore

import (
	"context"
	"errors"

	"github.com/gantry-dev/gantry/services/secrets/store"
)

// Placeholders until the change request records land.

func (s *Store) GetChangeRequest(context.Context, string) (*store.ChangeRequestRecord, error) {
	return nil, store.ErrNotFound
}
func (s *Store) PutChangeRequest(context.Context, *store.ChangeRequestRecord, int32) error {
	return errors.New("not yet")
}
func (s *Store) ListChangeRequests(context.Context, store.Page) ([]*store.ChangeRequestRecord, string, error) {
	return nil, "", nil
}
