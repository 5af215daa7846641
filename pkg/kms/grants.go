package kms

// Grants let a service authenticate to the secrets service with a KMS auth token, the scheme Confidant
// uses: the service encrypts a token under the auth key with the context {"from": S}, and only a
// principal holding the matching grant can do that, so a token that decrypts proves who made it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskms "github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"
	"go.uber.org/zap"
)

// ErrRoleNotFound is returned by EnsureGrants when the service has no IAM role to grant to.
var ErrRoleNotFound = errors.New("kms: IAM role for service not found")

// GrantState says which of a service's two grants on the auth key exist.
type GrantState struct {
	// Encrypt: the service may make auth tokens (Encrypt and Decrypt with {"from": S}).
	Encrypt bool
	// Decrypt: the service may read tokens addressed to it (Decrypt with {"to": S}).
	Decrypt bool
}

// GrantManager creates and reports the grants that let a service use the auth key.
// Implementations are safe for concurrent use.
type GrantManager interface {
	// EnsureGrants creates whichever of the service's two grants are missing; repeating it is harmless.
	EnsureGrants(ctx context.Context, authKey, serviceID string) (GrantState, error)
	// Grants reports which of the service's grants exist.
	Grants(ctx context.Context, authKey, serviceID string) (GrantState, error)
}

// EncryptGrantName and DecryptGrantName are the grant names Confidant uses, so grants made by either
// product are recognised by the other during a migration.
func EncryptGrantName(serviceID string) string { return serviceID + "-encrypt" }

// DecryptGrantName: see EncryptGrantName.
func DecryptGrantName(serviceID string) string { return serviceID + "-decrypt" }

// Only the keys KMS auth tokens carry; any more would make a grant that no valid token can use.
const (
	contextFrom     = "from"
	contextTo       = "to"
	contextUserType = "user_type"
	userTypeService = "service"
)

// grantSpec is one grant as gantry wants it to be.
type grantSpec struct {
	name        string
	operations  []types.GrantOperation
	constraints map[string]string
}

// wantedGrants returns the encrypt and decrypt grants for serviceID. Version 2 tokens also carry
// user_type, so from then on the encrypt grant requires it: a service must not be able to mint a
// token that claims to come from a user.
func wantedGrants(serviceID string, minTokenVersion int) (encrypt, decrypt grantSpec) {
	encCtx := map[string]string{contextFrom: serviceID}
	if minTokenVersion > 1 {
		encCtx[contextUserType] = userTypeService
	}
	encrypt = grantSpec{
		name:        EncryptGrantName(serviceID),
		operations:  []types.GrantOperation{types.GrantOperationEncrypt, types.GrantOperationDecrypt},
		constraints: encCtx,
	}
	decrypt = grantSpec{
		name:        DecryptGrantName(serviceID),
		operations:  []types.GrantOperation{types.GrantOperationDecrypt},
		constraints: map[string]string{contextTo: serviceID},
	}
	return encrypt, decrypt
}

// IAM role names: the service id becomes part of an ARN, so anything else could name a different
// principal than the caller meant (a path, another account).
var roleNameRE = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)

// listGrantsLimit is KMS's largest ListGrants page.
const listGrantsLimit = 100

// maxGrantPages bounds the ListGrants loop so a misbehaving endpoint that always says "truncated"
// cannot keep a request running forever; 1000 pages is 100,000 grants, far past KMS's per-key limit.
const maxGrantPages = 1000

// AWSGrants manages grants on an AWS KMS auth key for IAM roles named after services.
type AWSGrants struct {
	provider        *AWS
	roleARNPrefix   string
	minTokenVersion int
	logger          *zap.Logger
}

var _ GrantManager = (*AWSGrants)(nil)

// NewAWSGrants returns a GrantManager for provider's account. The grantee for service S is the IAM
// role roleARNPrefix+S (e.g. "arn:aws:iam::111122223333:role/"); minTokenVersion is the lowest auth
// token version the secrets service accepts.
func NewAWSGrants(provider *AWS, roleARNPrefix string, minTokenVersion int, logger *zap.Logger) *AWSGrants {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &AWSGrants{provider: provider, roleARNPrefix: roleARNPrefix, minTokenVersion: minTokenVersion, logger: logger}
}

