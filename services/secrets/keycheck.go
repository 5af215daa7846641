package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/kms"
	"github.com/gantry-dev/gantry/services/secrets/store"
)

// ErrKeysDoNotMatch: the configured keys (the local keyring, or KMS_MASTER_KEY on AWS) cannot
// decrypt what the store holds. Starting anyway would write new credentials under keys that do not
// belong to the store, and make restoring the right keyring later lose those; so gantry refuses.
var ErrKeysDoNotMatch = errors.New("the configured keys cannot decrypt this store's data")

// keyCheckContext is the encryption context of the key-check value, distinct from every
// credential's ({"id": ...}), so the value can never be passed off as a credential's data key.
var keyCheckContext = map[string]string{"purpose": "gantry key check"}

// VerifyKeys checks, before anything is served, that provider holds the keys of the store, and
// records the proof for next time. A store initialised by this version holds a key-check value: a
// data key wrapped under masterKey when the store was first used. It must decrypt. A store without
// one (new, or written by an older gantry) gets one, but only after the wrapped data key of one of
// its credentials, if it has any, decrypts. Failures to decrypt are ErrKeysDoNotMatch; any other
// failure (KMS or storage unreachable) is returned as it is: the caller must not start either way.
func VerifyKeys(ctx context.Context, st store.Store, provider kms.Provider, masterKey string) error {
	proof, err := CheckKeys(ctx, st, provider)
	if err != nil || proof == ProofKeyCheck {
		return err
	}
	// No key-check value yet, and the keys fit the data there is: record one.
	_, wrapped, err := provider.GenerateDataKey(ctx, masterKey, keyCheckContext)
	if err != nil {
		return fmt.Errorf("make the key-check value: %w", err)
	}
	held, err := st.InitKeyCheck(ctx, wrapped)
	if err != nil {
		return fmt.Errorf("record the key-check value: %w", err)
	}
	if !bytes.Equal(held, wrapped) {
		// Another replica recorded its value first: it must open here too.
		return decryptKeyCheck(ctx, provider, held)
	}
	return nil
}

// KeysProof says what CheckKeys decrypted to prove the keys.
type KeysProof string

// The proofs of CheckKeys.
const (
	// ProofKeyCheck: the store's key-check value decrypts.
	ProofKeyCheck KeysProof = "the store's key-check value decrypts"
	// ProofCredential: the store has no key-check value yet (an older gantry wrote it; the next start
	// records one), and the data key of one credential decrypts.
	ProofCredential KeysProof = "the data key of a credential decrypts (no key-check value yet; gantry records one at its next start)"
	// ProofNothing: the store holds neither a key-check value nor a credential; any keys fit it.
	ProofNothing KeysProof = "the store holds nothing encrypted yet"
)

// CheckKeys is the read-only half of VerifyKeys, for the offline gantry check: it checks that provider
// decrypts the store's key-check value or, in a store without one, the wrapped data key of one
// credential, and never writes. Failures to decrypt are ErrKeysDoNotMatch.
func CheckKeys(ctx context.Context, st store.Store, provider kms.Provider) (KeysProof, error) {
	held, err := st.KeyCheck(ctx)
	switch {
	case err == nil:
		return ProofKeyCheck, decryptKeyCheck(ctx, provider, held)
	case !errors.Is(err, store.ErrNotFound):
		return "", fmt.Errorf("read the key-check value: %w", err)
	}
	creds, _, err := st.ListCredentials(ctx, store.Page{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("read a credential to check the keys: %w", err)
	}
	if len(creds) == 0 {
		return ProofNothing, nil
	}
	c := creds[0]
	if _, _, err := provider.Decrypt(ctx, c.WrappedKey, encryptionContext(c.ID)); err != nil {
		return ProofCredential, keyError(fmt.Sprintf("the data key of credential %s", c.ID), err)
	}
	return ProofCredential, nil
}

func decryptKeyCheck(ctx context.Context, provider kms.Provider, wrapped []byte) error {
	if _, _, err := provider.Decrypt(ctx, wrapped, keyCheckContext); err != nil {
		return keyError("the key-check value", err)
	}
	return nil
}

// keyError tells a key that does not fit (ErrKeysDoNotMatch) from a KMS that cannot be asked.
func keyError(what string, err error) error {
	if errors.Is(err, kms.ErrKeyNotFound) || errors.Is(err, kms.ErrInvalidCiphertext) {
		return fmt.Errorf("%w: %s does not decrypt: %v", ErrKeysDoNotMatch, what, err)
	}
	return fmt.Errorf("decrypt %s: %w", what, err)
}
