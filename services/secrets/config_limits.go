package secrets

import (
	"strings"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Flag names of the store limits; error messages name them so an operator knows what to raise.
const (
	flagMaxCredentialPairs         = "max-credential-pairs"
	flagMaxCredentialKeyBytes      = "max-credential-key-bytes"
	flagMaxCredentialValueBytes    = "max-credential-value-bytes"
	flagMaxCredentialMetadataBytes = "max-credential-metadata-bytes"
	flagMaxServiceCredentials      = "max-service-credentials"
	flagWriteRate                  = "write-rate"
	flagWriteBurst                 = "write-burst"
	flagWritePrincipals            = "write-rate-principals"
)

// Limits bound what one logged-in caller can make the secrets service store, so no principal can fill
// the disk or starve the others (GANTRY_* variables or flags; see SECURITY.md, "Limits that protect
// the store"). The defaults are above anything a Confidant installation could hold: Confidant keeps a
// credential in one DynamoDB item of at most 400 KB, its pairs encrypted and base64-encoded twice, so
// no Confidant value exceeds about 225 KB.
type Limits struct {
	// MaxCredentialPairs is the most key/value pairs one credential may have.
	MaxCredentialPairs int
	// MaxCredentialKeyBytes is the longest credential-pair key, in bytes.
	MaxCredentialKeyBytes int
	// MaxCredentialValueBytes is the longest credential-pair value, in bytes.
	MaxCredentialValueBytes int
	// MaxCredentialMetadataBytes bounds a credential's metadata: the bytes of every key and value
	// together. Keys are distinct, so this also bounds the number of entries.
	MaxCredentialMetadataBytes int
	// MaxServiceCredentials is the most credentials a service may map, its credentials and blind
	// credentials together.
	MaxServiceCredentials int
	// WriteRate is the sustained rate of writes (calls that change state) one principal may make, per
	// second and per replica; 0 turns the write rate limit off. WriteBurst is how many writes a
	// principal that has been idle may make at once.
	WriteRate  float64
	WriteBurst int
	// WritePrincipals gives named principals their own write allowance instead of WriteRate and
	// WriteBurst, keyed "user:<name>" or "service:<name>" (the principal's type and name, as the audit
	// trail records them): automation that writes in bulk gets a larger allowance, or none at all
	// (Rate 0 exempts it), while every other caller keeps the default.
	WritePrincipals map[string]PrincipalWriteLimit
}

// PrincipalWriteLimit is one principal's write allowance (see Limits.WritePrincipals).
type PrincipalWriteLimit struct {
	// Rate is writes per second per replica; 0 exempts the principal from the limit.
	Rate float64 `json:"rate"`
	// Burst is how many writes it may make at once; 0 means the default WriteBurst.
	Burst int `json:"burst,omitempty"`
}

// DefaultLimits are limits a normal installation never reaches (see Limits).
func DefaultLimits() Limits {
	return Limits{
		MaxCredentialPairs:         1000,
		MaxCredentialKeyBytes:      1 << 10,
		MaxCredentialValueBytes:    256 << 10,
		MaxCredentialMetadataBytes: 64 << 10,
		MaxServiceCredentials:      1000,
		WriteRate:                  20,
		WriteBurst:                 200,
	}
}

// validate reports the first bad limit, by flag name.
func (l Limits) validate() error {
	for _, c := range []struct {
		flag  string
		value int
	}{
		{flagMaxCredentialPairs, l.MaxCredentialPairs},
		{flagMaxCredentialKeyBytes, l.MaxCredentialKeyBytes},
		{flagMaxCredentialValueBytes, l.MaxCredentialValueBytes},
		{flagMaxCredentialMetadataBytes, l.MaxCredentialMetadataBytes},
		{flagMaxServiceCredentials, l.MaxServiceCredentials},
	} {
		if c.value < 1 {
			return settings.Invalid(c.flag, "must be at least 1, got %d", c.value)
		}
	}
	// NaN fails every comparison: it must not slip through as "not negative".
	if !(l.WriteRate >= 0) || l.WriteRate > 1e6 {
		return settings.Invalid(flagWriteRate, "must be between 0 (off) and 1000000 writes per second, got %v", l.WriteRate)
	}
	if l.WriteRate > 0 && l.WriteBurst < 1 {
		return settings.Invalid(flagWriteBurst, "must be at least 1 while -%s is on, got %d", flagWriteRate, l.WriteBurst)
	}
	for key, p := range l.WritePrincipals {
		typ, name, ok := strings.Cut(key, ":")
		if !ok || (typ != "user" && typ != "service") || name == "" {
			return settings.Invalid(flagWritePrincipals, "%q is not user:<name> or service:<name>", key)
		}
		if !(p.Rate >= 0) || p.Rate > 1e6 {
			return settings.Invalid(flagWritePrincipals, "%s: rate must be between 0 (no limit) and 1000000 writes per second, got %v", key, p.Rate)
		}
		if p.Burst < 0 || (p.Rate > 0 && p.Burst == 0 && l.WriteBurst < 1) {
			return settings.Invalid(flagWritePrincipals, "%s: burst must be at least 1, got %d", key, p.Burst)
		}
	}
	return nil
}