// EnsureGrants creates the service's missing grants. KMS makes a named CreateGrant with identical
// parameters idempotent, so two callers racing here end up with one grant each, not two.
func (g *AWSGrants) EnsureGrants(ctx context.Context, authKey, serviceID string) (GrantState, error) {
	if !roleNameRE.MatchString(serviceID) {
		return GrantState{}, fmt.Errorf("%w: %q is not a valid IAM role name", ErrRoleNotFound, serviceID)
	}
	keyARN, err := g.provider.ResolveKeyID(ctx, authKey)
	if err != nil {
		return GrantState{}, err
	}
	grantee := g.roleARNPrefix + serviceID
	existing, err := g.listGrants(ctx, keyARN, grantee)
	if err != nil {
		return GrantState{}, g.roleError("ListGrants", serviceID, err)
	}
	enc, dec := wantedGrants(serviceID, g.minTokenVersion)
	for _, spec := range []grantSpec{enc, dec} {
		if hasGrant(existing, spec, grantee) {
			continue
		}
		_, err := g.provider.client.CreateGrant(ctx, &awskms.CreateGrantInput{
			KeyId:            aws.String(keyARN),
			GranteePrincipal: aws.String(grantee),
			Name:             aws.String(spec.name),
			Operations:       spec.operations,
			Constraints:      &types.GrantConstraints{EncryptionContextSubset: spec.constraints},
		})
		if err != nil {
			return GrantState{}, g.roleError("CreateGrant", serviceID, err)
		}
		g.logger.Info("created KMS grant", zap.String("service", serviceID), zap.String("grant", spec.name),
			zap.String("key", keyARN), zap.String("grantee", grantee))
	}
	return GrantState{Encrypt: true, Decrypt: true}, nil
}

// Grants reports which of the service's grants exist. A service without an IAM role has no grants,
// which is an answer, not a failure.
func (g *AWSGrants) Grants(ctx context.Context, authKey, serviceID string) (GrantState, error) {
	if !roleNameRE.MatchString(serviceID) {
		return GrantState{}, nil
	}
	keyARN, err := g.provider.ResolveKeyID(ctx, authKey)
	if err != nil {
		return GrantState{}, err
	}
	grantee := g.roleARNPrefix + serviceID
	existing, err := g.listGrants(ctx, keyARN, grantee)
	if err != nil {
		if isRoleError(err) {
			g.logger.Debug("no IAM role for service; reporting no grants",
				zap.String("service", serviceID), zap.Error(err))
			return GrantState{}, nil
		}
		return GrantState{}, mapAWSError("ListGrants", err)
	}
	enc, dec := wantedGrants(serviceID, g.minTokenVersion)
	return GrantState{Encrypt: hasGrant(existing, enc, grantee), Decrypt: hasGrant(existing, dec, grantee)}, nil
}

// listGrants returns every grant on keyARN for grantee. The filter is applied by KMS, which keeps the
// listing short on keys shared by many services, and again by hasGrant, which does not rely on it.
func (g *AWSGrants) listGrants(ctx context.Context, keyARN, grantee string) ([]types.GrantListEntry, error) {
	var all []types.GrantListEntry
	in := &awskms.ListGrantsInput{
		KeyId:            aws.String(keyARN),
		GranteePrincipal: aws.String(grantee),
		Limit:            aws.Int32(listGrantsLimit),
	}
	for range maxGrantPages {
		out, err := g.provider.client.ListGrants(ctx, in)
		if err != nil {
			return nil, err
		}
		all = append(all, out.Grants...)
		if !out.Truncated {
			return all, nil
		}
		next := aws.ToString(out.NextMarker)
		if next == "" || next == aws.ToString(in.Marker) {
			// Following it would refetch the same page forever.
			return nil, fmt.Errorf("ListGrants said the list is truncated but gave marker %q", next)
		}
		in.Marker = aws.String(next)
	}
	return nil, fmt.Errorf("ListGrants returned more than %d pages", maxGrantPages)
}

// hasGrant reports whether one of grants is spec for grantee. Name alone is not enough: a grant of
// the same name with other operations or constraints (e.g. made before the minimum token version was
// raised) does not give the access spec describes, so it does not count.
func hasGrant(grants []types.GrantListEntry, spec grantSpec, grantee string) bool {
	for _, gr := range grants {
		if aws.ToString(gr.Name) != spec.name || aws.ToString(gr.GranteePrincipal) != grantee {
			continue
		}
		if !sameOperations(gr.Operations, spec.operations) {
			continue
		}
		var subset, equals map[string]string
		if gr.Constraints != nil {
			subset, equals = gr.Constraints.EncryptionContextSubset, gr.Constraints.EncryptionContextEquals
		}
		if len(equals) == 0 && maps.Equal(subset, spec.constraints) {
			return true
		}
	}
	return false
}

func sameOperations(a, b []types.GrantOperation) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// isRoleError reports whether KMS refused the grantee principal. KMS checks the principal exists
// when a grant names it and answers with one of these codes when it does not; the key itself has
// already been resolved by then, so they are not about the key.
func isRoleError(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "ValidationException", "InvalidArnException":
		return true
	}
	return false
}

// roleError maps an error from a grant operation, telling a missing role apart from an outage.
func (g *AWSGrants) roleError(op, serviceID string, err error) error {
	if isRoleError(err) {
		return fmt.Errorf("%w: service %q: kms %s: %v", ErrRoleNotFound, serviceID, op, err)
	}
	return mapAWSError(op, err)
}
