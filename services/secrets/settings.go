package secrets

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/settings"
)

// Groups of the secrets service's settings in -h and docs/configuration.md.
const (
	groupSecrets = "secrets"
	groupStorage = "storage"
	groupAuth    = "auth"
	groupCerts   = "certificates"
)

// Settings declares the secrets service's settings for the settings table. Confidant's settings keep
// their environment names as legacy names of a flag named after them, so a Confidant env file works
// unchanged; the per-CA ones are families of the CA names.
func (c *Config) Settings() settings.Part {
	a := &c.Auth
	return settings.Part{Settings: []settings.Setting{
		{Name: "secrets-listen", Group: groupSecrets, Value: settings.String(&c.Listen), Usage: "gRPC listen address of the secrets service"},
		{Name: "kms", Group: groupSecrets, Value: settings.String(&c.KMS), Usage: "key provider of the secrets service: local or aws"},
		{Name: "data-key-cache-size", Group: groupSecrets, Value: settings.Int(&c.DataKeyCacheSize), Usage: "decrypted data keys kept in memory"},
		{Name: "kms-master-key", Legacy: []string{"KMS_MASTER_KEY"}, Group: groupSecrets, Value: settings.String(&c.KMSMasterKey), Usage: "KMS key that wraps the data keys of credentials"},
		{Name: "keyring-reload-interval", Group: groupSecrets, Value: settings.Duration(&c.KeyringReloadInterval), Usage: "how often the local keyring file is re-read for key versions staged, activated or retired elsewhere (0: on SIGHUP only)"},
		{Name: "sealed-scan-interval", Group: groupSecrets, Value: settings.Duration(&c.SealedScanInterval), Usage: "how often credential revisions are counted by the master key version that wraps them (secrets.sealed.* stats; local keyring; 0: never)"},
		{Name: "kms-url", Legacy: []string{"KMS_URL"}, Group: groupSecrets, Value: settings.String(&c.KMSURL), Usage: "AWS KMS endpoint override (-kms=aws)"},
		{Name: "aws-default-region", Legacy: []string{"AWS_DEFAULT_REGION"}, Group: groupSecrets, Value: settings.String(&c.AWSRegion), Usage: "AWS region of KMS, IAM and ACM Private CA"},
		{Name: "kms-connection-timeout", Legacy: []string{"KMS_CONNECTION_TIMEOUT"}, Group: groupSecrets, Value: settings.Seconds(&c.KMSConnectionTimeout), Usage: "connect timeout of AWS KMS calls, in seconds"},
		{Name: "kms-read-timeout", Legacy: []string{"KMS_READ_TIMEOUT"}, Group: groupSecrets, Value: settings.Seconds(&c.KMSReadTimeout), Usage: "read timeout of AWS KMS calls, in seconds"},
		{Name: "history-page-limit", Legacy: []string{"HISTORY_PAGE_LIMIT"}, Group: groupSecrets, Value: settings.Int(&c.HistoryPageLimit), Usage: "page size of the history listings of every credential and service (/v1/archive/credentials, /v1/archive/services; 0: unpaged); one record's history is always whole, as in Confidant"},
		{Name: "maintenance-mode", Legacy: []string{"MAINTENANCE_MODE"}, Group: groupSecrets, Value: settings.ConfidantBool(&c.MaintenanceMode), Usage: "refuse every write"},
		{Name: "maintenance-mode-touch-file", Legacy: []string{"MAINTENANCE_MODE_TOUCH_FILE"}, Group: groupSecrets, Value: settings.String(&c.MaintenanceModeTouchFile), Usage: "refuse every write while this file exists (checked per request)"},
		{Name: "ignore-conflicts", Legacy: []string{"IGNORE_CONFLICTS"}, Group: groupSecrets, Value: settings.ConfidantBool(&c.IgnoreConflicts), Usage: "skip the check that a service's credentials have no key in common"},
		{Name: "enforce-documentation", Legacy: []string{"ENFORCE_DOCUMENTATION"}, Group: groupSecrets, Value: settings.ConfidantBool(&c.EnforceDocumentation), Usage: "every credential write must carry documentation"},
		{Name: "maximum-rotation-days", Legacy: []string{"MAXIMUM_ROTATION_DAYS"}, Group: groupSecrets, Value: settings.Int(&c.MaximumRotationDays), Usage: "days after which a credential is due for rotation (next_rotation_date; 0: never)"},
		{Name: "rotation-days-config", Legacy: []string{"ROTATION_DAYS_CONFIG"}, Group: groupSecrets, Value: settings.JSON(&c.RotationDaysConfig), Usage: "JSON object of tag to rotation days, overriding -maximum-rotation-days for tagged credentials"},
		{Name: "tags-excluding-rotation", Legacy: []string{"TAGS_EXCLUDING_ROTATION"}, Group: groupSecrets, Value: settings.JSON(&c.TagsExcludingRotation), Usage: "JSON list of tags whose credentials are never due for rotation"},
		{Name: "enable-save-last-decryption-time", Legacy: []string{"ENABLE_SAVE_LAST_DECRYPTION_TIME"}, Group: groupSecrets, Value: settings.ConfidantBool(&c.EnableSaveLastDecryptionTime), Usage: "record last_decrypted_date when a credential is read"},
		{Name: "webhook-url", Legacy: []string{"WEBHOOK_URL"}, Group: groupSecrets, Value: settings.String(&c.WebhookURL), Usage: "URL that receives an event on every credential and service update"},
		{Name: "webhook-username", Legacy: []string{"WEBHOOK_USERNAME"}, Group: groupSecrets, Value: settings.String(&c.WebhookUsername), Usage: "HTTP Basic user of the webhook"},
		{Name: "webhook-password", Legacy: []string{"WEBHOOK_PASSWORD"}, Group: groupSecrets, Value: settings.String(&c.WebhookPassword), Secret: true, Usage: "HTTP Basic password of the webhook"},
		{Name: "client-config", Legacy: []string{"CLIENT_CONFIG"}, Group: groupSecrets, Value: settings.JSON(&c.ClientConfig), Usage: "JSON object passed to clients verbatim in GET /v1/client_config"},
		{Name: "xsrf-cookie-name", Legacy: []string{"XSRF_COOKIE_NAME"}, Group: groupSecrets, Value: settings.String(&c.XSRFCookieName), Usage: "name of the XSRF cookie, reported in the client configuration"},
		{Name: "kms-auth-manage-grants", Legacy: []string{"KMS_AUTH_MANAGE_GRANTS"}, Group: groupSecrets, Value: settings.ConfidantBool(&c.KMSAuthManageGrants), Usage: "reported in the client configuration: the server manages KMS grants"},
		{Name: "scoped-auth-keys", Legacy: []string{"SCOPED_AUTH_KEYS"}, Group: groupSecrets, Value: settings.JSON(&c.ScopedAuthKeys), Usage: "JSON object of KMS key to account: the accounts services may be scoped to, each key validating its account's tokens"},
		{Name: "grant-role-arn-prefix", Group: groupSecrets, Value: settings.String(&c.GrantRoleARNPrefix), Usage: "IAM role ARN prefix of services in their AWS KMS grants (e.g. arn:aws:iam::123456789012:role/); unset: grants are not managed"},
		{Name: "roles", Group: groupSecrets, Value: settings.List(&c.Roles), Usage: "comma list GET /v1/roles answers with the local key provider (-kms=aws lists IAM roles)"},
		{Name: "roles-refresh", Legacy: []string{"BACKGROUND_CACHE_IAM_ROLES_REFRESH_RATE"}, Group: groupSecrets, Value: rolesRefresh(&c.RolesRefresh), Usage: "seconds between refreshes of the IAM roles list (-kms=aws; at least 60)"},
		{Name: "jwt-environments", Group: groupSecrets, Value: settings.List(&c.JWTEnvironments), Usage: "comma list of environments that get JWT signing keys generated into the data folder"},
		{Name: "jwt-certificate-authorities", Legacy: []string{"JWT_CERTIFICATE_AUTHORITIES"}, Group: groupSecrets, Value: settings.String(&c.JWTCertificateAuthorities), Secret: true, Usage: "Confidant's JWT signing keys (JSON, with private keys) instead of generated ones"},
		{Name: "jwt-active-signing-keys", Legacy: []string{"JWT_ACTIVE_SIGNING_KEYS"}, Group: groupSecrets, Value: settings.String(&c.JWTActiveSigningKeys), Usage: "Confidant's JSON object of environment to the active key id of -jwt-certificate-authorities"},
		{Name: "jwt-default-expiration", Legacy: []string{"JWT_DEFAULT_JWT_EXPIRATION_SECONDS"}, Group: groupSecrets, Value: settings.WholeUnits(&c.JWTDefaultExpiration, time.Second, "seconds"), Usage: "lifetime of issued JWTs in seconds"},
		{Name: flagMaxCredentialPairs, Group: groupSecrets, Value: settings.Int(&c.Limits.MaxCredentialPairs), Usage: "most key/value pairs in one credential (more: 400)"},
		{Name: flagMaxCredentialKeyBytes, Group: groupSecrets, Value: settings.Int(&c.Limits.MaxCredentialKeyBytes), Usage: "longest credential-pair key in bytes (longer: 400)"},
		{Name: flagMaxCredentialValueBytes, Group: groupSecrets, Value: settings.Int(&c.Limits.MaxCredentialValueBytes), Usage: "longest credential-pair value in bytes (longer: 400)"},
		{Name: flagMaxCredentialMetadataBytes, Group: groupSecrets, Value: settings.Int(&c.Limits.MaxCredentialMetadataBytes), Usage: "largest credential metadata: bytes of all its keys and values together (larger: 400)"},
		{Name: flagMaxServiceCredentials, Group: groupSecrets, Value: settings.Int(&c.Limits.MaxServiceCredentials), Usage: "most credentials one service maps, credentials and blind credentials together (more: 400)"},
		{Name: flagWriteRate, Group: groupSecrets, Value: settings.Float(&c.Limits.WriteRate), Usage: "writes per second one principal may make to the secrets service, per replica (more: 429 with Retry-After); 0 turns the limit off"},
		{Name: flagWriteBurst, Group: groupSecrets, Value: settings.Int(&c.Limits.WriteBurst), Usage: "writes one principal may make at once after being idle (the token bucket's size)"},
		{Name: flagWritePrincipals, Group: groupSecrets, Value: settings.JSON(&c.Limits.WritePrincipals), Usage: `JSON object giving named principals their own write allowance, e.g. {"service:deployer": {"rate": 200, "burst": 2000}, "user:ops@example.com": {"rate": 0}} (rate 0: no limit; burst 0: -write-burst)`},
		{Name: "store", Group: groupStorage, Value: settings.String(&c.Store), Usage: "storage backend of the secrets service: bolt or etcd"},
		{Name: "store-probe-interval", Group: groupStorage, Value: settings.Duration(&c.StoreProbeInterval), Usage: "how often the store is probed; gRPC health is NOT_SERVING while the probe fails"},
		{Name: "store-probe-timeout", Group: groupStorage, Value: settings.Duration(&c.StoreProbeTimeout), Usage: "how long one store probe may take"},
		{Name: flagWriteStallTimeout, Group: groupStorage, Value: settings.Duration(&c.WriteStallTimeout), Usage: "a bbolt write not committed within this (a stalled disk) fails the health checks and makes writes answer 503 with Retry-After until the commit completes; a read that cannot begin within it answers 503 too; 0 turns it off (etcd: -etcd-request-timeout bounds writes)"},
		{Name: "bolt-check", Group: groupStorage, Value: settings.Bool(&c.BoltCheck), Usage: "check the whole bbolt file for damage at start (reads every page; false skips it for very large files, the cheap header checks still run)"},
		{Name: "acl-module", Legacy: []string{"ACL_MODULE"}, Group: groupAuth, Value: aliased(&c.ACLModule, "confidant.authnz.rbac:default_acl", "default"), Usage: "access-control rules: default (Confidant's role-based rules) or policy (-acl-policy-file)"},
		{Name: "acl-policy-file", Group: groupAuth, Value: settings.String(&c.ACLPolicyFile), Usage: "YAML least-privilege policy file of -acl-module=policy"},
		{Name: "use-auth", Legacy: []string{"USE_AUTH"}, Group: groupAuth, Value: settings.ConfidantBool(&a.UseAuth), Usage: "false lets every caller in as \"unauthenticated user\" with full access (development only)"},
		{Name: "auth-context", Legacy: []string{"AUTH_CONTEXT"}, Group: groupAuth, Value: settings.String(&a.AuthContext), Usage: "this server's kmsauth name: tokens must be addressed to it"},
		{Name: "auth-key", Legacy: []string{"AUTH_KEY"}, Group: groupAuth, Value: settings.String(&a.AuthKey), Usage: "KMS key of service tokens"},
		{Name: "user-auth-key", Legacy: []string{"USER_AUTH_KEY"}, Group: groupAuth, Value: settings.String(&a.UserAuthKey), Usage: "KMS key of user tokens"},
		{Name: "auth-token-max-lifetime", Legacy: []string{"AUTH_TOKEN_MAX_LIFETIME"}, Group: groupAuth, Value: settings.WholeUnits(&a.AuthTokenMaxLifetime, time.Minute, "minutes"), Usage: "longest validity window of a kmsauth token, in minutes"},
		{Name: "kms-minimum-token-version", Legacy: []string{"KMS_MINIMUM_TOKEN_VERSION"}, Group: groupAuth, Value: settings.Int(&a.MinTokenVersion), Usage: "oldest kmsauth token version accepted"},
		{Name: "kms-maximum-token-version", Legacy: []string{"KMS_MAXIMUM_TOKEN_VERSION"}, Group: groupAuth, Value: settings.Int(&a.MaxTokenVersion), Usage: "newest kmsauth token version accepted"},
		{Name: "kms-auth-user-types", Legacy: []string{"KMS_AUTH_USER_TYPES"}, Group: groupAuth, Value: settings.List(&a.UserTypes), Usage: "comma list of accepted kmsauth user types"},
		{Name: "kms-auth-token-cache-size", Legacy: []string{"KMS_AUTH_TOKEN_CACHE_SIZE"}, Group: groupAuth, Value: settings.Int(&a.TokenCacheSize), Usage: "validated tokens kept in memory"},
		{Name: "workload-cert-ca", Group: groupAuth, Value: settings.String(&a.WorkloadCertCA), Usage: "CA (of -cas) whose client certificates identify services by their URI SAN spiffe://<workload-trust-domain>/service/<name>; empty: no client-certificate authentication"},
		{Name: "workload-cert-ca-file", Group: groupAuth, Value: settings.String(&a.WorkloadCertCAFile), Usage: "PEM CAs trusted for services' client certificates instead of -workload-cert-ca (an operator CA; a gateway in a process of its own)"},
		{Name: "workload-trust-domain", Group: groupAuth, Value: settings.String(&a.WorkloadTrustDomain), Usage: "trust domain of the SPIFFE IDs in services' client certificates"},
		{Name: "workload-cert-revoked-file", Group: groupAuth, Value: settings.String(&a.WorkloadCertRevokedFile), Usage: "file of revoked client-certificate serial numbers (hex, one a line), read again when it changes"},
		{Name: "workload-identity-file", Group: groupAuth, Value: settings.String(&a.WorkloadIdentityFile), Default: "-acl-policy-file", Usage: "YAML file whose identities: section trusts issuers of workload tokens (Kubernetes service accounts, OIDC/JWT) and maps their claims to services"},
		{Name: "workload-jwks-timeout", Group: groupAuth, Value: settings.Duration(&a.WorkloadJWKSTimeout), Usage: "longest fetch of a workload token issuer's keys (OIDC discovery and key set); a token whose key is cached never waits for one, a token naming a key the cache lacks waits at most this long"},
		{Name: "user-auth-module", Legacy: []string{"USER_AUTH_MODULE"}, Group: groupAuth, Value: aliased(&a.UserAuthModule, "google", "oidc"), Usage: "browser login: null, header, saml or oidc (Confidant's google is oidc)"},
		{Name: "header-auth-username-header", Legacy: []string{"HEADER_AUTH_USERNAME_HEADER"}, Group: groupAuth, Value: settings.String(&a.HeaderUsername), Usage: "trusted header with the user name (-user-auth-module=header)"},
		{Name: "header-auth-email-header", Legacy: []string{"HEADER_AUTH_EMAIL_HEADER"}, Group: groupAuth, Value: settings.String(&a.HeaderEmail), Usage: "trusted header with the email (-user-auth-module=header)"},
		{Name: "header-auth-first-name-header", Legacy: []string{"HEADER_AUTH_FIRST_NAME_HEADER"}, Group: groupAuth, Value: settings.String(&a.HeaderFirstName), Usage: "trusted header with the first name (-user-auth-module=header)"},
		{Name: "header-auth-last-name-header", Legacy: []string{"HEADER_AUTH_LAST_NAME_HEADER"}, Group: groupAuth, Value: settings.String(&a.HeaderLastName), Usage: "trusted header with the last name (-user-auth-module=header)"},
		{Name: "session-cookie-name", Legacy: []string{"SESSION_COOKIE_NAME"}, Group: groupAuth, Value: settings.String(&a.SessionCookieName), Usage: "name of the browser session cookie"},
		{Name: "session-secret", Legacy: []string{"SESSION_SECRET"}, Group: groupAuth, Value: settings.String(&a.SessionSecret), Secret: true, Default: "random, kept in <data-dir>/session.key", Usage: "key that signs browser sessions (at least 32 bytes)"},
		{Name: "permanent-session-lifetime", Legacy: []string{"PERMANENT_SESSION_LIFETIME"}, Group: groupAuth, Value: settings.WholeUnits(&a.PermanentSessionLifetime, time.Second, "seconds"), Usage: "sliding lifetime of a browser session, in seconds"},
		{Name: "max-permanent-session-lifetime", Legacy: []string{"MAX_PERMANENT_SESSION_LIFETIME"}, Group: groupAuth, Value: settings.WholeUnits(&a.MaxPermanentSessionLifetime, time.Second, "seconds"), Usage: "absolute lifetime of a browser session, in seconds"},
		{Name: "secure-cookies", Group: groupAuth, Value: settings.ConfidantBool(&a.SecureCookies), Usage: "mark session cookies Secure: for TLS terminated in front of gantry (automatic when -tls-cert-file serves HTTPS)"},
		{Name: "user-email-suffix", Legacy: []string{"USER_EMAIL_SUFFIX", "GOOGLE_AUTH_EMAIL_SUFFIX"}, Group: groupAuth, Value: settings.String(&a.UserEmailSuffix), Usage: "only browser users whose email ends with this may log in"},
		{Name: "users-file", Legacy: []string{"USERS_FILE"}, Group: groupAuth, Value: settings.String(&a.UsersFile), Usage: "YAML list of the emails that may log in with the browser"},
		{Name: "url-root", Legacy: []string{"SAML_CONFIDANT_URL_ROOT"}, Group: groupAuth, Value: settings.String(&a.SAMLURLRoot), Usage: "external URL of gantry, for SAML and OIDC redirects"},
		{Name: "saml-idp-entity-id", Legacy: []string{"SAML_IDP_ENTITY_ID"}, Group: groupAuth, Value: settings.String(&a.SAMLIdPEntityID), Usage: "entity id of the SAML identity provider"},
		{Name: "saml-idp-signon-url", Legacy: []string{"SAML_IDP_SIGNON_URL"}, Group: groupAuth, Value: settings.String(&a.SAMLIdPSSOURL), Usage: "single sign-on URL of the SAML identity provider"},
		{Name: "saml-idp-logout-url", Legacy: []string{"SAML_IDP_LOGOUT_URL"}, Group: groupAuth, Value: settings.String(&a.SAMLIdPSLOURL), Usage: "single logout URL of the SAML identity provider"},
		{Name: "saml-idp-cert", Legacy: []string{"SAML_IDP_CERT"}, Group: groupAuth, Value: settings.String(&a.SAMLIdPCert), Usage: "PEM certificate of the SAML identity provider"},
		{Name: "saml-idp-cert-file", Legacy: []string{"SAML_IDP_CERT_FILE"}, Group: groupAuth, Value: fileContents(&a.SAMLIdPCert), Usage: "file of -saml-idp-cert (wins over it)"},
		{Name: "saml-sp-cert", Legacy: []string{"SAML_SP_CERT"}, Group: groupAuth, Value: settings.String(&a.SAMLSPCert), Usage: "PEM certificate of gantry as SAML service provider"},
		{Name: "saml-sp-cert-file", Legacy: []string{"SAML_SP_CERT_FILE"}, Group: groupAuth, Value: fileContents(&a.SAMLSPCert), Usage: "file of -saml-sp-cert (wins over it)"},
		{Name: "saml-sp-key", Legacy: []string{"SAML_SP_KEY"}, Group: groupAuth, Value: settings.String(&a.SAMLSPKey), Secret: true, Usage: "PEM private key of -saml-sp-cert"},
		{Name: "saml-sp-key-file", Legacy: []string{"SAML_SP_KEY_FILE"}, Group: groupAuth, Value: fileContents(&a.SAMLSPKey), Usage: "file of -saml-sp-key (wins over it)"},
		{Name: "saml-debug", Legacy: []string{"SAML_DEBUG"}, Group: groupAuth, Value: settings.ConfidantBool(&a.SAMLDebug), Usage: "log SAML exchanges"},
		{Name: "saml-security-assertions-signed", Legacy: []string{"SAML_SECURITY_ASSERTIONS_SIGNED"}, Group: groupAuth, Value: settings.ConfidantBool(&a.SAMLWantAssertionsSigned), Usage: "require signed SAML assertions"},
		{Name: "oidc-issuer-url", Legacy: []string{"OIDC_ISSUER_URL"}, Group: groupAuth, Value: settings.String(&a.OIDCIssuerURL), Default: "Google's", Usage: "OpenID Connect issuer (-user-auth-module=oidc)"},
		{Name: "oidc-client-id", Legacy: []string{"OIDC_CLIENT_ID", "GOOGLE_OAUTH_CLIENT_ID"}, Group: groupAuth, Value: settings.String(&a.OIDCClientID), Usage: "OpenID Connect client id"},
		{Name: "oidc-client-secret", Legacy: []string{"OIDC_CLIENT_SECRET", "GOOGLE_OAUTH_CONSUMER_SECRET"}, Group: groupAuth, Value: settings.String(&a.OIDCClientSecret), Secret: true, Usage: "OpenID Connect client secret"},
		{Name: "oidc-redirect-url", Legacy: []string{"OIDC_REDIRECT_URL"}, Group: groupAuth, Value: settings.String(&a.OIDCRedirectURL), Default: "<url-root>/v1/login", Usage: "OpenID Connect redirect URL"},
		{Name: "cas", Legacy: []string{"ACM_PRIVATE_CAS"}, Group: groupCerts, Value: nonBlank(settings.List(&c.Certs.CAs)), Usage: "comma list of certificate authority names"},
		{Name: "ca-type", Legacy: []string{"CA_TYPE"}, Group: groupCerts, Value: nonBlank(settings.String(&c.Certs.CAType)), Usage: "local (CAs generated into the data folder, or loaded from PEM files) or aws_acm_pca (AWS ACM Private CA)"},
		{Name: "cert-key-type", Group: groupCerts, Value: settings.String(&c.Certs.KeyType), Usage: "key type of server-generated certificate keys: rsa or ecdsa"},
		{Name: "ca-intermediate", Group: groupCerts, Value: settings.Bool(&c.Certs.Intermediate), Usage: "generated local CAs get a root and an issuing intermediate"},
		{Name: "acm-pca-url", Group: groupCerts, Value: settings.String(&c.Certs.ACMEndpoint), Usage: "ACM Private CA endpoint override (CA_TYPE=aws_acm_pca)"},
		{Name: "custom-ca-domain-regex", Legacy: []string{"CUSTOM_CA_DOMAIN_REGEX"}, Group: groupCerts, Value: settings.String(&c.Certs.LocalDomainRegex), Usage: "domain rule of every local CA without its own ACM_PRIVATE_CA_DOMAIN_REGEX_<CA>"},
		{Name: "custom-ca-max-validity-days", Legacy: []string{"CUSTOM_CA_MAX_VALIDITY_DAYS"}, Group: groupCerts, Value: settings.Int(&c.Certs.LocalMaxValidityDays), Usage: "validity cap of every local CA without its own ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_<CA> (0: 120)"},
	}, Families: c.Certs.families()}
}

