package secrets

import (
	"time"

	"github.com/gantry-dev/gantry/pkg/settings"
	"github.com/gantry-dev/gantry/pkg/workload"
)

// Config configures the secrets service. Its settings are declared in settings.go: gantry's own as
// flags and GANTRY_* variables, Confidant's also under their environment names (given below), so an
// operator can move a Confidant env file over unchanged.
type Config struct {
	// Listen is the gRPC listen address.
	Listen string
	// KMS selects the key provider: "local" (keyring file in the data folder) or "aws".
	KMS string
	// Store selects the storage backend (GANTRY_STORE): "bolt" (a file in the data folder) or "etcd"
	// (shared by several replicas; its settings, package store/etcdstore's Options, are the process's:
	// internal/stack's Config.Etcd).
	Store string
	// StoreProbeInterval is how often the store is probed; the service's gRPC health is NOT_SERVING
	// while the probe (bounded by StoreProbeTimeout) fails, so the gateway routes around it.
	StoreProbeInterval, StoreProbeTimeout time.Duration
	// BoltCheck runs bbolt's consistency check over the whole file at open (it reads every page:
	// seconds for gigabytes). The cheap checks (size, both meta pages) always run.
	BoltCheck bool
	// WriteStallTimeout: a bbolt write that has not committed within it (a frozen or failing disk)
	// makes the store's health fail and writes answer 503 with Retry-After at once, until the commit
	// completes; a bbolt read that cannot begin within it (the file held by such a commit) answers 503
	// with Retry-After instead of waiting; 0 turns the detection off. On etcd, -etcd-request-timeout
	// bounds every call instead.
	WriteStallTimeout time.Duration

	// KMSMasterKey (KMS_MASTER_KEY) wraps the data keys of credentials.
	KMSMasterKey string
	// KeyringReloadInterval is how often the local keyring file is checked for a change (a version
	// staged, activated or retired on another replica and copied here, a Kubernetes Secret updated in
	// place); 0 reloads on SIGHUP only.
	KeyringReloadInterval time.Duration
	// SealedScanInterval is how often the revisions are counted by the key version that wraps them
	// (the secrets.sealed.* statistics; local keyring only); 0 never counts.
	SealedScanInterval time.Duration
	// KMSURL (KMS_URL) overrides the AWS KMS endpoint.
	KMSURL string
	// AWSRegion (AWS_DEFAULT_REGION) of the AWS KMS provider.
	AWSRegion string
	// KMSConnectionTimeout / KMSReadTimeout (KMS_CONNECTION_TIMEOUT, KMS_READ_TIMEOUT; seconds).
	KMSConnectionTimeout, KMSReadTimeout time.Duration

	// HistoryPageLimit (HISTORY_PAGE_LIMIT) forces paging of history listings; 0 = unpaged.
	HistoryPageLimit int
	// MaintenanceMode (MAINTENANCE_MODE) disables writes; so does the existence of
	// MaintenanceModeTouchFile (MAINTENANCE_MODE_TOUCH_FILE), checked per request.
	MaintenanceMode          bool
	MaintenanceModeTouchFile string
	// IgnoreConflicts (IGNORE_CONFLICTS) skips the credential-key conflict check.
	IgnoreConflicts bool
	// EnforceDocumentation (ENFORCE_DOCUMENTATION) makes documentation required on every write.
	EnforceDocumentation bool
	// MaximumRotationDays (MAXIMUM_ROTATION_DAYS), RotationDaysConfig (ROTATION_DAYS_CONFIG, JSON
	// tag→days) and TagsExcludingRotation (TAGS_EXCLUDING_ROTATION, JSON list) compute
	// next_rotation_date.
	MaximumRotationDays   int
	RotationDaysConfig    map[string]int
	TagsExcludingRotation []string
	// EnableSaveLastDecryptionTime (ENABLE_SAVE_LAST_DECRYPTION_TIME) records last_decrypted_date.
	EnableSaveLastDecryptionTime bool
	// WebhookURL, WebhookUsername, WebhookPassword (WEBHOOK_URL, ...) receive update events.
	WebhookURL, WebhookUsername, WebhookPassword string
	// ClientConfig (CLIENT_CONFIG, JSON object) is passed to clients verbatim.
	ClientConfig map[string]any
	// XSRFCookieName (XSRF_COOKIE_NAME) is reported in the client configuration.
	XSRFCookieName string
	// KMSAuthManageGrants (KMS_AUTH_MANAGE_GRANTS) is reported in the client configuration.
	KMSAuthManageGrants bool
	// ScopedAuthKeys (SCOPED_AUTH_KEYS, JSON key→account) lists the accounts services may be scoped to.
	ScopedAuthKeys map[string]string
	// DataKeyCacheSize bounds the cache of decrypted data keys (GANTRY_DATA_KEY_CACHE_SIZE).
	DataKeyCacheSize int

	// Limits bound credential and service sizes and each principal's write rate (config_limits.go).
	Limits Limits

	Auth AuthConfig

	// Certs configures the certificate authorities (see config_certs.go).
	Certs CertConfig

	// ACLModule (ACL_MODULE) selects the access-control rules: "default" (Confidant's role-based
	// rules; Confidant's module path is accepted too) or "policy" (the YAML file ACLPolicyFile,
	// GANTRY_ACL_POLICY_FILE).
	ACLModule     string
	ACLPolicyFile string

	// JWTEnvironments (GANTRY_JWT_ENVIRONMENTS, comma list) get signing keys generated into the data
	// folder; JWTCertificateAuthorities and JWTActiveSigningKeys (JWT_CERTIFICATE_AUTHORITIES,
	// JWT_ACTIVE_SIGNING_KEYS) load Confidant's configured keys instead; JWTDefaultExpiration
	// (JWT_DEFAULT_JWT_EXPIRATION_SECONDS) is the token lifetime.
	JWTEnvironments                                 []string
	JWTCertificateAuthorities, JWTActiveSigningKeys string
	JWTDefaultExpiration                            time.Duration

	// Roles (GANTRY_ROLES, comma list) is what GET /v1/roles lists with the local key provider; with
	// -kms=aws the roles come from IAM ListRoles, cached and refreshed every RolesRefresh
	// (BACKGROUND_CACHE_IAM_ROLES_REFRESH_RATE, seconds, at least 60).
	Roles        []string
	RolesRefresh time.Duration
	// GrantRoleARNPrefix (GANTRY_GRANT_ROLE_ARN_PREFIX, e.g. arn:aws:iam::123456789012:role/) names
	// the IAM role of a service in its AWS KMS grants.
	GrantRoleARNPrefix string
}

