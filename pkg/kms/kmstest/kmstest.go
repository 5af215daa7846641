// Package kmstest is an in-memory fake of AWS KMS that speaks the real wire protocol (JSON 1.1 over
// HTTP), so tests run the production AWS SDK code — request signing, serialisation, error decoding and
// retries included — without an AWS account.
//
// It keeps the properties callers depend on: ciphertexts carry their key and are bound to the
// encryption context, and errors use AWS's codes and status. It does not check signatures or
// authorise callers; grants are recorded, not enforced.
package kmstest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/awstest"
)

// The fake's region and account, as they appear in its ARNs.
const (
	Region    = "us-east-1"
	AccountID = "111122223333"
)

const (
	arnPrefix     = "arn:aws:kms:" + Region + ":" + AccountID + ":"
	targetPrefix  = "TrentService."
	maxPlaintext  = 4096
	maxCiphertext = 6144
	maxRandom     = 1024
	uuidLen       = 36
	nonceSize     = 12
	// Fake ciphertext: format byte, key UUID, nonce, AES-GCM output. Real KMS blobs are opaque too, and
	// also name their key, which is why Decrypt needs no KeyId.
	blobFormat = 1
	blobHeader = 1 + uuidLen
)

// Grant is a grant as CreateGrant recorded it.
type Grant struct {
	GrantID           string
	KeyARN            string
	Name              string
	GranteePrincipal  string
	RetiringPrincipal string
	Operations        []string
	Constraints       GrantConstraints
	Created           time.Time
}

// GrantConstraints are a grant's encryption-context conditions.
type GrantConstraints struct {
	EncryptionContextSubset map[string]string `json:",omitempty"`
	EncryptionContextEquals map[string]string `json:",omitempty"`
}

// Server is a running fake KMS endpoint. Its methods are safe for concurrent use.
type Server struct {
	srv                  *httptest.Server
	*awstest.JSONService // dispatch, FailNext and Requests

	mu      sync.Mutex
	keys    map[string]*key   // by key UUID
	aliases map[string]string // "alias/name" → key UUID
}

type key struct {
	id      string
	arn     string
	created time.Time
	aead    cipher.AEAD
	grants  []*Grant
}

func validationError(format string, args ...any) *awstest.Error {
	return awstest.NewError(http.StatusBadRequest, "ValidationException", format, args...)
}

// NewServer starts a fake KMS with no keys. Close it when done.
func NewServer() *Server {
	s := &Server{
		keys:    map[string]*key{},
		aliases: map[string]string{},
	}
	s.JSONService = awstest.NewJSONService(&s.mu, targetPrefix, map[string]awstest.Operation{
		"GenerateRandom":  s.generateRandom,
		"Encrypt":         s.encrypt,
		"Decrypt":         s.decrypt,
		"GenerateDataKey": s.generateDataKey,
		"DescribeKey":     s.describeKey,
		"CreateGrant":     s.createGrant,
		"ListGrants":      s.listGrants,
		"RevokeGrant":     s.revokeGrant,
	})
	s.srv = httptest.NewServer(s.JSONService)
	return s
}

// URL is the endpoint to give the SDK (BaseEndpoint).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server; later requests fail to connect, as when KMS is unreachable.
func (s *Server) Close() { s.srv.Close() }

// CreateKey adds a symmetric encryption key, under alias unless alias is empty, and returns its ARN.
// It panics on a malformed or taken alias: that is a mistake in the test, not a condition to handle.
func (s *Server) CreateKey(alias string) string {
	material := make([]byte, 32)
	rand.Read(material)
	return s.CreateKeyWithMaterial(alias, awstest.RequestID(), material)
}