// caFamily declares one per-CA variable, whose value set stores into the CA's settings.
func (c *CertConfig) caFamily(pattern, kind, usage string, set func(*CASettings, string) error) settings.Family {
	return settings.Family{Pattern: pattern + "<CA>", Group: groupCerts, Kind: kind, Usage: usage,
		Instances: func() []string { return c.CAs },
		Set: func(name, v string) error {
			if c.PerCA == nil {
				c.PerCA = map[string]CASettings{}
			}
			s := c.PerCA[name]
			if err := set(&s, v); err != nil {
				return err
			}
			c.PerCA[name] = s
			return nil
		}}
}

// families declares the per-CA variables. <CA> is the name upper-cased; a name with characters a
// shell cannot put in a variable (my-ca) may also be written with "_" (MY_CA).
func (c *CertConfig) families() []settings.Family {
	str := func(field func(*CASettings) *string) func(*CASettings, string) error {
		return func(s *CASettings, v string) error { *field(s) = v; return nil }
	}
	integer := func(field func(*CASettings) *int) func(*CASettings, string) error {
		return func(s *CASettings, v string) error { return settings.Int(field(s)).Set(v) }
	}
	boolean := func(field func(*CASettings) *bool) func(*CASettings, string) error {
		return func(s *CASettings, v string) error { return settings.ConfidantBool(field(s)).Set(v) }
	}
	return []settings.Family{
		c.caFamily("ACM_PRIVATE_CA_DOMAIN_REGEX_", "regexp", "a service gets certificates of this CA whose names this pattern matches in full, with its (?P<service_name>...) group equal to the service's name; unset: none", str(func(s *CASettings) *string { return &s.DomainRegex })),
		c.caFamily("ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_", "int", "longest validity of issued certificates, in days (default 120)", integer(func(s *CASettings) *int { return &s.MaxValidityDays })),
		c.caFamily("ACM_PRIVATE_CA_CERTIFICATE_USE_CACHE_", "bool", "keep server-generated certificates for identical requests of the same day", boolean(func(s *CASettings) *bool { return &s.UseCache })),
		c.caFamily("ACM_PRIVATE_CA_CERTIFICATE_CACHE_SIZE_", "int", "certificates that cache keeps (default 1028)", integer(func(s *CASettings) *int { return &s.CacheSize })),
		c.caFamily("ACM_PRIVATE_CA_KEY_SIZE_", "int", "bits of server-generated RSA keys: 2048 (default), 3072 or 4096", integer(func(s *CASettings) *int { return &s.KeySize })),
		c.caFamily("ACM_PRIVATE_CA_CSR_COUNTRY_NAME_", "string", "country of server-generated CSRs", str(func(s *CASettings) *string { return &s.Country })),
		c.caFamily("ACM_PRIVATE_CA_CSR_STATE_OR_PROVINCE_NAME_", "string", "state or province of server-generated CSRs", str(func(s *CASettings) *string { return &s.State })),
		c.caFamily("ACM_PRIVATE_CA_CSR_LOCALITY_NAME_", "string", "locality of server-generated CSRs", str(func(s *CASettings) *string { return &s.Locality })),
		c.caFamily("ACM_PRIVATE_CA_CSR_ORGANIZATION_NAME_", "string", "organization of server-generated CSRs", str(func(s *CASettings) *string { return &s.Organization })),
		c.caFamily("ACM_PRIVATE_CA_ARN_", "string", "ARN of the ACM Private CA (required with -ca-type=aws_acm_pca)", str(func(s *CASettings) *string { return &s.ARN })),
		c.caFamily("ACM_PRIVATE_CA_SIGNING_ALGORITHM_", "string", "signing algorithm asked of ACM Private CA", str(func(s *CASettings) *string { return &s.SigningAlgorithm })),
		c.caFamily("ACM_PRIVATE_CA_TEMPLATE_ARN_", "string", "certificate template ARN asked of ACM Private CA", str(func(s *CASettings) *string { return &s.TemplateARN })),
		c.caFamily("GANTRY_CA_KEY_TYPE_", "string", "key type of this CA's server-generated keys, overriding -cert-key-type", str(func(s *CASettings) *string { return &s.KeyType })),
		c.caFamily("GANTRY_CA_CERT_FILE_", "string", "PEM certificate of a local CA loaded instead of generated (with GANTRY_CA_KEY_FILE_<CA>)", str(func(s *CASettings) *string { return &s.CertFile })),
		c.caFamily("GANTRY_CA_KEY_FILE_", "string", "PEM private key of GANTRY_CA_CERT_FILE_<CA>", str(func(s *CASettings) *string { return &s.KeyFile })),
		c.caFamily("GANTRY_CA_CHAIN_FILE_", "string", "PEM chain above GANTRY_CA_CERT_FILE_<CA>", str(func(s *CASettings) *string { return &s.ChainFile })),
		c.caFamily("GANTRY_CA_ALLOW_WILDCARD_", "bool", "the domain rule may grant services wildcard names (*.x)", boolean(func(s *CASettings) *bool { return &s.AllowWildcard })),
		c.caFamily("GANTRY_CA_ALLOW_IP_", "bool", "the domain rule may grant services IP addresses", boolean(func(s *CASettings) *bool { return &s.AllowIP })),
	}
}

