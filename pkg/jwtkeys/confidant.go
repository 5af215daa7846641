package jwtkeys

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// The names of Confidant's settings, used in errors and warnings so operators know which to fix.
const (
	SettingCertificateAuthorities = "JWT_CERTIFICATE_AUTHORITIES"
	SettingActiveSigningKeys      = "JWT_ACTIVE_SIGNING_KEYS"
)

// authorityEntry is one element of an environment's list in JWT_CERTIFICATE_AUTHORITIES.
type authorityEntry struct {
	Crt        string  `json:"crt"`
	Key        string  `json:"key"`
	Passphrase *string `json:"passphrase"`
	Kid        string  `json:"kid"`
}

// FromConfidantSettings returns a store with the keys of Confidant's JWT settings: authorities is
// JWT_CERTIFICATE_AUTHORITIES (base64 of a JSON object mapping environments to lists of
// {crt, key, passphrase, kid}) and activeKeys is JWT_ACTIVE_SIGNING_KEYS (a JSON object mapping
// environments to kids). Empty settings mean no keys.
//
// Like Confidant, a setting that cannot be decoded at all is an error, while an entry that cannot be
// used is skipped with a warning so one bad key does not take token issuing down; an environment
// whose active kid was skipped or never named stays known but cannot sign. The stored environments
// are read-only: Rotate refuses them.
func FromConfidantSettings(authorities, activeKeys string, logger *zap.Logger) (*Store, error) {
	s := newStore(logger)

	var envs map[string]json.RawMessage
	if raw := strings.TrimSpace(authorities); raw != "" {
		decoded, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return nil, fmt.Errorf("jwtkeys: %s is not valid base64: %w", SettingCertificateAuthorities, err)
		}
		if err := json.Unmarshal(decoded, &envs); err != nil {
			return nil, fmt.Errorf("jwtkeys: %s does not hold a JSON object: %w", SettingCertificateAuthorities, err)
		}
	}
	var active map[string]string
	if raw := strings.TrimSpace(activeKeys); raw != "" {
		if err := json.Unmarshal([]byte(raw), &active); err != nil {
			return nil, fmt.Errorf("jwtkeys: %s is not a JSON object of strings: %w", SettingActiveSigningKeys, err)
		}
	}

	for name, raw := range envs {
		log := s.logger.With(zap.String("setting", SettingCertificateAuthorities), zap.String("environment", name))
		if err := validateEnvironment(name); err != nil {
			log.Warn("skipping environment with invalid name")
			continue
		}
		var entries []json.RawMessage
		if err := json.Unmarshal(raw, &entries); err != nil {
			log.Warn("skipping environment whose value is not a list", zap.Error(err))
			continue
		}
		e := &environment{active: active[name]}
		for i, rawEntry := range entries {
			key, err := parseAuthorityEntry(rawEntry, e.keys)
			if err != nil {
				// The error never contains key material: it comes from this package or from
				// decoders that only report positions and types.
				log.Warn("skipping JWT key entry", zap.Int("index", i), zap.Error(err))
				continue
			}
			e.keys = append(e.keys, key)
		}
		switch {
		case e.active == "":
			log.Warn("environment has no active signing key and cannot sign tokens",
				zap.String("active_setting", SettingActiveSigningKeys))
		case e.activeKey() == nil:
			log.Warn("active signing key is not among the environment's usable keys; it cannot sign tokens",
				zap.String("active_setting", SettingActiveSigningKeys), zap.String("kid", e.active))
		}
		s.envs[name] = e
	}
	for name, kid := range active {
		if _, ok := s.envs[name]; !ok {
			s.logger.Warn("active signing key names an environment without keys; ignoring it",
				zap.String("setting", SettingActiveSigningKeys), zap.String("environment", name), zap.String("kid", kid))
		}
	}
	return s, nil
}

func parseAuthorityEntry(raw json.RawMessage, previous []storedKey) (storedKey, error) {
	var entry authorityEntry
	if err := json.Unmarshal(raw, &entry); err != nil {
		return storedKey{}, fmt.Errorf("entry is not an object of strings: %w", err)
	}
	if entry.Kid == "" {
		return storedKey{}, errors.New("entry has no kid")
	}
	if slices.ContainsFunc(previous, func(k storedKey) bool { return k.ID == entry.Kid }) {
		return storedKey{}, fmt.Errorf("duplicate kid %q", entry.Kid)
	}
	priv, err := parsePrivateKeyPEM(entry.Key, entry.Passphrase)
	if err != nil {
		return storedKey{}, fmt.Errorf("kid %q: key: %w", entry.Kid, err)
	}
	if entry.Crt != "" {
		if err := checkCertificate(entry.Crt, priv); err != nil {
			return storedKey{}, fmt.Errorf("kid %q: crt: %w", entry.Kid, err)
		}
	}
	key, err := newStoredKey(entry.Kid, priv, time.Time{})
	if err != nil {
		return storedKey{}, err
	}
	return key, nil
}

// parsePrivateKeyPEM accepts what Confidant's Python library loads for RSA: PKCS#1 or PKCS#8 PEM, and
// PKCS#1 PEM encrypted the legacy OpenSSL way ("Proc-Type: 4,ENCRYPTED").
func parsePrivateKeyPEM(text string, passphrase *string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	der := block.Bytes
	//lint:ignore SA1019 legacy PEM encryption is what Confidant deployments have; it is only read.
	if x509.IsEncryptedPEMBlock(block) {
		if passphrase == nil {
			return nil, errors.New("PEM block is encrypted but passphrase is null")
		}
		var err error
		//lint:ignore SA1019 legacy PEM encryption is what Confidant deployments have; it is only read.
		der, err = x509.DecryptPEMBlock(block, []byte(*passphrase))
		if err != nil {
			return nil, fmt.Errorf("decrypting PEM block: %w", err)
		}
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(der)
	case "PRIVATE KEY":
		parsed, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, err
		}
		priv, ok := parsed.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PKCS#8 key is a %T, not an RSA key", parsed)
		}
		return priv, nil
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("encrypted PKCS#8 keys are not supported; re-encrypt with legacy PEM encryption or store it unencrypted")
	default:
		return nil, fmt.Errorf("unsupported PEM block type %q", block.Type)
	}
}

// checkCertificate parses an entry's certificate and, since Confidant publishes the certificate's
// key, requires it to be the entry's key: otherwise clients would be given a key that does not
// verify the tokens.
func checkCertificate(text string, priv *rsa.PrivateKey) error {
	block, _ := pem.Decode([]byte(text))
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("no CERTIFICATE PEM block found")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return fmt.Errorf("certificate key is a %T, not an RSA key", cert.PublicKey)
	}
	if !pub.Equal(&priv.PublicKey) {
		return errors.New("certificate is not for the entry's private key")
	}
	return nil
}