// CreateKeyWithMaterial adds a key with a given UUID and 32 bytes of AES-256 material, so the fake
// decrypts ciphertexts made elsewhere in its format (byte 1, the key UUID, a 12-byte nonce,
// AES-GCM with the key UUID and the JSON of the encryption context as additional data): data
// captured from another system's run (services/secrets/confidant/testdata). It panics on a bad
// alias, id or material, or a key id already present.
func (s *Server) CreateKeyWithMaterial(alias, id string, material []byte) string {
	if alias != "" && (!strings.HasPrefix(alias, "alias/") || alias == "alias/") {
		panic(fmt.Sprintf("kmstest: alias %q does not start with \"alias/\"", alias))
	}
	if !isUUID(id) || len(material) != 32 {
		panic("kmstest: a key needs a UUID and 32 bytes of material")
	}
	block, err := aes.NewCipher(material)
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	k := &key{id: id, arn: arnPrefix + "key/" + id, created: time.Now(), aead: aead}

	s.mu.Lock()
	defer s.mu.Unlock()
	if alias != "" {
		if _, taken := s.aliases[alias]; taken {
			panic(fmt.Sprintf("kmstest: alias %s already exists", alias))
		}
		s.aliases[alias] = id
	}
	if _, taken := s.keys[id]; taken {
		panic("kmstest: key " + id + " already exists")
	}
	s.keys[id] = k
	return k.arn
}

// Grants returns copies of the grants on a key, oldest first, or nil if the key does not exist.
func (s *Server) Grants(keyARN string) []Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, apiErr := s.findKey(keyARN, true)
	if apiErr != nil {
		return nil
	}
	out := make([]Grant, 0, len(k.grants))
	for _, g := range k.grants {
		out = append(out, copyGrant(g))
	}
	return out
}

func copyGrant(g *Grant) Grant {
	c := *g
	c.Operations = slices.Clone(g.Operations)
	c.Constraints.EncryptionContextSubset = maps.Clone(g.Constraints.EncryptionContextSubset)
	c.Constraints.EncryptionContextEquals = maps.Clone(g.Constraints.EncryptionContextEquals)
	return c
}

// findKey resolves what the caller sent as KeyId: a key UUID, key ARN, alias or alias ARN. Grant
// operations take only key ids and key ARNs, like real KMS, so allowAlias is false for them.
func (s *Server) findKey(ref string, allowAlias bool) (*key, *awstest.Error) {
	if ref == "" {
		return nil, validationError("1 validation error detected: Value null at 'keyId' failed to satisfy constraint: Member must not be null")
	}
	resource := ref
	if strings.HasPrefix(ref, "arn:") {
		rest, ok := strings.CutPrefix(ref, arnPrefix)
		if !ok {
			return nil, awstest.NewError(http.StatusBadRequest, "NotFoundException", "Invalid arn %s", ref)
		}
		resource = rest
	}
	if strings.HasPrefix(resource, "alias/") {
		if !allowAlias {
			return nil, validationError("KeyId must be a key ID or key ARN, not an alias: %s", ref)
		}
		id, ok := s.aliases[resource]
		if !ok {
			return nil, awstest.NewError(http.StatusBadRequest, "NotFoundException", "Alias %s%s is not found.", arnPrefix, resource)
		}
		return s.keys[id], nil
	}
	id := strings.TrimPrefix(resource, "key/")
	if !isUUID(id) {
		return nil, awstest.NewError(http.StatusBadRequest, "NotFoundException", "Invalid keyId '%s'", ref)
	}
	k, ok := s.keys[id]
	if !ok {
		return nil, awstest.NewError(http.StatusBadRequest, "NotFoundException", "Key '%skey/%s' does not exist", arnPrefix, id)
	}
	return k, nil
}

// aad binds a ciphertext to its key and encryption context. json.Marshal sorts map keys and quotes
// every string, so distinct contexts encode differently; nil and empty both encode to nothing, as
// KMS treats them alike.
func aad(keyID string, encryptionContext map[string]string) []byte {
	out := []byte(keyID)
	if len(encryptionContext) > 0 {
		ctx, _ := json.Marshal(encryptionContext)
		out = append(out, ctx...)
	}
	return out
}

func (k *key) seal(plaintext []byte, encryptionContext map[string]string) []byte {
	blob := make([]byte, blobHeader+nonceSize, blobHeader+nonceSize+len(plaintext)+k.aead.Overhead())
	blob[0] = blobFormat
	copy(blob[1:], k.id)
	nonce := blob[blobHeader:]
	rand.Read(nonce)
	return k.aead.Seal(blob, nonce, plaintext, aad(k.id, encryptionContext))
}

