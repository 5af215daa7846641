package kms

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The aliases every new keyring starts with, one per purpose, so each purpose can be rotated or moved
// to its own AWS key without touching the others.
const (
	AliasMaster   = "alias/gantry-master"
	AliasAuth     = "alias/gantry-auth"
	AliasUserAuth = "alias/gantry-user-auth"
)

// KeyringKeyIDPrefix starts every canonical keyring key id. It is ARN-shaped so logs and stored key
// ids look alike whichever provider made them, but "gantry" as the partition means it can never be
// confused with a real AWS ARN.
const KeyringKeyIDPrefix = "arn:gantry:kms:local:key/"

const (
	keyringFormat = 1
	keyringMagic  = "GKR1"
	// A key id is 16 random bytes in hex: 32 characters.
	keyringKeyIDLen   = 32
	keyringKeySize    = 32
	keyringNonceSize  = 12
	keyringTagSize    = 16
	maxKeyringFileLen = 16 << 20
	maxAliasLen       = 256
)

// Keyring is a Provider whose master keys live in a local file, for installations without a cloud
// key service. Each key has numbered versions so it can be rotated without losing the ability to
// decrypt what older versions encrypted.
//
// A keyring file belongs to one process: CreateKey and RotateKey from two processes sharing a file
// would each overwrite the other's change.
type Keyring struct {
	path   string
	logger *zap.Logger

	// writeMu serialises CreateKey and RotateKey, so the slow disk write happens without holding mu
	// and never stalls Encrypt or Decrypt.
	writeMu sync.Mutex
	mu      sync.RWMutex
	state   *keyringState // replaced whole, never modified in place
}

// keyringState is one immutable snapshot of the keyring: the file as stored and the ciphers built
// from it.
type keyringState struct {
	file *keyringFile
	keys map[string]*ringKey
}

type ringKey struct {
	versions map[uint32]cipher.AEAD
	// retired are the versions marked retired: they decrypt, and are never active.
	retired map[uint32]bool
	latest  uint32
	// active is the version Encrypt uses: the latest one, unless a newer version is only staged.
	active uint32
}

type keyringFile struct {
	Format  int                    `json:"format"`
	Keys    map[string]*keyringKey `json:"keys"`
	Aliases map[string]string      `json:"aliases"`
	// Used is set once a store's data was proven to open with this keyring (see MarkUsed). Older
	// gantry versions ignore the field.
	Used *KeyringUse `json:"used,omitempty"`
}

// KeyringUse records that a keyring protects a store: from then on an empty or missing store next to
// it is a lost store, not a new one.
type KeyringUse struct {
	// Since is when gantry first proved that the store's key-check value opens with this keyring.
	Since time.Time `json:"since"`
	// Store names the store it proved it on (a bbolt file, or an etcd prefix), for messages only:
	// the same keyring may be copied to the replicas of one etcd store.
	Store string `json:"store"`
}

type keyringKey struct {
	Created  time.Time        `json:"created"`
	Versions []keyringVersion `json:"versions"`
	// Active is the version new encryptions use when it is not the latest: a newer version was staged
	// (StageKey) so that every replica can decrypt with it before any encrypts with it. 0 (absent)
	// means the latest version. Older gantry versions ignore the field and encrypt with the latest.
	Active int `json:"active,omitempty"`
}

type keyringVersion struct {
	Version  int       `json:"version"`
	Material []byte    `json:"material"`
	Created  time.Time `json:"created"`
	// Retired is when the version was retired (RetireKeyVersion): it still decrypts, and is never
	// activated again until RestoreKeyVersion. Older gantry versions ignore the field.
	Retired *time.Time `json:"retired,omitempty"`
}

var (
	_ Provider     = (*Keyring)(nil)
	_ KeyVersioner = (*Keyring)(nil)
)

// OpenKeyring loads the keyring at path, or creates it with the three default keys (AliasMaster,
// AliasAuth, AliasUserAuth) if there is no file there yet. The directory must exist: creating it here
// could silently put keys on an unmounted volume's mount point.
func OpenKeyring(path string, logger *zap.Logger) (*Keyring, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	k := &Keyring{path: path, logger: logger}

	st, err := loadKeyring(path)
	if errors.Is(err, fs.ErrNotExist) {
		st, err = createKeyring(path)
		if errors.Is(err, fs.ErrExist) {
			// Another process created it between our open and our link; theirs is the keyring.
			st, err = loadKeyring(path)
		} else if err == nil {
			logger.Info("created keyring", zap.String("path", path), zap.Int("keys", len(st.keys)))
		}
	}
	if err != nil {
		return nil, err
	}
	k.state = st
	logger.Debug("opened keyring", zap.String("path", path), zap.Int("keys", len(st.keys)))
	return k, nil
}

