package secrets

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/envflag"
)

// Config configures the secrets service. Listen, KMS and DataDir are gantry settings (flags and
// GANTRY_* variables); the rest keep Confidant's environment variable names, read by LoadEnv, so an
// operator can move a Confidant env file over unchanged.
type Config struct {
	// Listen is the gRPC listen address.
	Listen string
	// KMS selects the key provider: "local" (keyring file in the data folder) or "aws".
	KMS string
	// Store selects the storage backend (GANTRY_STORE): "bolt" (a file in the data folder) or "etcd"
	// (Etcd, shared by several replicas).
	Store string
	Etcd  EtcdOptions
	// StoreProbeInterval is how often the store is probed; the service's gRPC health is NOT_SERVING
	// while the probe (bounded by StoreProbeTimeout) fails, so the gateway routes around it.
	StoreProbeInterval, StoreProbeTimeout time.Duration
	// BoltCheck runs bbolt's consistency check over the whole file at open (it reads every page:
	// seconds for gigabytes). The cheap checks (size, both meta pages) always run.
	BoltCheck bool

	// KMSMasterKey (KMS_MASTER_KEY) wraps the data keys of credentials.
	KMSMasterKey string
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
}

// DefaultConfig listens on loopback port 9090 with the local keyring and Confidant's defaults.
func DefaultConfig() Config {
	return Config{
		Listen:               "127.0.0.1:9090",
		KMS:                  "local",
		Store:                "bolt",
		Etcd:                 DefaultEtcdOptions(),
		StoreProbeInterval:   time.Second,
		StoreProbeTimeout:    time.Second,
		BoltCheck:            true,
		KMSMasterKey:         "alias/gantry-master",
		AWSRegion:            "us-east-1",
		KMSConnectionTimeout: time.Second,
		KMSReadTimeout:       time.Second,
		XSRFCookieName:       "XSRF-TOKEN",
		KMSAuthManageGrants:  true,
		DataKeyCacheSize:     4096,
		Limits:               DefaultLimits(),
		JWTEnvironments:      []string{"development"},
		RolesRefresh:         600 * time.Second,
		JWTDefaultExpiration: time.Hour,
		Certs:                DefaultCertConfig(),
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
		},
	}
}

// AddFlags registers the gantry settings on fs.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "secrets-listen", c.Listen, "gRPC listen address of the secrets service")
	fs.StringVar(&c.KMS, "kms", c.KMS, "key provider of the secrets service: local or aws")
	c.addStoreFlags(fs)
	fs.IntVar(&c.DataKeyCacheSize, "data-key-cache-size", c.DataKeyCacheSize, "decrypted data keys kept in memory")
	c.Limits.addFlags(fs)
	c.Certs.addFlags(fs)
}

// minSessionSecret is the shortest SESSION_SECRET accepted: 256 bits of a random string.
const minSessionSecret = 32