func isUUID(s string) bool {
	if len(s) != uuidLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

func epochSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

func (s *Server) generateRandom(body []byte) (any, *awstest.Error) {
	var in struct{ NumberOfBytes *int }
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if in.NumberOfBytes == nil || *in.NumberOfBytes < 1 || *in.NumberOfBytes > maxRandom {
		return nil, validationError("NumberOfBytes must be between 1 and %d", maxRandom)
	}
	b := make([]byte, *in.NumberOfBytes)
	rand.Read(b)
	return struct{ Plaintext []byte }{b}, nil
}

func (s *Server) encrypt(body []byte) (any, *awstest.Error) {
	var in struct {
		KeyId               string
		Plaintext           []byte
		EncryptionContext   map[string]string
		EncryptionAlgorithm string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if len(in.Plaintext) < 1 || len(in.Plaintext) > maxPlaintext {
		return nil, validationError("Plaintext must be between 1 and %d bytes long", maxPlaintext)
	}
	if in.EncryptionAlgorithm != "" && in.EncryptionAlgorithm != "SYMMETRIC_DEFAULT" {
		return nil, awstest.NewError(http.StatusBadRequest, "InvalidKeyUsageException", "%s is not supported by this fake", in.EncryptionAlgorithm)
	}
	k, e := s.findKey(in.KeyId, true)
	if e != nil {
		return nil, e
	}
	return struct {
		CiphertextBlob      []byte
		KeyId               string
		EncryptionAlgorithm string
	}{k.seal(in.Plaintext, in.EncryptionContext), k.arn, "SYMMETRIC_DEFAULT"}, nil
}

func (s *Server) decrypt(body []byte) (any, *awstest.Error) {
	var in struct {
		CiphertextBlob    []byte
		EncryptionContext map[string]string
		KeyId             string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if len(in.CiphertextBlob) < 1 || len(in.CiphertextBlob) > maxCiphertext {
		return nil, validationError("CiphertextBlob must be between 1 and %d bytes long", maxCiphertext)
	}
	invalid := awstest.NewError(http.StatusBadRequest, "InvalidCiphertextException",
		"kmstest: the ciphertext is malformed, was altered, or the encryption context does not match")
	blob := in.CiphertextBlob
	if len(blob) < blobHeader+nonceSize+16 || blob[0] != blobFormat || !isUUID(string(blob[1:blobHeader])) {
		return nil, invalid
	}
	id := string(blob[1:blobHeader])
	k, ok := s.keys[id]
	if !ok {
		return nil, awstest.NewError(http.StatusBadRequest, "NotFoundException", "Key '%skey/%s' does not exist", arnPrefix, id)
	}
	if in.KeyId != "" {
		want, e := s.findKey(in.KeyId, true)
		if e != nil {
			return nil, e
		}
		if want != k {
			return nil, awstest.NewError(http.StatusBadRequest, "IncorrectKeyException",
				"The key ID in the request does not identify a CMK that can perform this operation.")
		}
	}
	plaintext, err := k.aead.Open(nil, blob[blobHeader:blobHeader+nonceSize], blob[blobHeader+nonceSize:], aad(id, in.EncryptionContext))
	if err != nil {
		return nil, invalid
	}
	return struct {
		KeyId               string
		Plaintext           []byte
		EncryptionAlgorithm string
	}{k.arn, plaintext, "SYMMETRIC_DEFAULT"}, nil
}

func (s *Server) generateDataKey(body []byte) (any, *awstest.Error) {
	var in struct {
		KeyId             string
		EncryptionContext map[string]string
		KeySpec           string
		NumberOfBytes     *int
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	var n int
	switch {
	case in.KeySpec != "" && in.NumberOfBytes != nil:
		return nil, validationError("Please specify either number of bytes or key spec.")
	case in.KeySpec == "AES_256":
		n = 32
	case in.KeySpec == "AES_128":
		n = 16
	case in.KeySpec != "":
		return nil, validationError("Value '%s' at 'keySpec' failed to satisfy constraint: Member must satisfy enum value set: [AES_256, AES_128]", in.KeySpec)
	case in.NumberOfBytes != nil && *in.NumberOfBytes >= 1 && *in.NumberOfBytes <= maxRandom:
		n = *in.NumberOfBytes
	default:
		return nil, validationError("Please specify either number of bytes or key spec.")
	}
	k, e := s.findKey(in.KeyId, true)
	if e != nil {
		return nil, e
	}
	plaintext := make([]byte, n)
	rand.Read(plaintext)
	return struct {
		CiphertextBlob []byte
		Plaintext      []byte
		KeyId          string
	}{k.seal(plaintext, in.EncryptionContext), plaintext, k.arn}, nil
}

type keyMetadata struct {
	AWSAccountId          string
	KeyId                 string
	Arn                   string
	CreationDate          float64
	Enabled               bool
	Description           string
	KeyUsage              string
	KeyState              string
	Origin                string
	KeyManager            string
	KeySpec               string
	CustomerMasterKeySpec string
	EncryptionAlgorithms  []string
	MultiRegion           bool
}

func (s *Server) describeKey(body []byte) (any, *awstest.Error) {
	var in struct{ KeyId string }
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	k, e := s.findKey(in.KeyId, true)
	if e != nil {
		return nil, e
	}
	return struct{ KeyMetadata keyMetadata }{keyMetadata{
		AWSAccountId:          AccountID,
		KeyId:                 k.id,
		Arn:                   k.arn,
		CreationDate:          epochSeconds(k.created),
		Enabled:               true,
		KeyUsage:              "ENCRYPT_DECRYPT",
		KeyState:              "Enabled",
		Origin:                "AWS_KMS",
		KeyManager:            "CUSTOMER",
		KeySpec:               "SYMMETRIC_DEFAULT",
		CustomerMasterKeySpec: "SYMMETRIC_DEFAULT",
		EncryptionAlgorithms:  []string{"SYMMETRIC_DEFAULT"},
	}}, nil
}

var grantOperations = []string{
	"Decrypt", "Encrypt", "GenerateDataKey", "GenerateDataKeyWithoutPlaintext", "ReEncryptFrom", "ReEncryptTo",
	"Sign", "Verify", "GetPublicKey", "CreateGrant", "RetireGrant", "DescribeKey", "GenerateDataKeyPair",
	"GenerateDataKeyPairWithoutPlaintext", "GenerateMac", "VerifyMac", "DeriveSharedSecret",
}

func (s *Server) createGrant(body []byte) (any, *awstest.Error) {
	var in struct {
		KeyId             string
		GranteePrincipal  string
		RetiringPrincipal string
		Operations        []string
		Constraints       *GrantConstraints
		Name              string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if in.GranteePrincipal == "" {
		return nil, validationError("GranteePrincipal is required")
	}
	if len(in.Operations) == 0 {
		return nil, validationError("Operations is required")
	}
	for _, op := range in.Operations {
		if !slices.Contains(grantOperations, op) {
			return nil, validationError("Value '%s' in 'operations' is not a grant operation", op)
		}
	}
	k, e := s.findKey(in.KeyId, false)
	if e != nil {
		return nil, e
	}
	g := &Grant{
		KeyARN:            k.arn,
		Name:              in.Name,
		GranteePrincipal:  in.GranteePrincipal,
		RetiringPrincipal: in.RetiringPrincipal,
		Operations:        slices.Clone(in.Operations),
		Created:           time.Now(),
	}
	if in.Constraints != nil {
		g.Constraints = *in.Constraints
	}
	token := make([]byte, 48)
	rand.Read(token)
	// Real KMS makes a named CreateGrant idempotent: the same request returns the existing grant.
	if in.Name != "" {
		for _, old := range k.grants {
			if sameGrant(old, g) {
				return grantResponse(old.GrantID, token), nil
			}
		}
	}
	id := make([]byte, 32)
	rand.Read(id)
	g.GrantID = fmt.Sprintf("%x", id)
	k.grants = append(k.grants, g)
	return grantResponse(g.GrantID, token), nil
}

func grantResponse(grantID string, token []byte) any {
	return struct{ GrantId, GrantToken string }{grantID, base64.RawURLEncoding.EncodeToString(token)}
}

func sameGrant(a, b *Grant) bool {
	return a.Name == b.Name && a.GranteePrincipal == b.GranteePrincipal && a.RetiringPrincipal == b.RetiringPrincipal &&
		slices.Equal(a.Operations, b.Operations) &&
		maps.Equal(a.Constraints.EncryptionContextSubset, b.Constraints.EncryptionContextSubset) &&
		maps.Equal(a.Constraints.EncryptionContextEquals, b.Constraints.EncryptionContextEquals)
}

type grantEntry struct {
	KeyId             string
	GrantId           string
	Name              string `json:",omitempty"`
	CreationDate      float64
	GranteePrincipal  string
	RetiringPrincipal string `json:",omitempty"`
	IssuingAccount    string
	Operations        []string
	Constraints       *GrantConstraints `json:",omitempty"`
}

func (s *Server) listGrants(body []byte) (any, *awstest.Error) {
	var in struct {
		KeyId            string
		GrantId          string
		GranteePrincipal string
		Limit            *int
		Marker           string
	}
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	limit := 50
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > 100 {
			return nil, validationError("Limit must be between 1 and 100")
		}
		limit = *in.Limit
	}
	start := 0
	if in.Marker != "" {
		var err error
		if start, err = strconv.Atoi(in.Marker); err != nil || start < 0 {
			return nil, awstest.NewError(http.StatusBadRequest, "InvalidMarkerException", "invalid marker %q", in.Marker)
		}
	}
	k, e := s.findKey(in.KeyId, false)
	if e != nil {
		return nil, e
	}
	var matched []*Grant
	for _, g := range k.grants {
		if (in.GrantId == "" || g.GrantID == in.GrantId) && (in.GranteePrincipal == "" || g.GranteePrincipal == in.GranteePrincipal) {
			matched = append(matched, g)
		}
	}
	out := struct {
		Grants     []grantEntry
		NextMarker string `json:",omitempty"`
		Truncated  bool
	}{Grants: []grantEntry{}}
	for i := start; i < len(matched) && len(out.Grants) < limit; i++ {
		g := matched[i]
		entry := grantEntry{
			KeyId:             g.KeyARN,
			GrantId:           g.GrantID,
			Name:              g.Name,
			CreationDate:      epochSeconds(g.Created),
			GranteePrincipal:  g.GranteePrincipal,
			RetiringPrincipal: g.RetiringPrincipal,
			IssuingAccount:    "arn:aws:iam::" + AccountID + ":root",
			Operations:        g.Operations,
		}
		if len(g.Constraints.EncryptionContextSubset) > 0 || len(g.Constraints.EncryptionContextEquals) > 0 {
			entry.Constraints = &g.Constraints
		}
		out.Grants = append(out.Grants, entry)
	}
	if next := start + len(out.Grants); next < len(matched) {
		out.Truncated = true
		out.NextMarker = strconv.Itoa(next)
	}
	return out, nil
}

func (s *Server) revokeGrant(body []byte) (any, *awstest.Error) {
	var in struct{ KeyId, GrantId string }
	if e := awstest.Decode(body, &in); e != nil {
		return nil, e
	}
	if in.GrantId == "" {
		return nil, validationError("GrantId is required")
	}
	k, e := s.findKey(in.KeyId, false)
	if e != nil {
		return nil, e
	}
	i := slices.IndexFunc(k.grants, func(g *Grant) bool { return g.GrantID == in.GrantId })
	if i < 0 {
		return nil, awstest.NewError(http.StatusBadRequest, "NotFoundException", "Grant ID %s not found", in.GrantId)
	}
	k.grants = slices.Delete(k.grants, i, i+1)
	return struct{}{}, nil
}
