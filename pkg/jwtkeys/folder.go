package jwtkeys

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
)

// maxKeyFileLen bounds what Open reads: a key file holds a handful of PEM keys, far below this.
const maxKeyFileLen = 4 << 20

// keyFile is the layout of <dir>/<environment>.json.
type keyFile struct {
	Active string         `json:"active"`
	Keys   []keyFileEntry `json:"keys"`
}

type keyFileEntry struct {
	Kid        string `json:"kid"`
	PrivateKey string `json:"private_key"` // PKCS#8 PEM
	Created    string `json:"created"`     // RFC 3339
}

// Open returns a store whose keys live in dir, one file per environment. Every environment listed
// gets a key file: an existing one is loaded, a missing one is created with a fresh key that becomes
// the active one. Files of environments not listed are left alone.
//
// The folder belongs to one process: Rotate from two processes sharing it would each overwrite the
// other's new key.
func Open(dir string, environments []string, logger *zap.Logger) (*Store, error) {
	s := newStore(logger)
	if dir == "" {
		return nil, errors.New("jwtkeys: key folder is not set")
	}
	for _, env := range environments {
		if err := validateEnvironment(env); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("jwtkeys: creating key folder: %w", err)
	}
	for _, env := range environments {
		if _, done := s.envs[env]; done {
			continue
		}
		path := filepath.Join(dir, env+".json")
		e, err := loadKeyFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			e, err = s.createKeyFile(env, path)
		}
		if err != nil {
			return nil, err
		}
		s.envs[env] = e
	}
	return s, nil
}

// Rotate gives a folder-backed environment a new key and makes it the active one. The previous keys
// stay published so tokens they signed keep verifying. The new key is on disk before Rotate returns
// and before any token is signed with it.
func (s *Store) Rotate(env string) (kid string, err error) {
	e, err := s.environment(env)
	if err != nil {
		return "", err
	}
	if e.path == "" {
		return "", fmt.Errorf("%w: %q", ErrReadOnly, env)
	}
	// Generating takes long enough that it should not block signing, so it happens before locking.
	priv, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		return "", fmt.Errorf("jwtkeys: generating key for environment %q: %w", env, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	// Re-read: a concurrent Rotate or Merge may have replaced the environment meanwhile, and this
	// rotation must build on whatever is current so no key is lost.
	e, ok := s.envs[env]
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownEnvironment, env)
	}
	if e.path == "" {
		return "", fmt.Errorf("%w: %q", ErrReadOnly, env)
	}
	kid, err = newKid(e.keys)
	if err != nil {
		return "", err
	}
	key, err := newStoredKey(kid, priv, time.Now().UTC().Truncate(time.Second))
	if err != nil {
		return "", fmt.Errorf("jwtkeys: generated key for environment %q: %w", env, err)
	}
	next := &environment{active: kid, keys: append(slices.Clip(e.keys), key), path: e.path}
	// Writing under the lock keeps file and memory in the same order when rotations race.
	if err := writeKeyFile(next, true); err != nil {
		return "", err
	}
	s.envs[env] = next
	s.logger.Info("rotated JWT signing key",
		zap.String("environment", env), zap.String("kid", kid), zap.String("previous_kid", e.active),
		zap.Int("keys", len(next.keys)))
	return kid, nil
}

func (s *Store) createKeyFile(env, path string) (*environment, error) {
	priv, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: generating key for environment %q: %w", env, err)
	}
	kid, err := newKid(nil)
	if err != nil {
		return nil, err
	}
	key, err := newStoredKey(kid, priv, time.Now().UTC().Truncate(time.Second))
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: generated key for environment %q: %w", env, err)
	}
	e := &environment{active: kid, keys: []storedKey{key}, path: path}
	if err := writeKeyFile(e, false); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another process created the file first; use its key so both sign with the same one.
			return loadKeyFile(path)
		}
		return nil, err
	}
	s.logger.Info("generated JWT signing key",
		zap.String("environment", env), zap.String("kid", kid), zap.String("path", path))
	return e, nil
}

func newKid(existing []storedKey) (string, error) {
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("jwtkeys: generating kid: %w", err)
		}
		kid := hex.EncodeToString(b[:])
		if !slices.ContainsFunc(existing, func(k storedKey) bool { return k.ID == kid }) {
			return kid, nil
		}
	}
}

