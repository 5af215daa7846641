// Package fernet implements Fernet tokens (https://github.com/fernet/spec, version 0x80): AES-128-CBC
// with PKCS#7 padding, authenticated by HMAC-SHA256, the whole token in URL-safe base64. Confidant
// encrypts every credential's pairs this way under a per-revision data key, so gantry's importer has
// to open them; the encryption side exists for the importer's tests, which write tables as Confidant
// does.
package fernet

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

const (
	version    = 0x80
	headerSize = 1 + 8 + aes.BlockSize // version, timestamp, IV
	macSize    = sha256.Size
	// maxClockSkew is how far in the future a token's timestamp may be when a TTL is checked (the
	// spec's reference implementations use 60 seconds).
	maxClockSkew = 60 * time.Second
)

// ErrInvalidToken is every reason a token does not open: malformed, wrong key, tampered, expired.
// The reasons are not told apart on purpose, as in the reference implementations.
var ErrInvalidToken = errors.New("fernet: invalid token")

// Key is a Fernet key: a 128-bit signing key and a 128-bit encryption key.
type Key struct {
	signing    [16]byte
	encryption [16]byte
}

// ParseKey decodes a key in its usual form, 32 bytes in URL-safe base64 with padding (44 characters).
func ParseKey(s string) (*Key, error) {
	raw, err := base64.URLEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 {
		// The key itself is never echoed: it is a secret.
		return nil, fmt.Errorf("fernet: a key is 32 bytes in URL-safe base64 (got %d characters)", len(s))
	}
	k := &Key{}
	copy(k.signing[:], raw[:16])
	copy(k.encryption[:], raw[16:])
	return k, nil
}

// Encrypt makes a token of msg stamped with now, with a random IV.
func (k *Key) Encrypt(msg []byte, now time.Time) (string, error) {
	var iv [aes.BlockSize]byte
	if _, err := rand.Read(iv[:]); err != nil {
		return "", err
	}
	return k.EncryptWithIV(msg, now, iv), nil
}

// EncryptWithIV makes a token with a given IV. Only the spec's test vectors need a fixed IV; every
// other caller wants Encrypt.
func (k *Key) EncryptWithIV(msg []byte, now time.Time, iv [aes.BlockSize]byte) string {
	pad := aes.BlockSize - len(msg)%aes.BlockSize
	plain := make([]byte, len(msg)+pad)
	copy(plain, msg)
	for i := len(msg); i < len(plain); i++ {
		plain[i] = byte(pad)
	}
	token := make([]byte, headerSize, headerSize+len(plain)+macSize)
	token[0] = version
	binary.BigEndian.PutUint64(token[1:9], uint64(now.Unix()))
	copy(token[9:headerSize], iv[:])
	block, _ := aes.NewCipher(k.encryption[:]) // 16 bytes: cannot fail
	ciphertext := make([]byte, len(plain))
	cipher.NewCBCEncrypter(block, iv[:]).CryptBlocks(ciphertext, plain)
	token = append(token, ciphertext...)
	mac := hmac.New(sha256.New, k.signing[:])
	mac.Write(token)
	token = mac.Sum(token)
	return base64.URLEncoding.EncodeToString(token)
}

// Decrypt opens a token without checking its age, as Confidant does (it decrypts with no TTL).
func (k *Key) Decrypt(token string) ([]byte, error) {
	return k.decrypt(token, 0, time.Time{})
}

// DecryptTTL opens a token that must be at most ttl old at now and not more than a minute in the
// future.
func (k *Key) DecryptTTL(token string, ttl time.Duration, now time.Time) ([]byte, error) {
	return k.decrypt(token, ttl, now)
}

func (k *Key) decrypt(token string, ttl time.Duration, now time.Time) ([]byte, error) {
	raw, err := base64.URLEncoding.DecodeString(token)
	if err != nil {
		return nil, ErrInvalidToken
	}
	if len(raw) < headerSize+aes.BlockSize+macSize || raw[0] != version {
		return nil, ErrInvalidToken
	}
	body, sum := raw[:len(raw)-macSize], raw[len(raw)-macSize:]
	mac := hmac.New(sha256.New, k.signing[:])
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, ErrInvalidToken
	}
	if ttl > 0 {
		stamp := time.Unix(int64(binary.BigEndian.Uint64(raw[1:9])), 0)
		if stamp.After(now.Add(maxClockSkew)) || now.After(stamp.Add(ttl)) {
			return nil, ErrInvalidToken
		}
	}
	ciphertext := body[headerSize:]
	if len(ciphertext)%aes.BlockSize != 0 {
		return nil, ErrInvalidToken
	}
	block, _ := aes.NewCipher(k.encryption[:])
	plain := make([]byte, len(ciphertext))
	cipher.NewCBCDecrypter(block, body[9:headerSize]).CryptBlocks(plain, ciphertext)
	pad := int(plain[len(plain)-1])
	if pad == 0 || pad > aes.BlockSize || !bytes.Equal(plain[len(plain)-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
		return nil, ErrInvalidToken
	}
	return plain[:len(plain)-pad], nil
}