// AuthConfig holds Confidant's authentication settings.
type AuthConfig struct {
	// UseAuth (USE_AUTH): false lets every caller in as "unauthenticated user" (development only).
	UseAuth bool
	// AuthContext (AUTH_CONTEXT) is this server's kmsauth name: tokens must be addressed "to" it.
	AuthContext string
	// AuthKey (AUTH_KEY) and ScopedAuthKeys validate service tokens; UserAuthKey (USER_AUTH_KEY)
	// validates user tokens.
	AuthKey, UserAuthKey string
	// AuthTokenMaxLifetime (AUTH_TOKEN_MAX_LIFETIME, minutes) bounds a token's validity window.
	AuthTokenMaxLifetime time.Duration
	// MinTokenVersion, MaxTokenVersion (KMS_MINIMUM_TOKEN_VERSION, KMS_MAXIMUM_TOKEN_VERSION).
	MinTokenVersion, MaxTokenVersion int
	// UserTypes (KMS_AUTH_USER_TYPES) lists the accepted kmsauth user types.
	UserTypes []string
	// TokenCacheSize (KMS_AUTH_TOKEN_CACHE_SIZE) bounds the cache of validated tokens.
	TokenCacheSize int

	// UserAuthModule (USER_AUTH_MODULE) is the browser login: null (none), header, saml, oidc
	// (Confidant's "google" maps to oidc).
	UserAuthModule string
	// Header authentication (HEADER_AUTH_*_HEADER): trusted headers set by an authenticating proxy.
	HeaderUsername, HeaderEmail, HeaderFirstName, HeaderLastName string
	// SessionCookieName (SESSION_COOKIE_NAME) and SessionSecret (SESSION_SECRET; generated into the
	// data folder when unset) sign browser sessions; PermanentSessionLifetime and
	// MaxPermanentSessionLifetime (seconds) are the sliding and absolute session lifetimes.
	SessionCookieName                                     string
	SessionSecret                                         string
	PermanentSessionLifetime, MaxPermanentSessionLifetime time.Duration
	// SecureCookies marks session cookies Secure (GANTRY_SECURE_COOKIES; on behind TLS).
	SecureCookies bool
	// UserEmailSuffix (USER_EMAIL_SUFFIX or GOOGLE_AUTH_EMAIL_SUFFIX) and UsersFile (USERS_FILE, a YAML
	// list of emails) restrict which browser users may log in.
	UserEmailSuffix, UsersFile string

	// SAML (USER_AUTH_MODULE=saml): SAML_CONFIDANT_URL_ROOT, SAML_SP_CERT(_FILE), SAML_SP_KEY(_FILE),
	// SAML_IDP_ENTITY_ID, SAML_IDP_SIGNON_URL, SAML_IDP_LOGOUT_URL, SAML_IDP_CERT(_FILE), SAML_DEBUG,
	// SAML_SECURITY_ASSERTIONS_SIGNED.
	SAMLURLRoot, SAMLSPCert, SAMLSPKey, SAMLIdPEntityID, SAMLIdPSSOURL, SAMLIdPSLOURL, SAMLIdPCert string
	SAMLDebug, SAMLWantAssertionsSigned                                                            bool
	// OIDC (USER_AUTH_MODULE=oidc or google): OIDC_ISSUER_URL (default Google),
	// GOOGLE_OAUTH_CLIENT_ID / OIDC_CLIENT_ID, GOOGLE_OAUTH_CONSUMER_SECRET / OIDC_CLIENT_SECRET,
	// OIDC_REDIRECT_URL (default <SAML_CONFIDANT_URL_ROOT or GANTRY_URL_ROOT>/v1/login).
	OIDCIssuerURL, OIDCClientID, OIDCClientSecret, OIDCRedirectURL string

	// Workload client certificates (docs/authenticating-services.md): WorkloadCertCA names the CA whose
	// certificates identify services ("" turns them off) unless WorkloadCertCAFile gives the PEM of the
	// trusted CAs; a certificate names its service by the URI SAN
	// spiffe://<WorkloadTrustDomain>/service/<name>. WorkloadCertRevokedFile lists revoked serials.
	WorkloadCertCA, WorkloadCertCAFile, WorkloadTrustDomain, WorkloadCertRevokedFile string
	// WorkloadIdentityFile is a YAML file whose identities: section lists the trusted issuers of
	// workload tokens (Kubernetes service-account tokens, OIDC/JWT) and maps their claims to services.
	// Empty: the identities: section of -acl-policy-file, when there is one.
	WorkloadIdentityFile string
	// WorkloadJWKSTimeout bounds one fetch of a token issuer's keys (OIDC discovery and key set).
	WorkloadJWKSTimeout time.Duration
}