// loadKeyFile reads a key file. Anything wrong with it is an error rather than a skipped key: gantry
// wrote the file, so damage means something outside gantry touched its private keys.
func loadKeyFile(path string) (*environment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: opening key file: %w", err)
	}
	defer f.Close()
	// Stat the open file rather than the path so the checked file is the one read.
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("jwtkeys: key file %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("jwtkeys: key file %s has mode %04o: private keys must not be readable by group or others (chmod 600)", path, perm)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileLen+1))
	if err != nil {
		return nil, fmt.Errorf("jwtkeys: reading key file %s: %w", path, err)
	}
	if len(data) > maxKeyFileLen {
		return nil, fmt.Errorf("jwtkeys: key file %s is larger than %d bytes", path, maxKeyFileLen)
	}
	var kf keyFile
	if err := json.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("jwtkeys: key file %s: %w", path, err)
	}
	if len(kf.Keys) == 0 {
		return nil, fmt.Errorf("jwtkeys: key file %s holds no keys", path)
	}
	e := &environment{active: kf.Active, path: path}
	for i, entry := range kf.Keys {
		key, err := parseKeyFileEntry(entry, e.keys)
		if err != nil {
			return nil, fmt.Errorf("jwtkeys: key file %s, key %d: %w", path, i, err)
		}
		e.keys = append(e.keys, key)
	}
	if e.activeKey() == nil {
		return nil, fmt.Errorf("jwtkeys: key file %s: active kid %q is not one of its keys", path, kf.Active)
	}
	return e, nil
}

func parseKeyFileEntry(entry keyFileEntry, previous []storedKey) (storedKey, error) {
	if slices.ContainsFunc(previous, func(k storedKey) bool { return k.ID == entry.Kid }) {
		return storedKey{}, fmt.Errorf("duplicate kid %q", entry.Kid)
	}
	created, err := time.Parse(time.RFC3339, entry.Created)
	if err != nil {
		return storedKey{}, fmt.Errorf("kid %q: created: %w", entry.Kid, err)
	}
	block, _ := pem.Decode([]byte(entry.PrivateKey))
	if block == nil || block.Type != "PRIVATE KEY" {
		return storedKey{}, fmt.Errorf("kid %q: private_key is not a PKCS#8 PEM block", entry.Kid)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return storedKey{}, fmt.Errorf("kid %q: private_key: %w", entry.Kid, err)
	}
	priv, ok := parsed.(*rsa.PrivateKey)
	if !ok {
		return storedKey{}, fmt.Errorf("kid %q: private_key is a %T, not an RSA key", entry.Kid, parsed)
	}
	return newStoredKey(entry.Kid, priv, created)
}

// writeKeyFile writes e to its path through a temporary file so a crash never leaves a half-written
// key file. With replace false it fails with fs.ErrExist instead of overwriting, which lets two
// processes creating the same environment at once agree on one key.
func writeKeyFile(e *environment, replace bool) error {
	kf := keyFile{Active: e.active}
	for _, k := range e.keys {
		der, err := x509.MarshalPKCS8PrivateKey(k.Private)
		if err != nil {
			return fmt.Errorf("jwtkeys: encoding key %q: %w", k.ID, err)
		}
		kf.Keys = append(kf.Keys, keyFileEntry{
			Kid:        k.ID,
			PrivateKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
			Created:    k.created.UTC().Format(time.RFC3339),
		})
	}
	data, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return fmt.Errorf("jwtkeys: encoding key file: %w", err)
	}
	data = append(data, '\n')

	dir := filepath.Dir(e.path)
	// CreateTemp makes the file 0600, so the keys are never readable by others, not even briefly.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(e.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("jwtkeys: writing key file %s: %w", e.path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a successful rename or link there is nothing left to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if closeErr := tmp.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("jwtkeys: writing key file %s: %w", e.path, err)
	}
	if replace {
		err = os.Rename(tmpName, e.path)
	} else {
		// A hard link, unlike rename, fails when the target exists.
		err = os.Link(tmpName, e.path)
	}
	if err != nil {
		return fmt.Errorf("jwtkeys: writing key file %s: %w", e.path, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename durable. It is best effort: some platforms cannot sync a directory, and the
// file itself is already complete either way.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
