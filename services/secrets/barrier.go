package secrets

import (
	"container/list"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/gantry-dev/gantry/pkg/kms"
)

// sealedFormatV1 prefixes every sealed pairs blob, so the format can change without guessing.
const sealedFormatV1 = 0x01

// errUndecryptable: a stored credential cannot be opened with the keys this server has.
var errUndecryptable = errors.New("secrets: credential cannot be decrypted with the configured keys")

// barrier is the envelope encryption of credential pairs: a fresh data key per revision seals the
// pairs with AES-256-GCM; the KMS wraps the data key with the credential id as encryption context.
// Only ciphertext ever reaches the store.
type barrier struct {
	kms       kms.Provider
	masterKey string
	keys      *keyCache
}

func newBarrier(provider kms.Provider, masterKey string, cacheSize int) *barrier {
	return &barrier{kms: provider, masterKey: masterKey, keys: newKeyCache(cacheSize)}
}

func encryptionContext(credentialID string) map[string]string {
	return map[string]string{"id": credentialID}
}

// pairsAAD binds sealed pairs to their credential, so a blob copied onto another record won't open.
func pairsAAD(credentialID string) []byte {
	return []byte("gantry/credential_pairs/v1/" + credentialID)
}

// seal encrypts pairs for credentialID under a brand-new data key.
func (b *barrier) seal(ctx context.Context, credentialID string, pairs map[string]string) (sealed, wrappedKey []byte, err error) {
	dataKey, wrapped, err := b.kms.GenerateDataKey(ctx, b.masterKey, encryptionContext(credentialID))
	if err != nil {
		return nil, nil, kmsError(ctx, "generate data key", err)
	}
	plain, err := json.Marshal(pairs)
	if err != nil {
		return nil, nil, err
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, nil, err
	}
	out := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(plain)+aead.Overhead())
	out[0] = sealedFormatV1
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, nil, err
	}
	out = aead.Seal(out, out[1:], plain, pairsAAD(credentialID))
	b.keys.put(wrapped, dataKey)
	return out, wrapped, nil
}

// open decrypts the pairs of a credential record.
func (b *barrier) open(ctx context.Context, credentialID string, sealed, wrappedKey []byte) (map[string]string, error) {
	dataKey, ok := b.keys.get(wrappedKey)
	if !ok {
		var err error
		dataKey, _, err = b.kms.Decrypt(ctx, wrappedKey, encryptionContext(credentialID))
		if err != nil {
			return nil, kmsError(ctx, "decrypt data key of credential "+credentialID, err)
		}
		b.keys.put(wrappedKey, dataKey)
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUndecryptable, err)
	}
	if len(sealed) < 1+aead.NonceSize() || sealed[0] != sealedFormatV1 {
		return nil, fmt.Errorf("%w: credential %s: unknown sealed format", errUndecryptable, credentialID)
	}
	plain, err := aead.Open(nil, sealed[1:1+aead.NonceSize()], sealed[1+aead.NonceSize():], pairsAAD(credentialID))
	if err != nil {
		return nil, fmt.Errorf("%w: credential %s: pairs do not authenticate", errUndecryptable, credentialID)
	}
	pairs := map[string]string{}
	if err := json.Unmarshal(plain, &pairs); err != nil {
		return nil, fmt.Errorf("%w: credential %s: %v", errUndecryptable, credentialID, err)
	}
	return pairs, nil
}

// kmsError classifies a KMS failure: a key the server does not hold (or a ciphertext that does not
// verify) means the data cannot be decrypted here; the caller's own cancellation or deadline stays
// what it is; anything else, including the KMS client's own timeouts on a hanging KMS, is the KMS
// being unavailable (503), not the caller's request timing out (504).
func kmsError(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, kms.ErrKeyNotFound), errors.Is(err, kms.ErrInvalidCiphertext):
		return fmt.Errorf("%w: %s: %v", errUndecryptable, op, err)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return err
	default:
		return fmt.Errorf("%w: %s: %v", errUnavailable, op, err)
	}
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != kms.DataKeySize {
		return nil, fmt.Errorf("data key has %d bytes, want %d", len(key), kms.DataKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// keyCache is a bounded LRU of decrypted data keys, keyed by a hash of the wrapped key so the cache
// never holds ciphertext it would have to compare in full.
type keyCache struct {
	mu    sync.Mutex
	size  int
	order *list.List
	items map[[32]byte]*list.Element
}

type keyCacheEntry struct {
	id  [32]byte
	key []byte
}

func newKeyCache(size int) *keyCache {
	return &keyCache{size: size, order: list.New(), items: map[[32]byte]*list.Element{}}
}

func (c *keyCache) get(wrapped []byte) ([]byte, bool) {
	id := sha256.Sum256(wrapped)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[id]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*keyCacheEntry).key, true
	}
	return nil, false
}

func (c *keyCache) put(wrapped, key []byte) {
	id := sha256.Sum256(wrapped)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[id]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.items[id] = c.order.PushFront(&keyCacheEntry{id: id, key: key})
	for c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*keyCacheEntry).id)
	}
}
