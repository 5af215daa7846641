package kms

import (
	"errors"
	"fmt"
)

// MaxPlaintextBytes bounds one Encrypt call. It is AWS KMS's limit, enforced by the keyring too (as is
// AWS's refusal of empty plaintexts), so code developed against the keyring does not start failing when
// it is pointed at AWS.
const MaxPlaintextBytes = 4096

func checkRandomLength(n int) error {
	if n < 1 || n > MaxRandomBytes {
		return fmt.Errorf("%w (got %d)", ErrInvalidLength, n)
	}
	return nil
}

// checkPlaintext applies AWS KMS's bounds (1..MaxPlaintextBytes) in every provider.
func checkPlaintext(plaintext []byte) error {
	if len(plaintext) == 0 {
		return errors.New("kms: plaintext is empty; Encrypt needs at least one byte")
	}
	if len(plaintext) > MaxPlaintextBytes {
		// Larger secrets belong under a data key (GenerateDataKey), not directly under a master key.
		return fmt.Errorf("kms: plaintext is %d bytes; Encrypt accepts at most %d (encrypt larger data with a data key)",
			len(plaintext), MaxPlaintextBytes)
	}
	return nil
}