// aliased is a string setting that also accepts Confidant's spelling of one value.
func aliased(p *string, confidant, gantry string) settings.Value {
	return settings.Func("string", func() string { return *p }, func(v string) error {
		if v == confidant {
			v = gantry
		}
		*p = v
		return nil
	})
}

// nonBlank ignores an empty value, as Confidant did for CA_TYPE and ACM_PRIVATE_CAS.
func nonBlank(v settings.Value) settings.Value {
	return settings.Func(v.Kind(), v.String, func(s string) error {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		return v.Set(s)
	})
}

// fileContents reads a file named by the setting into *p (Confidant's *_FILE variables).
func fileContents(p *string) settings.Value {
	return settings.Func("file", func() string { return "" }, func(path string) error {
		if path == "" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		*p = string(data)
		return nil
	})
}

// rolesRefresh is Confidant's whole number of seconds between IAM role refreshes: 0 or less keeps the
// default, less than a minute is a minute.
func rolesRefresh(p *time.Duration) settings.Value {
	var seconds time.Duration
	whole := settings.WholeUnits(&seconds, time.Second, "seconds")
	return settings.Func("seconds", func() string { return fmt.Sprint(int64(*p / time.Second)) }, func(v string) error {
		if err := whole.Set(v); err != nil {
			return err
		}
		if seconds > 0 {
			*p = max(seconds, time.Minute)
		}
		return nil
	})
}
