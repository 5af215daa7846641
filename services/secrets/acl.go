package secrets

import "context"

// Principal is the authenticated caller of a request.
type Principal struct {
	// Name is the user's email or the service's kmsauth "from" name.
	Name string
	// Type is "user" or "service".
	Type string
	// AuthType is how the caller authenticated: "none" (authentication off), "kms", "session" or
	// "header".
	AuthType string
	// Account is the cloud account of a scoped kmsauth key, or "".
	Account string
}

// AnonymousPrincipal is the caller when authentication is off (Confidant's USE_AUTH=false).
var AnonymousPrincipal = Principal{Name: "unauthenticated user", Type: "user", AuthType: "none"}

type principalKey struct{}

// WithPrincipal returns a context carrying the authenticated caller.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller of ctx, or AnonymousPrincipal.
func PrincipalFrom(ctx context.Context) Principal {
	if p, ok := ctx.Value(principalKey{}).(Principal); ok {
		return p
	}
	return AnonymousPrincipal
}

// Resource types and actions of the access-control hook (Confidant's ACL_MODULE contract).
const (
	ResourceCredential  = "credential"
	ResourceService     = "service"
	ResourceCA          = "ca"
	ResourceCertificate = "certificate"
	ResourceJWT         = "jwt"

	ActionList     = "list"
	ActionMetadata = "metadata"
	ActionGet      = "get"
	ActionCreate   = "create"
	ActionUpdate   = "update"
	ActionRevert   = "revert"
	ActionArchive  = "archive"
)

// ACL decides whether a principal may perform an action on a resource. extra carries the action's
// details (credential_ids, new_credential_ids, ca, san, ...).
type ACL interface {
	Allowed(ctx context.Context, p Principal, resourceType, action, resourceID string, extra map[string]any) bool
}

// DefaultACL is Confidant's default role-based rules: users may do everything except certificate and
// CA operations; services may only read their own service, list and read CAs, and get certificates
// the CA's name pattern grants them (checked by the certificate code through CertificateAllowed).
type DefaultACL struct {
	// CertificateAllowed decides certificate requests of services; nil denies them.
	CertificateAllowed func(p Principal, ca, cn string, sans []string) bool
}

// Allowed implements ACL.
func (a DefaultACL) Allowed(_ context.Context, p Principal, resourceType, action, resourceID string, extra map[string]any) bool {
	if p.Type != "service" {
		return resourceType != ResourceCertificate && resourceType != ResourceCA
	}
	switch resourceType {
	case ResourceService:
		return (action == ActionMetadata || action == ActionGet) && resourceID == p.Name
	case ResourceCA:
		return action == ActionList || action == ActionGet
	case ResourceCertificate:
		ca, _ := extra["ca"].(string)
		sans, _ := extra["san"].([]string)
		return action == ActionGet && a.CertificateAllowed != nil && a.CertificateAllowed(p, ca, resourceID, sans)
	}
	return false
}