// Validate reports the first bad setting, by name.
func (c Config) Validate() error {
	if err := envflag.CheckHostPort("secrets-listen", c.Listen); err != nil {
		return err
	}
	if c.KMS != "local" && c.KMS != "aws" {
		return envflag.Invalid("kms", "%q is not local or aws", c.KMS)
	}
	switch c.Store {
	case "bolt":
	case "etcd":
		if err := c.validateEtcd(); err != nil {
			return err
		}
	default:
		return envflag.Invalid("store", "%q is not bolt or etcd", c.Store)
	}
	if c.StoreProbeInterval <= 0 {
		return envflag.Invalid("store-probe-interval", "must be positive, got %v", c.StoreProbeInterval)
	}
	if c.StoreProbeTimeout <= 0 {
		return envflag.Invalid("store-probe-timeout", "must be positive, got %v", c.StoreProbeTimeout)
	}
	if c.KMSMasterKey == "" {
		return fmt.Errorf("KMS_MASTER_KEY: must not be empty")
	}
	if c.DataKeyCacheSize < 1 {
		return envflag.Invalid("data-key-cache-size", "must be at least 1, got %d", c.DataKeyCacheSize)
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if c.HistoryPageLimit < 0 {
		return fmt.Errorf("HISTORY_PAGE_LIMIT: must not be negative, got %d", c.HistoryPageLimit)
	}
	switch c.Auth.UserAuthModule {
	case "null", "header", "saml", "oidc":
	default:
		return fmt.Errorf("USER_AUTH_MODULE: %q is not null, header, saml, oidc or google", c.Auth.UserAuthModule)
	}
	if c.Auth.UserAuthModule == "header" && (c.Auth.HeaderUsername == "" || c.Auth.HeaderEmail == "") {
		return fmt.Errorf("HEADER_AUTH_USERNAME_HEADER and HEADER_AUTH_EMAIL_HEADER: required with USER_AUTH_MODULE=header")
	}
	if c.Auth.AuthTokenMaxLifetime <= 0 {
		return fmt.Errorf("AUTH_TOKEN_MAX_LIFETIME: must be positive")
	}
	// The key signs every session cookie: a short one can be guessed offline from one cookie.
	if s := c.Auth.SessionSecret; s != "" && len(s) < minSessionSecret {
		return fmt.Errorf("SESSION_SECRET: must be at least %d bytes, got %d (or leave it unset: a random key is kept in session.key)", minSessionSecret, len(s))
	}
	switch c.ACLModule {
	case "", "default":
	case "policy":
		if c.ACLPolicyFile == "" {
			return fmt.Errorf("GANTRY_ACL_POLICY_FILE: required with ACL_MODULE=policy")
		}
	default:
		return fmt.Errorf("ACL_MODULE: %q is not default or policy", c.ACLModule)
	}
	if c.MaximumRotationDays < 0 {
		return fmt.Errorf("MAXIMUM_ROTATION_DAYS: must not be negative, got %d", c.MaximumRotationDays)
	}
	return c.Certs.validate()
}

// confidantBool parses a boolean the way Confidant does: "", "false", "False" and "0" are false,
// anything else is true.
func confidantBool(v string) bool {
	switch v {
	case "", "false", "False", "0":
		return false
	}
	return true
}

// LoadEnv reads Confidant's environment variables through lookup (os.LookupEnv in production). A bad
// value is an error naming the variable.
func (c *Config) LoadEnv(lookup func(string) (string, bool)) error {
	str := func(name string, dst *string) {
		if v, ok := lookup(name); ok {
			*dst = v
		}
	}
	boolean := func(name string, dst *bool) {
		if v, ok := lookup(name); ok {
			*dst = confidantBool(v)
		}
	}
	integer := func(name string, dst *int) error {
		if v, ok := lookup(name); ok && v != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("%s: %q is not an integer", name, v)
			}
			*dst = n
		}
		return nil
	}
	seconds := func(name string, dst *time.Duration) error {
		if v, ok := lookup(name); ok && v != "" {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f <= 0 {
				return fmt.Errorf("%s: %q is not a positive number of seconds", name, v)
			}
			*dst = time.Duration(f * float64(time.Second))
		}
		return nil
	}
	jsonValue := func(name string, dst any) error {
		if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
			if err := json.Unmarshal([]byte(v), dst); err != nil {
				return fmt.Errorf("%s: invalid JSON: %v", name, err)
			}
		}
		return nil
	}

	str("KMS_MASTER_KEY", &c.KMSMasterKey)
	str("KMS_URL", &c.KMSURL)
	str("AWS_DEFAULT_REGION", &c.AWSRegion)
	str("MAINTENANCE_MODE_TOUCH_FILE", &c.MaintenanceModeTouchFile)
	str("WEBHOOK_URL", &c.WebhookURL)
	str("WEBHOOK_USERNAME", &c.WebhookUsername)
	str("WEBHOOK_PASSWORD", &c.WebhookPassword)
	str("XSRF_COOKIE_NAME", &c.XSRFCookieName)
	boolean("MAINTENANCE_MODE", &c.MaintenanceMode)
	boolean("IGNORE_CONFLICTS", &c.IgnoreConflicts)
	boolean("ENFORCE_DOCUMENTATION", &c.EnforceDocumentation)
	boolean("ENABLE_SAVE_LAST_DECRYPTION_TIME", &c.EnableSaveLastDecryptionTime)
	boolean("KMS_AUTH_MANAGE_GRANTS", &c.KMSAuthManageGrants)
	for _, err := range []error{
		integer("HISTORY_PAGE_LIMIT", &c.HistoryPageLimit),
		integer("MAXIMUM_ROTATION_DAYS", &c.MaximumRotationDays),
		seconds("KMS_CONNECTION_TIMEOUT", &c.KMSConnectionTimeout),
		seconds("KMS_READ_TIMEOUT", &c.KMSReadTimeout),
		jsonValue("ROTATION_DAYS_CONFIG", &c.RotationDaysConfig),
		jsonValue("TAGS_EXCLUDING_ROTATION", &c.TagsExcludingRotation),
		jsonValue("CLIENT_CONFIG", &c.ClientConfig),
		jsonValue("SCOPED_AUTH_KEYS", &c.ScopedAuthKeys),
	} {
		if err != nil {
			return err
		}
	}
	if err := c.loadAuthEnv(lookup, str, boolean, integer); err != nil {
		return err
	}
	if err := c.Certs.loadEnv(lookup); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, account := range c.ScopedAuthKeys {
		if seen[account] {
			return fmt.Errorf("SCOPED_AUTH_KEYS: account %q is listed twice", account)
		}
		seen[account] = true
	}
	return nil
}