// LoadKeyring loads the existing keyring at path and never creates one, for tools that must not
// change a data folder (gantry check): a missing file is an error wrapping fs.ErrNotExist.
func LoadKeyring(path string, logger *zap.Logger) (*Keyring, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	st, err := loadKeyring(path)
	if err != nil {
		return nil, err
	}
	return &Keyring{path: path, logger: logger, state: st}, nil
}

func loadKeyring(path string) (*keyringState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kms: open keyring: %w", err)
	}
	defer f.Close()
	// Stat the open file rather than the path so the mode we check is the mode of what we read.
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("kms: keyring %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("kms: keyring %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("kms: keyring %s has mode %04o, which lets group or others read master keys; run chmod 600 %s",
			path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyringFileLen+1))
	if err != nil {
		return nil, fmt.Errorf("kms: read keyring %s: %w", path, err)
	}
	if len(data) > maxKeyringFileLen {
		return nil, fmt.Errorf("kms: keyring %s is larger than %d bytes", path, maxKeyringFileLen)
	}
	var kf keyringFile
	if err := json.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("kms: keyring %s is not valid JSON: %w", path, err)
	}
	st, err := newKeyringState(&kf)
	if err != nil {
		return nil, fmt.Errorf("kms: keyring %s: %w", path, err)
	}
	return st, nil
}

func createKeyring(path string) (*keyringState, error) {
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("kms: cannot create keyring %s: directory %s does not exist", path, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("kms: cannot create keyring %s: %w", path, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("kms: cannot create keyring %s: %s is not a directory", path, dir)
	}

	kf := &keyringFile{Format: keyringFormat, Keys: map[string]*keyringKey{}, Aliases: map[string]string{}}
	now := time.Now().UTC()
	for _, alias := range []string{AliasMaster, AliasAuth, AliasUserAuth} {
		if _, err := addKey(kf, alias, now); err != nil {
			return nil, err
		}
	}
	st, err := newKeyringState(kf)
	if err != nil {
		return nil, err
	}
	if err := writeKeyringFile(path, kf, false); err != nil {
		return nil, err
	}
	return st, nil
}

// writeKeyringFile writes kf so that path holds either the old keyring or the new one, whole, even
// across a crash. With replace false it refuses to overwrite an existing file (fs.ErrExist), so two
// processes creating the same keyring cannot each encrypt under keys the other then replaces.
func writeKeyringFile(path string, kf *keyringFile, replace bool) error {
	data, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return fmt.Errorf("kms: encode keyring: %w", err)
	}
	dir := filepath.Dir(path)
	// CreateTemp makes the file 0600, so the keys are never readable by others, not even briefly.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("kms: write keyring %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a rename or link this is a no-op or drops the extra name

	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("kms: write keyring %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("kms: write keyring %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("kms: write keyring %s: %w", path, err)
	}
	if replace {
		err = os.Rename(tmpName, path)
	} else {
		err = os.Link(tmpName, path)
	}
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("kms: write keyring %s: %w", path, err)
	}
	// The rename is only durable once the directory entry is.
	if d, err := os.Open(dir); err == nil {
		syncErr := d.Sync()
		d.Close()
		if syncErr != nil {
			return fmt.Errorf("kms: write keyring %s: sync directory: %w", path, syncErr)
		}
	}
	return nil
}