// flagWriteStallTimeout names the write stall timeout setting in messages.
const flagWriteStallTimeout = "store-write-stall-timeout"

// DefaultConfig listens on loopback port 9090 with the local keyring and Confidant's defaults.
func DefaultConfig() Config {
	return Config{
		Listen:                "127.0.0.1:9090",
		KMS:                   "local",
		Store:                 "bolt",
		StoreProbeInterval:    time.Second,
		KeyringReloadInterval: 30 * time.Second,
		SealedScanInterval:    15 * time.Minute,
		StoreProbeTimeout:     time.Second,
		BoltCheck:             true,
		WriteStallTimeout:     5 * time.Second,
		KMSMasterKey:          "alias/gantry-master",
		AWSRegion:             "us-east-1",
		KMSConnectionTimeout:  time.Second,
		KMSReadTimeout:        time.Second,
		XSRFCookieName:        "XSRF-TOKEN",
		KMSAuthManageGrants:   true,
		DataKeyCacheSize:      4096,
		Limits:                DefaultLimits(),
		JWTEnvironments:       []string{"development"},
		RolesRefresh:          600 * time.Second,
		JWTDefaultExpiration:  time.Hour,
		Certs:                 DefaultCertConfig(),
		Auth: AuthConfig{
			UseAuth:                     true,
			AuthContext:                 "gantry",
			AuthKey:                     "alias/gantry-auth",
			UserAuthKey:                 "alias/gantry-user-auth",
			AuthTokenMaxLifetime:        60 * time.Minute,
			MinTokenVersion:             1,
			MaxTokenVersion:             2,
			UserTypes:                   []string{"service", "user"},
			TokenCacheSize:              4096,
			UserAuthModule:              "null",
			SessionCookieName:           "confidant_session",
			PermanentSessionLifetime:    43200 * time.Second,
			MaxPermanentSessionLifetime: 86400 * time.Second,
			WorkloadCertCA:              "development",
			WorkloadTrustDomain:         "gantry.local",
			WorkloadJWKSTimeout:         workload.DefaultFetchTimeout,
		},
	}
}

