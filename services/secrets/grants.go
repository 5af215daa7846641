package secrets

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// serviceMustExist loads a service for the grant routes, which Confidant answers with 400 (not 404)
// when the service is unknown.
func (s *Service) serviceMustExist(ctx context.Context, id string) error {
	if err := checkID("service", id); err != nil {
		return err
	}
	if _, err := s.store.GetService(ctx, id); errors.Is(err, store.ErrNotFound) {
		return invalid("id provided does not exist.")
	} else if err != nil {
		return err
	}
	return nil
}

func grantError(err error) error {
	if errors.Is(err, kms.ErrUnavailable) {
		return fmt.Errorf("%w: %v", errUnavailable, err)
	}
	// The local keyring's grants live in the store: its outage is 503, a cancelled call stays one.
	if errors.Is(err, errUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return invalid("Failed to add grants for service.")
}

// PutGrants ensures the encrypt and decrypt grants of a service on the auth key exist.
func (s *Service) PutGrants(ctx context.Context, id string) (kms.GrantState, error) {
	p := PrincipalFrom(ctx)
	if err := s.checkWritable(); err != nil {
		return kms.GrantState{}, err
	}
	if !s.allowed(ctx, ResourceService, ActionUpdate, id, map[string]any{"credential_ids": []string{}}) {
		return kms.GrantState{}, s.deny(ctx, ResourceService, ActionUpdate, id, &deniedError{msg: fmt.Sprintf("%s does not have access to ensure grants for service %s", p.Name, id), reference: id})
	}
	if err := s.serviceMustExist(ctx, id); err != nil {
		return kms.GrantState{}, err
	}
	if s.grants == nil {
		return kms.GrantState{}, invalid("grants are not managed by this server (KMS_AUTH_MANAGE_GRANTS is off)")
	}
	st, err := s.grants.EnsureGrants(ctx, s.cfg.Auth.AuthKey, id)
	if err != nil {
		return kms.GrantState{}, grantError(err)
	}
	s.auditLog(ctx, "ensure-grants", ResourceService, id, 0)
	return st, nil
}

// GetGrants reports the grants of a service.
func (s *Service) GetGrants(ctx context.Context, id string) (kms.GrantState, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionMetadata, id, nil) {
		return kms.GrantState{}, s.deny(ctx, ResourceService, ActionMetadata, id, &deniedError{msg: fmt.Sprintf("%s does not have access to get grants for service %s", p.Name, id), reference: id})
	}
	if err := s.serviceMustExist(ctx, id); err != nil {
		return kms.GrantState{}, err
	}
	if s.grants == nil {
		return kms.GrantState{}, nil
	}
	st, err := s.grants.Grants(ctx, s.cfg.Auth.AuthKey, id)
	if err != nil {
		return kms.GrantState{}, grantError(err)
	}
	return st, nil
}

// grantNewService gives a newly created service its grants, as Confidant does with
// KMS_AUTH_MANAGE_GRANTS; a failure is logged, not fatal (PUT /v1/grants/{id} can retry it).
func (s *Service) grantNewService(ctx context.Context, id string) {
	if s.grants == nil || !s.cfg.KMSAuthManageGrants {
		return
	}
	if _, err := s.grants.EnsureGrants(ctx, s.cfg.Auth.AuthKey, id); err != nil {
		s.logger.Warn("could not create the grants of a new service", zap.String("service", id), zap.Error(err))
	}
}

// ListRoles lists the identity roles of the configured cloud account.
func (s *Service) ListRoles(ctx context.Context) ([]string, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceService, ActionList, "", nil) {
		return nil, s.deny(ctx, ResourceService, ActionList, "", &deniedError{msg: p.Name + " does not have access to list roles"})
	}
	if s.roles == nil {
		return []string{}, nil
	}
	roles, err := s.roles.Roles(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: list roles: %v", errUnavailable, err)
	}
	return roles, nil
}