// newKeyringState validates kf and builds its ciphers. A keyring that fails here is refused as a
// whole: using a half-valid one could encrypt under a key that later turns out to be unusable.
func newKeyringState(kf *keyringFile) (*keyringState, error) {
	if kf.Format != keyringFormat {
		return nil, fmt.Errorf("unsupported keyring format %d (want %d)", kf.Format, keyringFormat)
	}
	keys := make(map[string]*ringKey, len(kf.Keys))
	for id, key := range kf.Keys {
		if !validKeyringKeyID(id) {
			return nil, fmt.Errorf("invalid key id %q: want %d lowercase hex characters", id, keyringKeyIDLen)
		}
		if key == nil || len(key.Versions) == 0 {
			return nil, fmt.Errorf("key %s has no versions", id)
		}
		rk := &ringKey{versions: make(map[uint32]cipher.AEAD, len(key.Versions)), retired: map[uint32]bool{}}
		for _, v := range key.Versions {
			if v.Version < 1 || int64(v.Version) > math.MaxUint32 {
				return nil, fmt.Errorf("key %s: invalid version %d", id, v.Version)
			}
			ver := uint32(v.Version)
			if _, dup := rk.versions[ver]; dup {
				return nil, fmt.Errorf("key %s: version %d appears twice", id, ver)
			}
			if len(v.Material) != keyringKeySize {
				return nil, fmt.Errorf("key %s version %d: key material is %d bytes, want %d", id, ver, len(v.Material), keyringKeySize)
			}
			block, err := aes.NewCipher(v.Material)
			if err != nil {
				return nil, fmt.Errorf("key %s version %d: %w", id, ver, err)
			}
			aead, err := cipher.NewGCM(block)
			if err != nil {
				return nil, fmt.Errorf("key %s version %d: %w", id, ver, err)
			}
			rk.versions[ver] = aead
			rk.latest = max(rk.latest, ver)
			if v.Retired != nil {
				rk.retired[ver] = true
			}
		}
		rk.active = rk.latest
		if key.Active != 0 {
			if _, ok := rk.versions[uint32(max(0, key.Active))]; !ok || key.Active < 0 {
				return nil, fmt.Errorf("key %s: active version %d is not one of its versions", id, key.Active)
			}
			rk.active = uint32(key.Active)
		}
		if rk.retired[rk.active] {
			return nil, fmt.Errorf("key %s: the active version %d is retired", id, rk.active)
		}
		keys[id] = rk
	}
	for alias, id := range kf.Aliases {
		if err := validateAlias(alias); err != nil {
			return nil, err
		}
		if _, ok := keys[id]; !ok {
			return nil, fmt.Errorf("alias %s names key %q, which is not in the keyring", alias, id)
		}
	}
	return &keyringState{file: kf, keys: keys}, nil
}