// minSessionSecret is the shortest SESSION_SECRET accepted: 256 bits of a random string.
const minSessionSecret = 32

// Validate reports the first bad setting, by name.
func (c Config) Validate() error {
	if err := settings.CheckHostPort("secrets-listen", c.Listen); err != nil {
		return err
	}
	if c.KMS != "local" && c.KMS != "aws" {
		return settings.Invalid("kms", "%q is not local or aws", c.KMS)
	}
	if c.Store != "bolt" && c.Store != "etcd" {
		return settings.Invalid("store", "%q is not bolt or etcd", c.Store)
	}
	if c.KeyringReloadInterval < 0 {
		return settings.Invalid("keyring-reload-interval", "must be 0 (SIGHUP only) or positive, got %v", c.KeyringReloadInterval)
	}
	if c.SealedScanInterval < 0 {
		return settings.Invalid("sealed-scan-interval", "must be 0 (off) or positive, got %v", c.SealedScanInterval)
	}
	if c.StoreProbeInterval <= 0 {
		return settings.Invalid("store-probe-interval", "must be positive, got %v", c.StoreProbeInterval)
	}
	if c.StoreProbeTimeout <= 0 {
		return settings.Invalid("store-probe-timeout", "must be positive, got %v", c.StoreProbeTimeout)
	}
	if c.WriteStallTimeout < 0 || (c.WriteStallTimeout > 0 && c.WriteStallTimeout < 100*time.Millisecond) || c.WriteStallTimeout > time.Hour {
		return settings.Invalid(flagWriteStallTimeout, "must be 0 (off) or between 100ms and 1h, got %v", c.WriteStallTimeout)
	}
	if c.KMSMasterKey == "" {
		return settings.Invalid("kms-master-key", "must not be empty")
	}
	if c.DataKeyCacheSize < 1 {
		return settings.Invalid("data-key-cache-size", "must be at least 1, got %d", c.DataKeyCacheSize)
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if c.HistoryPageLimit < 0 {
		return settings.Invalid("history-page-limit", "must not be negative, got %d", c.HistoryPageLimit)
	}
	switch c.Auth.UserAuthModule {
	case "null", "header", "saml", "oidc":
	default:
		return settings.Invalid("user-auth-module", "%q is not null, header, saml, oidc or google", c.Auth.UserAuthModule)
	}
	if c.Auth.UserAuthModule == "header" && (c.Auth.HeaderUsername == "" || c.Auth.HeaderEmail == "") {
		name := "header-auth-username-header"
		if c.Auth.HeaderUsername != "" {
			name = "header-auth-email-header"
		}
		return settings.Invalid(name, "required with USER_AUTH_MODULE=header (both the username and the email header)")
	}
	if c.Auth.AuthTokenMaxLifetime <= 0 {
		return settings.Invalid("auth-token-max-lifetime", "must be positive")
	}
	if c.Auth.WorkloadJWKSTimeout <= 0 {
		return settings.Invalid("workload-jwks-timeout", "must be positive, got %v", c.Auth.WorkloadJWKSTimeout)
	}
	// The key signs every session cookie: a short one can be guessed offline from one cookie.
	if s := c.Auth.SessionSecret; s != "" && len(s) < minSessionSecret {
		return settings.Invalid("session-secret", "must be at least %d bytes, got %d (or leave it unset: a random key is kept in session.key)", minSessionSecret, len(s))
	}
	switch c.ACLModule {
	case "", "default":
	case "policy":
		if c.ACLPolicyFile == "" {
			return settings.Invalid("acl-policy-file", "required with ACL_MODULE=policy")
		}
	default:
		return settings.Invalid("acl-module", "%q is not default or policy", c.ACLModule)
	}
	if c.MaximumRotationDays < 0 {
		return settings.Invalid("maximum-rotation-days", "must not be negative, got %d", c.MaximumRotationDays)
	}
	seen := map[string]bool{}
	for _, account := range c.ScopedAuthKeys {
		if seen[account] {
			return settings.Invalid("scoped-auth-keys", "account %q is listed twice", account)
		}
		seen[account] = true
	}
	return c.Certs.validate()
}
