// Package kms is gantry's key-management interface. Every random value, data key and auth token goes
// through a Provider, so the product runs the same with the local keyring (default, no cloud account)
// or with AWS KMS.
package kms

import (
	"context"
	"errors"
)

// MaxRandomBytes bounds one GenerateRandom call, as AWS KMS does.
const MaxRandomBytes = 1024

// DataKeySize is the length of a data key from GenerateDataKey: 256 bits.
const DataKeySize = 32

var (
	// ErrInvalidLength is returned for a GenerateRandom length outside 1..MaxRandomBytes.
	ErrInvalidLength = errors.New("kms: random length must be between 1 and 1024 bytes")
	// ErrKeyNotFound is returned when a key id, alias or ARN names no key the provider has — also
	// when a ciphertext was made by a key this provider does not hold (e.g. the keyring was replaced).
	ErrKeyNotFound = errors.New("kms: key not found")
	// ErrInvalidCiphertext is returned when a ciphertext is malformed, was tampered with, or was made
	// with a different encryption context.
	ErrInvalidCiphertext = errors.New("kms: invalid ciphertext or encryption context")
	// ErrUnavailable wraps failures to reach the key service (network, timeouts, throttling).
	ErrUnavailable = errors.New("kms: key service unavailable")
	// ErrAccessDenied is AWS KMS refusing the caller (AccessDeniedException: the key policy or no
	// grant): the key service answered, and asking again will not help until someone grants access.
	// It also matches ErrUnavailable, which is what every caller saw before it existed.
	ErrAccessDenied error = accessDenied{}
)

type accessDenied struct{}

func (accessDenied) Error() string { return "kms: access denied" }

func (accessDenied) Is(target error) bool { return target == ErrUnavailable }

// Provider is a key-management service. Implementations are safe for concurrent use.
//
// Key ids may be given as an alias ("alias/gantry-master"), a key id, or (AWS) an ARN. Encryption
// contexts are bound to ciphertexts: Decrypt must be given the same map Encrypt was given.
type Provider interface {
	// GenerateRandom returns n cryptographically random bytes (1 <= n <= MaxRandomBytes).
	GenerateRandom(ctx context.Context, n int) ([]byte, error)
	// Encrypt encrypts plaintext under keyID, binding encryptionContext to the ciphertext.
	Encrypt(ctx context.Context, keyID string, plaintext []byte, encryptionContext map[string]string) ([]byte, error)
	// Decrypt decrypts a ciphertext from Encrypt or GenerateDataKey given the same encryption context.
	// It also returns the canonical id (ResolveKeyID form) of the key that decrypted it.
	Decrypt(ctx context.Context, ciphertext []byte, encryptionContext map[string]string) (plaintext []byte, keyID string, err error)
	// GenerateDataKey returns a fresh DataKeySize-byte data key and that key encrypted under keyID.
	GenerateDataKey(ctx context.Context, keyID string, encryptionContext map[string]string) (plaintext, ciphertext []byte, err error)
	// ResolveKeyID returns the canonical id of an alias, key id or ARN (AWS: the key ARN).
	ResolveKeyID(ctx context.Context, keyID string) (string, error)
}

// KeyVersioner is implemented by providers whose keys have versions the caller can see: the local
// keyring. It lets gantry tell, without decrypting, which version wrapped a data key, so a rewrap
// re-wraps only what is not under the active version yet. AWS KMS rotates its backing keys itself and
// tells nothing about them; there a rewrap moves data keys to another key, not another version.
type KeyVersioner interface {
	// ActiveKeyVersion returns the key version that encryptions under keyID use now.
	ActiveKeyVersion(ctx context.Context, keyID string) (KeyVersion, error)
	// CiphertextKeyVersion reads which key version made a ciphertext, without decrypting it.
	CiphertextKeyVersion(ciphertext []byte) (KeyVersion, error)
}
