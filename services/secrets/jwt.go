package secrets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/jwtkeys"
)

// JWKSet is the public keys of an environment: the active one, and every loaded one.
type JWKSet struct {
	Active jwtkeys.JWK
	All    []jwtkeys.JWK
}

// GetJwks returns the public keys of an environment.
func (s *Service) GetJwks(_ context.Context, environment string) (*JWKSet, error) {
	if s.jwt == nil {
		return nil, &notFoundError{msg: "Public key not found for this environment"}
	}
	active, all, err := s.jwt.PublicKeys(environment)
	if errors.Is(err, jwtkeys.ErrUnknownEnvironment) {
		return nil, &notFoundError{msg: "Public key not found for this environment"}
	} else if err != nil {
		return nil, err
	}
	return &JWKSet{Active: active, All: all}, nil
}

// GetJwt signs a token about id (the caller when empty) for the caller. is_service tells relying
// parties the caller authenticated with kmsauth rather than a browser session.
func (s *Service) GetJwt(ctx context.Context, id, environment string, expiry time.Duration) (string, error) {
	p := PrincipalFrom(ctx)
	if environment == "" {
		return "", invalid("Please specify an environment")
	}
	if id == "" {
		id = p.Name
	}
	if !s.allowed(ctx, ResourceJWT, ActionGet, p.Name, map[string]any{"id": id, "environment": environment}) {
		return "", s.deny(ctx, ResourceJWT, ActionGet, id, &deniedError{msg: fmt.Sprintf("%s does not have access to get JWT %s", p.Name, id)})
	}
	if s.jwt == nil {
		return "", invalid("Key not available for this environment")
	}
	if expiry <= 0 {
		expiry = s.cfg.JWTDefaultExpiration
	}
	if expiry > jwtkeys.MaxLifetime {
		return "", invalid("expiry must be at most %d seconds", int(jwtkeys.MaxLifetime/time.Second))
	}
	claims := jwtkeys.Claims{IsService: p.AuthType == "kms" || p.AuthType == "none", Requester: p.Name, User: id}
	token, err := s.jwt.Sign(environment, claims, s.now(), expiry)
	if errors.Is(err, jwtkeys.ErrUnknownEnvironment) || errors.Is(err, jwtkeys.ErrNoActiveKey) {
		return "", invalid("Key not available for this environment")
	}
	if err != nil {
		return "", err
	}
	if err := s.auditDisclosure(ctx, "get-jwt", ResourceJWT, id, 0); err != nil {
		return "", err
	}
	return token, nil
}
