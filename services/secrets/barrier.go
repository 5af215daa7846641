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
	"strconv"
	"sync"

	"github.com/gantry-dev/gantry/pkg/credpair"
	"github.com/gantry-dev/gantry/pkg/kms"
)

// The first byte of a sealed pairs blob names its format, so the format can change without guessing.
// Both formats are a GCM nonce followed by the AES-256-GCM ciphertext; they differ in the additional
// data (see pairsAAD). v1 blobs are only read: every write seals v2.
const (
	sealedFormatV1 = 0x01 // AAD binds the credential id
	sealedFormatV2 = 0x02 // AAD binds the credential id and the revision
)

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

// pairsAAD is the additional data that binds sealed pairs to their record. With v1, a blob copied onto
// another credential won't open, but an older revision's blob (and wrapped key) copied over the
// current record of the same credential would: a silent rollback by whoever can write the database.
// v2 also binds the revision, so a blob opens only as the revision it was sealed for. The revision
// is the last segment and has no "/", so the string splits unambiguously whatever the id holds.
func pairsAAD(format byte, credentialID string, revision int32) []byte {
	if format == sealedFormatV1 {
		return []byte("gantry/credential_pairs/v1/" + credentialID)
	}
	return []byte("gantry/credential_pairs/v2/" + credentialID + "/" + strconv.FormatInt(int64(revision), 10))
}

// seal encrypts pairs for revision of credentialID under a brand-new data key. The blob opens only as
// that revision: a revert re-seals the old pairs for its new revision.
func (b *barrier) seal(ctx context.Context, credentialID string, revision int32, pairs credpair.Map) (sealed, wrappedKey []byte, err error) {
	return b.sealAs(ctx, credentialID, sealedFormatV2, pairsAAD(sealedFormatV2, credentialID, revision), pairs)
}

// sealAs encrypts pairs under a brand-new data key of credentialID's, as a blob of format bound to
// aad.
func (b *barrier) sealAs(ctx context.Context, credentialID string, format byte, aad []byte, pairs credpair.Map) (sealed, wrappedKey []byte, err error) {
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
	out[0] = format
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, nil, err
	}
	out = aead.Seal(out, out[1:], plain, aad)
	b.keys.put(wrapped, dataKey)
	return out, wrapped, nil
}

// changePairsAAD binds the new pairs of a held change to its change request: they open only as that
// request's, never as a revision of the credential, nor as another request's.
func changePairsAAD(requestID string) []byte { return []byte("gantry/change_pairs/v1/" + requestID) }

// sealedFormatChange marks the new pairs of a change request (AAD: changePairsAAD).
const sealedFormatChange = 0x11

// sealChange encrypts the new pairs of change request requestID on credentialID under a fresh data
// key, wrapped like the credential's own (the credential id as encryption context).
func (b *barrier) sealChange(ctx context.Context, credentialID, requestID string, pairs credpair.Map) (sealed, wrappedKey []byte, err error) {
	return b.sealAs(ctx, credentialID, sealedFormatChange, changePairsAAD(requestID), pairs)
}

// openChange decrypts what sealChange sealed for the same request.
func (b *barrier) openChange(ctx context.Context, credentialID, requestID string, sealed, wrappedKey []byte) (credpair.Map, error) {
	dataKey, err := b.dataKey(ctx, credentialID, wrappedKey)
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUndecryptable, err)
	}
	if len(sealed) < 1+aead.NonceSize() || sealed[0] != sealedFormatChange {
		return nil, fmt.Errorf("%w: change request %s: unknown sealed format", errUndecryptable, requestID)
	}
	plain, err := aead.Open(nil, sealed[1:1+aead.NonceSize()], sealed[1+aead.NonceSize():], changePairsAAD(requestID))
	if err != nil {
		return nil, fmt.Errorf("%w: change request %s: pairs do not authenticate", errUndecryptable, requestID)
	}
	return credpair.Decode(plain)
}

// open decrypts the pairs of revision of credentialID (the revision of the record the blob was read
// from). A v2 blob sealed for any other revision does not authenticate: errUndecryptable. v1 blobs,
// written before v2 existed, are bound to the credential only.
func (b *barrier) open(ctx context.Context, credentialID string, revision int32, sealed, wrappedKey []byte) (credpair.Map, error) {
	dataKey, err := b.dataKey(ctx, credentialID, wrappedKey)
	if err != nil {
		return nil, err
	}
	aead, err := newAEAD(dataKey)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUndecryptable, err)
	}
	if len(sealed) < 1+aead.NonceSize() || (sealed[0] != sealedFormatV1 && sealed[0] != sealedFormatV2) {
		return nil, fmt.Errorf("%w: credential %s: unknown sealed format", errUndecryptable, credentialID)
	}
	plain, err := aead.Open(nil, sealed[1:1+aead.NonceSize()], sealed[1+aead.NonceSize():], pairsAAD(sealed[0], credentialID, revision))
	if err != nil {
		return nil, fmt.Errorf("%w: credential %s revision %d: pairs do not authenticate", errUndecryptable, credentialID, revision)
	}
	// Records sealed before values kept their JSON type hold strings only, which read as strings.
	opened, err := credpair.Decode(plain)
	if err != nil {
		return nil, fmt.Errorf("%w: credential %s: %v", errUndecryptable, credentialID, err)
	}
	return opened, nil
}

// dataKey unwraps the data key of a credential's revision, from the cache when it holds it.
func (b *barrier) dataKey(ctx context.Context, credentialID string, wrappedKey []byte) ([]byte, error) {
	if dataKey, ok := b.keys.get(wrappedKey); ok {
		return dataKey, nil
	}
	dataKey, _, err := b.kms.Decrypt(ctx, wrappedKey, encryptionContext(credentialID))
	if err != nil {
		return nil, kmsError(ctx, "decrypt data key of credential "+credentialID, err)
	}
	b.keys.put(wrappedKey, dataKey)
	return dataKey, nil
}

// rewrap wraps the data key of wrappedKey again under the master key as it is now (its active
// version), for the same credential. The sealed pairs do not change: only who can unwrap their key.
func (b *barrier) rewrap(ctx context.Context, credentialID string, wrappedKey []byte) ([]byte, error) {
	dataKey, err := b.dataKey(ctx, credentialID, wrappedKey)
	if err != nil {
		return nil, err
	}
	next, err := b.kms.Encrypt(ctx, b.masterKey, dataKey, encryptionContext(credentialID))
	if err != nil {
		return nil, kmsError(ctx, "wrap data key of credential "+credentialID, err)
	}
	b.keys.put(next, dataKey)
	return next, nil
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