func validKeyringKeyID(id string) bool {
	if len(id) != keyringKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validateAlias accepts the alias syntax AWS KMS accepts, so an alias that works with the keyring also
// works when the installation moves to AWS.
func validateAlias(alias string) error {
	name, ok := strings.CutPrefix(alias, "alias/")
	if !ok || name == "" || len(alias) > maxAliasLen {
		return fmt.Errorf("kms: invalid alias %q: want \"alias/<name>\", at most %d characters", alias, maxAliasLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '_' || c == '-') {
			return fmt.Errorf("kms: invalid alias %q: only letters, digits, '/', '_' and '-' may follow \"alias/\"", alias)
		}
	}
	return nil
}

func (kf *keyringFile) clone() *keyringFile {
	c := &keyringFile{
		Format:  kf.Format,
		Keys:    make(map[string]*keyringKey, len(kf.Keys)+1),
		Aliases: make(map[string]string, len(kf.Aliases)+1),
	}
	for id, key := range kf.Keys {
		// Material slices are never written after creation, so sharing them is safe.
		c.Keys[id] = &keyringKey{Created: key.Created, Versions: append([]keyringVersion(nil), key.Versions...), Active: key.Active}
	}
	for alias, id := range kf.Aliases {
		c.Aliases[alias] = id
	}
	if kf.Used != nil {
		used := *kf.Used
		c.Used = &used
	}
	return c
}

func addKey(kf *keyringFile, alias string, now time.Time) (string, error) {
	var raw [keyringKeyIDLen / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("kms: generate key id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	material := make([]byte, keyringKeySize)
	if _, err := rand.Read(material); err != nil {
		return "", fmt.Errorf("kms: generate key: %w", err)
	}
	kf.Keys[id] = &keyringKey{Created: now, Versions: []keyringVersion{{Version: 1, Material: material, Created: now}}}
	if alias != "" {
		kf.Aliases[alias] = id
	}
	return id, nil
}

// lookup resolves an alias, bare key id or canonical key id to the bare id and its key.
func (s *keyringState) lookup(ref string) (string, *ringKey, error) {
	id := ref
	if strings.HasPrefix(ref, "alias/") {
		var ok bool
		if id, ok = s.file.Aliases[ref]; !ok {
			return "", nil, fmt.Errorf("%w: no alias %q in the keyring", ErrKeyNotFound, ref)
		}
	} else {
		id = strings.TrimPrefix(ref, KeyringKeyIDPrefix)
	}
	key, ok := s.keys[id]
	if !ok {
		return "", nil, fmt.Errorf("%w: no key %q in the keyring", ErrKeyNotFound, ref)
	}
	return id, key, nil
}

func (k *Keyring) snapshot() *keyringState {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.state
}

// GenerateRandom returns n bytes from the operating system's random source.
func (k *Keyring) GenerateRandom(ctx context.Context, n int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkRandomLength(n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("kms: read random: %w", err)
	}
	return b, nil
}

// ResolveKeyID returns the canonical id (KeyringKeyIDPrefix + key id) of an alias, key id or
// canonical id.
func (k *Keyring) ResolveKeyID(ctx context.Context, keyID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	id, _, err := k.snapshot().lookup(keyID)
	if err != nil {
		return "", err
	}
	return KeyringKeyIDPrefix + id, nil
}

// Encrypt seals plaintext with AES-256-GCM under the key's active version (the latest one, unless a
// newer version is only staged).
//
// The blob is "GKR1", the key id's length and the key id, the version (4 bytes, big-endian), the
// nonce, then the ciphertext and tag. The header travels in the clear because Decrypt must know which
// key to use, and it is authenticated together with the encryption context so neither can be swapped.
func (k *Keyring) Encrypt(ctx context.Context, keyID string, plaintext []byte, encryptionContext map[string]string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkPlaintext(plaintext); err != nil {
		return nil, err
	}
	id, key, err := k.snapshot().lookup(keyID)
	if err != nil {
		return nil, err
	}
	aead := key.versions[key.active]

	hdrLen := len(keyringMagic) + 1 + len(id) + 4
	blob := make([]byte, hdrLen+keyringNonceSize, hdrLen+keyringNonceSize+len(plaintext)+aead.Overhead())
	copy(blob, keyringMagic)
	blob[len(keyringMagic)] = byte(len(id))
	copy(blob[len(keyringMagic)+1:], id)
	binary.BigEndian.PutUint32(blob[hdrLen-4:], key.active)
	nonce := blob[hdrLen:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("kms: generate nonce: %w", err)
	}
	return aead.Seal(blob, nonce, plaintext, keyringAAD(blob[:hdrLen], encryptionContext)), nil
}

// Decrypt opens a blob from Encrypt. Every malformation is reported as ErrInvalidCiphertext; a blob
// from a key or key version this keyring does not hold is ErrKeyNotFound, because the likely cause is
// a replaced or restored keyring file, not tampering.
func (k *Keyring) Decrypt(ctx context.Context, ciphertext []byte, encryptionContext map[string]string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	const fixed = len(keyringMagic) + 1
	if len(ciphertext) < fixed || string(ciphertext[:len(keyringMagic)]) != keyringMagic {
		return nil, "", fmt.Errorf("%w: not a keyring ciphertext", ErrInvalidCiphertext)
	}
	idLen := int(ciphertext[len(keyringMagic)])
	hdrLen := fixed + idLen + 4
	if len(ciphertext) < hdrLen+keyringNonceSize+keyringTagSize {
		return nil, "", fmt.Errorf("%w: keyring ciphertext is truncated", ErrInvalidCiphertext)
	}
	id := string(ciphertext[fixed : fixed+idLen])
	if !validKeyringKeyID(id) {
		return nil, "", fmt.Errorf("%w: keyring ciphertext has a malformed key id", ErrInvalidCiphertext)
	}
	ver := binary.BigEndian.Uint32(ciphertext[hdrLen-4 : hdrLen])
	if ver == 0 {
		return nil, "", fmt.Errorf("%w: keyring ciphertext has key version 0", ErrInvalidCiphertext)
	}

	st := k.snapshot()
	key, ok := st.keys[id]
	if !ok {
		return nil, "", fmt.Errorf("%w: the ciphertext was made by key %s%s, which this keyring does not hold",
			ErrKeyNotFound, KeyringKeyIDPrefix, id)
	}
	aead, ok := key.versions[ver]
	if !ok {
		return nil, "", fmt.Errorf("%w: the ciphertext was made by version %d of key %s%s, which this keyring does not hold",
			ErrKeyNotFound, ver, KeyringKeyIDPrefix, id)
	}
	nonce := ciphertext[hdrLen : hdrLen+keyringNonceSize]
	plaintext, err := aead.Open(nil, nonce, ciphertext[hdrLen+keyringNonceSize:], keyringAAD(ciphertext[:hdrLen], encryptionContext))
	if err != nil {
		return nil, "", fmt.Errorf("%w: authentication failed (wrong encryption context, or the ciphertext was altered)", ErrInvalidCiphertext)
	}
	return plaintext, KeyringKeyIDPrefix + id, nil
}

// GenerateDataKey returns a fresh random data key and that key encrypted under keyID.
func (k *Keyring) GenerateDataKey(ctx context.Context, keyID string, encryptionContext map[string]string) ([]byte, []byte, error) {
	plaintext, err := k.GenerateRandom(ctx, DataKeySize)
	if err != nil {
		return nil, nil, err
	}
	ciphertext, err := k.Encrypt(ctx, keyID, plaintext, encryptionContext)
	if err != nil {
		return nil, nil, err
	}
	return plaintext, ciphertext, nil
}

// CreateKey adds a new key, under alias unless alias is empty, and returns its canonical id. The
// keyring file is rewritten before CreateKey returns, so a key that was handed out is never lost.
func (k *Keyring) CreateKey(ctx context.Context, alias string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if alias != "" {
		if err := validateAlias(alias); err != nil {
			return "", err
		}
	}
	var id string
	err := k.update(func(kf *keyringFile) error {
		if _, exists := kf.Aliases[alias]; alias != "" && exists {
			return fmt.Errorf("kms: alias %s already exists in keyring %s", alias, k.path)
		}
		var err error
		id, err = addKey(kf, alias, time.Now().UTC())
		return err
	})
	if err != nil {
		return "", err
	}
	k.logger.Info("created key", zap.String("key_id", KeyringKeyIDPrefix+id), zap.String("alias", alias))
	return KeyringKeyIDPrefix + id, nil
}

// RotateKey adds a new version to a key, makes it the version new encryptions use, and returns its
// number. Ciphertexts from older versions still decrypt, since their versions are kept. For replicas
// sharing a store, StageKey and ActivateKey split this in two, so no replica encrypts under a version
// another replica cannot decrypt yet.
func (k *Keyring) RotateKey(ctx context.Context, keyIDOrAlias string) (int, error) {
	return k.addVersion(ctx, keyIDOrAlias, true)
}

// StageKey adds a new version to a key without using it: new encryptions keep the active version
// until ActivateKey. Distributing a staged keyring first lets every replica decrypt under the new
// version before any replica encrypts with it.
func (k *Keyring) StageKey(ctx context.Context, keyIDOrAlias string) (int, error) {
	return k.addVersion(ctx, keyIDOrAlias, false)
}

func (k *Keyring) addVersion(ctx context.Context, keyIDOrAlias string, activate bool) (int, error) {
	var version int
	id, err := k.updateKey(ctx, keyIDOrAlias, func(_ *ringKey, key *keyringKey) error {
		active := key.Active
		for _, v := range key.Versions {
			version = max(version, v.Version)
		}
		if active == 0 {
			active = version
		}
		version++
		if int64(version) > math.MaxUint32 {
			return fmt.Errorf("kms: key %s has no versions left", keyIDOrAlias)
		}
		material := make([]byte, keyringKeySize)
		if _, err := rand.Read(material); err != nil {
			return fmt.Errorf("kms: generate key: %w", err)
		}
		key.Versions = append(key.Versions, keyringVersion{Version: version, Material: material, Created: time.Now().UTC()})
		key.Active = 0
		if !activate {
			key.Active = active
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	k.logger.Info("added key version", zap.String("key_id", KeyringKeyIDPrefix+id), zap.Int("version", version), zap.Bool("active", activate))
	return version, nil
}

// ActivateKey makes version the one new encryptions of a key use (0: the latest version).
func (k *Keyring) ActivateKey(ctx context.Context, keyIDOrAlias string, version int) error {
	id, err := k.updateKey(ctx, keyIDOrAlias, func(key *ringKey, stored *keyringKey) error {
		if version == 0 {
			version = int(key.latest)
		}
		if _, ok := key.versions[uint32(max(0, version))]; !ok || version < 0 {
			return fmt.Errorf("kms: key %s has no version %d", keyIDOrAlias, version)
		}
		if key.retired[uint32(version)] {
			return fmt.Errorf("kms: version %d of key %s is retired; restore it first (gantry keyring restore) to encrypt with it again", version, keyIDOrAlias)
		}
		stored.Active = version
		if uint32(version) == key.latest {
			stored.Active = 0
		}
		return nil
	})
	if err != nil {
		return err
	}
	k.logger.Info("activated key version", zap.String("key_id", KeyringKeyIDPrefix+id), zap.Int("version", version))
	return nil
}

// RetireKeyVersion marks a version of a key retired. A retired version is never used to encrypt (it
// cannot be activated) but still decrypts, so a retire found wrong later is undone with
// RestoreKeyVersion and loses nothing; DestroyKeyVersion deletes its material, a separate step. The
// active version cannot be retired. Callers retire a master key version only once nothing is wrapped
// under it (gantry keyring retire scans the store and asks every running replica first).
func (k *Keyring) RetireKeyVersion(ctx context.Context, keyIDOrAlias string, version int) error {
	id, err := k.updateVersion(ctx, keyIDOrAlias, version, func(key *ringKey, v *keyringVersion) error {
		if v.Retired != nil {
			return fmt.Errorf("kms: version %d of key %s is retired already", version, keyIDOrAlias)
		}
		if uint32(version) == key.active {
			return fmt.Errorf("kms: version %d of key %s is the active version; activate another first", version, keyIDOrAlias)
		}
		now := time.Now().UTC()
		v.Retired = &now
		return nil
	})
	if err != nil {
		return err
	}
	k.logger.Info("retired key version", zap.String("key_id", KeyringKeyIDPrefix+id), zap.Int("version", version))
	return nil
}

// RestoreKeyVersion takes back the retire of a version: it may be activated again. Its material was
// kept, so nothing it wrapped was lost.
func (k *Keyring) RestoreKeyVersion(ctx context.Context, keyIDOrAlias string, version int) error {
	id, err := k.updateVersion(ctx, keyIDOrAlias, version, func(_ *ringKey, v *keyringVersion) error {
		if v.Retired == nil {
			return fmt.Errorf("kms: version %d of key %s is not retired", version, keyIDOrAlias)
		}
		v.Retired = nil
		return nil
	})
	if err != nil {
		return err
	}
	k.logger.Info("restored retired key version", zap.String("key_id", KeyringKeyIDPrefix+id), zap.Int("version", version))
	return nil
}

// DestroyKeyVersion deletes the material of a retired version: whatever it encrypted no longer
// decrypts, for good (unless a backup of the keyring holds it). Only a retired version can be
// destroyed, so destroying is always the second of two explicit steps; callers check first that nothing
// needs it (gantry keyring destroy repeats retire's scan of the store and of the running replicas).
func (k *Keyring) DestroyKeyVersion(ctx context.Context, keyIDOrAlias string, version int) error {
	id, err := k.updateKey(ctx, keyIDOrAlias, func(key *ringKey, stored *keyringKey) error {
		i := slices.IndexFunc(stored.Versions, func(v keyringVersion) bool { return v.Version == version })
		if i < 0 || version < 1 {
			return fmt.Errorf("kms: key %s has no version %d (destroyed already?)", keyIDOrAlias, version)
		}
		if stored.Versions[i].Retired == nil {
			return fmt.Errorf("kms: version %d of key %s is not retired; retire it first (gantry keyring retire)", version, keyIDOrAlias)
		}
		stored.Versions = slices.Delete(slices.Clone(stored.Versions), i, i+1)
		// The active version stays; it is written out only while it is not the latest.
		stored.Active = int(key.active)
		if latestOf(stored.Versions) == int(key.active) {
			stored.Active = 0
		}
		return nil
	})
	if err != nil {
		return err
	}
	k.logger.Info("destroyed key version", zap.String("key_id", KeyringKeyIDPrefix+id), zap.Int("version", version))
	return nil
}

// updateVersion changes one version of a key (update's copy of it) given the key as it is now.
func (k *Keyring) updateVersion(ctx context.Context, keyIDOrAlias string, version int, change func(key *ringKey, v *keyringVersion) error) (string, error) {
	return k.updateKey(ctx, keyIDOrAlias, func(key *ringKey, stored *keyringKey) error {
		i := slices.IndexFunc(stored.Versions, func(v keyringVersion) bool { return v.Version == version })
		if i < 0 || version < 1 {
			return fmt.Errorf("kms: key %s has no version %d", keyIDOrAlias, version)
		}
		return change(key, &stored.Versions[i])
	})
}

// updateKey changes one key of the keyring (update's copy of it, stored) given the key as it is now,
// and returns the key's bare id.
func (k *Keyring) updateKey(ctx context.Context, keyIDOrAlias string, change func(key *ringKey, stored *keyringKey) error) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var id string
	err := k.update(func(kf *keyringFile) error {
		var key *ringKey
		var err error
		if id, key, err = k.snapshot().lookup(keyIDOrAlias); err != nil {
			return err
		}
		return change(key, kf.Keys[id])
	})
	return id, err
}

func latestOf(versions []keyringVersion) int {
	latest := 0
	for _, v := range versions {
		latest = max(latest, v.Version)
	}
	return latest
}

// KeyVersion names one version of a key.
type KeyVersion struct {
	// KeyID is the canonical key id (ResolveKeyID form).
	KeyID string
	// Version is the version number, 1 and up.
	Version uint32
}

func (v KeyVersion) String() string { return fmt.Sprintf("%s v%d", v.KeyID, v.Version) }

// KeyState describes one key of the keyring for operators: its aliases, versions and active version.
type KeyState struct {
	KeyID    string
	Aliases  []string
	Versions []int
	// Retired are the versions of Versions that are retired: they decrypt, never encrypt.
	Retired []int
	Active  int
}

// Keys lists the keyring's keys, sorted by their first alias, then id.
func (k *Keyring) Keys() []KeyState {
	st := k.snapshot()
	out := make([]KeyState, 0, len(st.keys))
	for id, key := range st.keys {
		ks := KeyState{KeyID: KeyringKeyIDPrefix + id, Active: int(key.active)}
		for v := range key.versions {
			ks.Versions = append(ks.Versions, int(v))
			if key.retired[v] {
				ks.Retired = append(ks.Retired, int(v))
			}
		}
		slices.Sort(ks.Versions)
		slices.Sort(ks.Retired)
		for alias, target := range st.file.Aliases {
			if target == id {
				ks.Aliases = append(ks.Aliases, alias)
			}
		}
		slices.Sort(ks.Aliases)
		out = append(out, ks)
	}
	slices.SortFunc(out, func(a, b KeyState) int {
		if c := strings.Compare(strings.Join(a.Aliases, ","), strings.Join(b.Aliases, ",")); c != 0 {
			return c
		}
		return strings.Compare(a.KeyID, b.KeyID)
	})
	return out
}

// ActiveKeyVersion returns the key version Encrypt uses for keyIDOrAlias now.
func (k *Keyring) ActiveKeyVersion(ctx context.Context, keyIDOrAlias string) (KeyVersion, error) {
	if err := ctx.Err(); err != nil {
		return KeyVersion{}, err
	}
	id, key, err := k.snapshot().lookup(keyIDOrAlias)
	if err != nil {
		return KeyVersion{}, err
	}
	return KeyVersion{KeyID: KeyringKeyIDPrefix + id, Version: key.active}, nil
}

// HeldKeyVersions returns every version of keyIDOrAlias the keyring holds (and so decrypts), retired
// ones included, in order.
func (k *Keyring) HeldKeyVersions(ctx context.Context, keyIDOrAlias string) ([]KeyVersion, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, key, err := k.snapshot().lookup(keyIDOrAlias)
	if err != nil {
		return nil, err
	}
	out := make([]KeyVersion, 0, len(key.versions))
	for v := range key.versions {
		out = append(out, KeyVersion{KeyID: KeyringKeyIDPrefix + id, Version: v})
	}
	slices.SortFunc(out, func(a, b KeyVersion) int { return int(a.Version) - int(b.Version) })
	return out, nil
}

// CiphertextKeyVersion reads which key version made a ciphertext from its clear header, without
// decrypting it (a ciphertext that does not decrypt may still name a version). ErrInvalidCiphertext
// when it is not a keyring ciphertext.
func (k *Keyring) CiphertextKeyVersion(ciphertext []byte) (KeyVersion, error) {
	const fixed = len(keyringMagic) + 1
	if len(ciphertext) < fixed || string(ciphertext[:len(keyringMagic)]) != keyringMagic {
		return KeyVersion{}, fmt.Errorf("%w: not a keyring ciphertext", ErrInvalidCiphertext)
	}
	hdrLen := fixed + int(ciphertext[len(keyringMagic)]) + 4
	if len(ciphertext) < hdrLen {
		return KeyVersion{}, fmt.Errorf("%w: keyring ciphertext is truncated", ErrInvalidCiphertext)
	}
	id := string(ciphertext[fixed : hdrLen-4])
	if !validKeyringKeyID(id) {
		return KeyVersion{}, fmt.Errorf("%w: keyring ciphertext has a malformed key id", ErrInvalidCiphertext)
	}
	return KeyVersion{KeyID: KeyringKeyIDPrefix + id, Version: binary.BigEndian.Uint32(ciphertext[hdrLen-4 : hdrLen])}, nil
}

// Reload re-reads the keyring file, so a keyring rotated, activated or retired elsewhere (copied
// from another replica, or a Kubernetes Secret updated in place) takes effect without a restart. It
// reports whether anything changed. A file that does not load, or that lacks a key this keyring holds
// (a different keyring, not a new version of this one), is refused and the keyring in use stays: a
// reload never leaves the process without the keys it had. check, when not nil, is given the new
// keyring before it replaces the one in use; an error refuses it too (gantry checks that the store's
// key-check value still opens).
func (k *Keyring) Reload(check func(Provider) error) (bool, error) {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	next, err := loadKeyring(k.path)
	if err != nil {
		return false, err
	}
	cur := k.snapshot()
	for id := range cur.keys {
		if _, ok := next.keys[id]; !ok {
			return false, fmt.Errorf("kms: keyring %s no longer holds key %s%s: refused (a different keyring?); the keys in use stay", k.path, KeyringKeyIDPrefix, id)
		}
	}
	if sameKeys(cur, next) {
		return false, nil
	}
	if check != nil {
		if err := check(&Keyring{path: k.path, logger: k.logger, state: next}); err != nil {
			return false, fmt.Errorf("kms: keyring %s refused: %w; the keys in use stay", k.path, err)
		}
	}
	k.mu.Lock()
	k.state = next
	k.mu.Unlock()
	for id, key := range next.keys {
		k.logger.Info("reloaded keyring key", zap.String("key_id", KeyringKeyIDPrefix+id), zap.Int("versions", len(key.versions)), zap.Uint32("active", key.active))
	}
	return true, nil
}

// sameKeys reports whether two keyring states hold the same keys, versions (number and material),
// active versions and aliases (the Used mark does not matter to encryption).
func sameKeys(a, b *keyringState) bool {
	if len(a.file.Keys) != len(b.file.Keys) || !maps.Equal(a.file.Aliases, b.file.Aliases) {
		return false
	}
	for id, ka := range a.file.Keys {
		kb, ok := b.file.Keys[id]
		if !ok || a.keys[id].active != b.keys[id].active || len(ka.Versions) != len(kb.Versions) {
			return false
		}
		for i := range ka.Versions {
			if ka.Versions[i].Version != kb.Versions[i].Version || !bytes.Equal(ka.Versions[i].Material, kb.Versions[i].Material) {
				return false
			}
		}
	}
	return true
}

// Used returns the record of MarkUsed, or nil for a keyring that was never marked.
func (k *Keyring) Used() *KeyringUse {
	if u := k.snapshot().file.Used; u != nil {
		c := *u
		return &c
	}
	return nil
}

// MarkUsed records in the keyring file, once, that the keyring protects store (a name for messages):
// the caller has just proven that the store's key-check value opens with it. A keyring already marked
// is left as it is.
func (k *Keyring) MarkUsed(store string) error {
	if k.Used() != nil {
		return nil
	}
	err := k.update(func(kf *keyringFile) error {
		if kf.Used == nil {
			kf.Used = &KeyringUse{Since: time.Now().UTC(), Store: store}
		}
		return nil
	})
	if err == nil {
		k.logger.Info("keyring marked as used: a missing or empty store next to it is now refused", zap.String("path", k.path), zap.String("store", store))
	}
	return err
}

// update applies change to a copy of the keyring, persists the copy, and only then makes it current,
// so a failed write leaves memory and disk agreeing.
func (k *Keyring) update(change func(*keyringFile) error) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	next := k.snapshot().file.clone()
	if err := change(next); err != nil {
		return err
	}
	st, err := newKeyringState(next)
	if err != nil {
		return fmt.Errorf("kms: keyring %s: %w", k.path, err)
	}
	if err := writeKeyringFile(k.path, next, true); err != nil {
		return err
	}
	k.mu.Lock()
	k.state = st
	k.mu.Unlock()
	return nil
}

// keyringAAD is the associated data for one blob: its header, then the encryption context encoded so
// that distinct maps never encode alike. Keys are sorted and every key and value is length-prefixed,
// so {"a":"bc"} and {"ab":"c"} differ; a nil map and an empty one both encode as a zero count.
func keyringAAD(header []byte, encryptionContext map[string]string) []byte {
	keys := make([]string, 0, len(encryptionContext))
	size := len(header) + 4
	for key, value := range encryptionContext {
		keys = append(keys, key)
		size += 8 + len(key) + len(value)
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, header...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, key := range keys {
		value := encryptionContext[key]
		b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
		b = append(b, key...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
		b = append(b, value...)
	}
	return b
}