func (c *Config) loadAuthEnv(lookup func(string) (string, bool), str func(string, *string), boolean func(string, *bool), integer func(string, *int) error) error {
	str("ACL_MODULE", &c.ACLModule)
	if c.ACLModule == "confidant.authnz.rbac:default_acl" {
		c.ACLModule = "default"
	}
	str("GANTRY_ACL_POLICY_FILE", &c.ACLPolicyFile)
	str("JWT_CERTIFICATE_AUTHORITIES", &c.JWTCertificateAuthorities)
	str("JWT_ACTIVE_SIGNING_KEYS", &c.JWTActiveSigningKeys)
	if v, ok := lookup("GANTRY_JWT_ENVIRONMENTS"); ok {
		c.JWTEnvironments = nil
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" {
				c.JWTEnvironments = append(c.JWTEnvironments, e)
			}
		}
	}
	str("GANTRY_GRANT_ROLE_ARN_PREFIX", &c.GrantRoleARNPrefix)
	if v, ok := lookup("GANTRY_ROLES"); ok {
		c.Roles = nil
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				c.Roles = append(c.Roles, r)
			}
		}
	}
	var refresh int
	if err := integer("BACKGROUND_CACHE_IAM_ROLES_REFRESH_RATE", &refresh); err != nil {
		return err
	}
	if refresh > 0 {
		c.RolesRefresh = time.Duration(max(refresh, 60)) * time.Second
	}
	var jwtSeconds int
	if err := integer("JWT_DEFAULT_JWT_EXPIRATION_SECONDS", &jwtSeconds); err != nil {
		return err
	}
	if jwtSeconds > 0 {
		c.JWTDefaultExpiration = time.Duration(jwtSeconds) * time.Second
	}
	a := &c.Auth
	boolean("USE_AUTH", &a.UseAuth)
	boolean("GANTRY_SECURE_COOKIES", &a.SecureCookies)
	str("AUTH_CONTEXT", &a.AuthContext)
	str("AUTH_KEY", &a.AuthKey)
	str("USER_AUTH_KEY", &a.UserAuthKey)
	str("USER_AUTH_MODULE", &a.UserAuthModule)
	if a.UserAuthModule == "google" {
		a.UserAuthModule = "oidc"
	}
	str("HEADER_AUTH_USERNAME_HEADER", &a.HeaderUsername)
	str("HEADER_AUTH_EMAIL_HEADER", &a.HeaderEmail)
	str("HEADER_AUTH_FIRST_NAME_HEADER", &a.HeaderFirstName)
	str("HEADER_AUTH_LAST_NAME_HEADER", &a.HeaderLastName)
	str("SESSION_COOKIE_NAME", &a.SessionCookieName)
	str("SESSION_SECRET", &a.SessionSecret)
	str("SAML_CONFIDANT_URL_ROOT", &a.SAMLURLRoot)
	str("GANTRY_URL_ROOT", &a.SAMLURLRoot)
	str("SAML_IDP_ENTITY_ID", &a.SAMLIdPEntityID)
	str("SAML_IDP_SIGNON_URL", &a.SAMLIdPSSOURL)
	str("SAML_IDP_LOGOUT_URL", &a.SAMLIdPSLOURL)
	boolean("SAML_DEBUG", &a.SAMLDebug)
	boolean("SAML_SECURITY_ASSERTIONS_SIGNED", &a.SAMLWantAssertionsSigned)
	for name, dst := range map[string]*string{"SAML_SP_CERT": &a.SAMLSPCert, "SAML_SP_KEY": &a.SAMLSPKey, "SAML_IDP_CERT": &a.SAMLIdPCert} {
		str(name, dst)
		if file, ok := lookup(name + "_FILE"); ok && file != "" {
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("%s_FILE: %w", name, err)
			}
			*dst = string(data)
		}
	}
	str("OIDC_ISSUER_URL", &a.OIDCIssuerURL)
	str("GOOGLE_OAUTH_CLIENT_ID", &a.OIDCClientID)
	str("OIDC_CLIENT_ID", &a.OIDCClientID)
	str("GOOGLE_OAUTH_CONSUMER_SECRET", &a.OIDCClientSecret)
	str("OIDC_CLIENT_SECRET", &a.OIDCClientSecret)
	str("OIDC_REDIRECT_URL", &a.OIDCRedirectURL)
	str("GOOGLE_AUTH_EMAIL_SUFFIX", &a.UserEmailSuffix)
	str("USER_EMAIL_SUFFIX", &a.UserEmailSuffix)
	str("USERS_FILE", &a.UsersFile)
	if v, ok := lookup("KMS_AUTH_USER_TYPES"); ok {
		a.UserTypes = nil
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				a.UserTypes = append(a.UserTypes, t)
			}
		}
	}
	var minutes, life, maxLife int
	for _, err := range []error{
		integer("KMS_MINIMUM_TOKEN_VERSION", &a.MinTokenVersion),
		integer("KMS_MAXIMUM_TOKEN_VERSION", &a.MaxTokenVersion),
		integer("KMS_AUTH_TOKEN_CACHE_SIZE", &a.TokenCacheSize),
		integer("AUTH_TOKEN_MAX_LIFETIME", &minutes),
		integer("PERMANENT_SESSION_LIFETIME", &life),
		integer("MAX_PERMANENT_SESSION_LIFETIME", &maxLife),
	} {
		if err != nil {
			return err
		}
	}
	if minutes > 0 {
		a.AuthTokenMaxLifetime = time.Duration(minutes) * time.Minute
	}
	if life > 0 {
		a.PermanentSessionLifetime = time.Duration(life) * time.Second
	}
	if maxLife > 0 {
		a.MaxPermanentSessionLifetime = time.Duration(maxLife) * time.Second
	}
	return nil
}
