package secrets

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// CA types (CA_TYPE).
const (
	CATypeLocal = "local"
	CATypeACM   = "aws_acm_pca"
)

// Defaults of the per-CA settings, as in Confidant.
const (
	DefaultMaxValidityDays = 120
	DefaultCertCacheSize   = 1028
)

// CertConfig configures the certificate authorities and certificate issuance.
type CertConfig struct {
	// CAType (CA_TYPE) is "local" (gantry's default: CAs generated into the data folder, or loaded
	// from PEM files) or "aws_acm_pca" (AWS ACM Private CA, Confidant's default).
	CAType string
	// CAs are the CA names (-cas, GANTRY_CAS, Confidant's ACM_PRIVATE_CAS).
	CAs []string
	// KeyType of server-generated keys (-cert-key-type): rsa (2048 bits) or ecdsa (P-256).
	KeyType string
	// Intermediate (-ca-intermediate) gives each generated local CA a root and an issuing
	// intermediate, so certificate chains are real chains.
	Intermediate bool
	// ACMEndpoint (-acm-pca-url) overrides the ACM Private CA endpoint (VPC endpoints, tests).
	ACMEndpoint string
	// LocalDomainRegex and LocalMaxValidityDays (Confidant's CUSTOM_CA_DOMAIN_REGEX and
	// CUSTOM_CA_MAX_VALIDITY_DAYS) apply to every local CA that does not set its own.
	LocalDomainRegex     string
	LocalMaxValidityDays int
	// PerCA are the per-CA settings by name (Confidant's ACM_PRIVATE_CA_*_<NAME> variables and
	// GANTRY_CA_*_<NAME>); a CA absent here, and zero fields, take the defaults.
	PerCA map[string]CASettings
}

// CASettings are the settings of one CA.
type CASettings struct {
	// MaxValidityDays caps the validity of issued certificates (ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_<N>,
	// or CUSTOM_CA_MAX_VALIDITY_DAYS for every local CA); 0 means 120.
	MaxValidityDays int
	// DomainRegex (ACM_PRIVATE_CA_DOMAIN_REGEX_<N>, or CUSTOM_CA_DOMAIN_REGEX) lets a service get a
	// certificate whose CN it matches, anchored at the start, when the (?P<service_name>...) group
	// equals the service's name. Unset: services get no certificates from this CA.
	DomainRegex string
	// AllowWildcard and AllowIP (GANTRY_CA_ALLOW_WILDCARD_<N>, GANTRY_CA_ALLOW_IP_<N>) let the domain
	// rule grant services wildcard names (*.x) and IP addresses; off, they are refused.
	AllowWildcard, AllowIP bool
	// UseCache and CacheSize (ACM_PRIVATE_CA_CERTIFICATE_USE_CACHE_<N>, _CACHE_SIZE_<N>; default 1028)
	// keep server-generated certificates for identical requests of the same day.
	UseCache  bool
	CacheSize int
	// KeySize of server-generated RSA keys (ACM_PRIVATE_CA_KEY_SIZE_<N>): 2048 (default), 3072, 4096.
	KeySize int
	// KeyType overrides CertConfig.KeyType for this CA (GANTRY_CA_KEY_TYPE_<N>).
	KeyType string
	// Subject attributes of server-generated CSRs (ACM_PRIVATE_CA_CSR_COUNTRY_NAME_<N>,
	// _STATE_OR_PROVINCE_NAME_, _LOCALITY_NAME_, _ORGANIZATION_NAME_).
	Country, State, Locality, Organization string
	// ARN, SigningAlgorithm and TemplateARN of an ACM Private CA (ACM_PRIVATE_CA_ARN_<N>,
	// _SIGNING_ALGORITHM_<N>, _TEMPLATE_ARN_<N>).
	ARN, SigningAlgorithm, TemplateARN string
	// CertFile, KeyFile and ChainFile load a local CA from PEM files instead of generating one
	// (GANTRY_CA_CERT_FILE_<N>, GANTRY_CA_KEY_FILE_<N>, GANTRY_CA_CHAIN_FILE_<N>).
	CertFile, KeyFile, ChainFile string
}

// DefaultCertConfig is one generated local CA named "development" with an intermediate.
func DefaultCertConfig() CertConfig {
	return CertConfig{CAType: CATypeLocal, CAs: []string{"development"}, KeyType: ca.KeyRSA, Intermediate: true}
}

// Settings returns the settings of a CA with the defaults applied.
func (c CertConfig) Settings(name string) CASettings {
	s := c.PerCA[name]
	if c.CAType == CATypeLocal {
		if s.DomainRegex == "" {
			s.DomainRegex = c.LocalDomainRegex
		}
		if s.MaxValidityDays == 0 {
			s.MaxValidityDays = c.LocalMaxValidityDays
		}
	}
	if s.MaxValidityDays == 0 {
		s.MaxValidityDays = DefaultMaxValidityDays
	}
	if s.CacheSize == 0 {
		s.CacheSize = DefaultCertCacheSize
	}
	if s.KeySize == 0 {
		s.KeySize = ca.DefaultRSABits
	}
	if s.KeyType == "" {
		s.KeyType = c.KeyType
	}
	return s
}

var caNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// caEnv names the per-CA variable of prefix for the CA name, as errors show it.
func caEnv(prefix, name string) string { return settings.Family{Pattern: prefix}.EnvNames(name)[0] }

// validate reports the first bad certificate setting, by name.
func (c CertConfig) validate() error {
	if c.CAType != CATypeLocal && c.CAType != CATypeACM {
		return settings.Invalid("ca-type", "%q is not %s or %s (Confidant's custom_ca: use %s with GANTRY_CA_CERT_FILE_<NAME> and GANTRY_CA_KEY_FILE_<NAME>)",
			c.CAType, CATypeLocal, CATypeACM, CATypeLocal)
	}
	if c.KeyType != ca.KeyRSA && c.KeyType != ca.KeyECDSA {
		return settings.Invalid("cert-key-type", "%q is not rsa or ecdsa", c.KeyType)
	}
	if c.ACMEndpoint != "" {
		if u, err := url.Parse(c.ACMEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return settings.Invalid("acm-pca-url", "%q is not an http or https URL", c.ACMEndpoint)
		}
	}
	for i, name := range c.CAs {
		if !caNamePattern.MatchString(name) {
			return settings.Invalid("cas", "CA name %q: use letters, digits, '.', '_' and '-' (at most 64)", name)
		}
		if slices.Contains(c.CAs[:i], name) {
			return settings.Invalid("cas", "CA %q is listed twice", name)
		}
		s := c.Settings(name)
		env := func(prefix string) string { return caEnv(prefix, name) }
		switch {
		case s.MaxValidityDays < 1:
			return settings.Invalid(env("ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_"), "must be at least 1, got %d", s.MaxValidityDays)
		case s.CacheSize < 1:
			return settings.Invalid(env("ACM_PRIVATE_CA_CERTIFICATE_CACHE_SIZE_"), "must be at least 1, got %d", s.CacheSize)
		case s.KeySize != 2048 && s.KeySize != 3072 && s.KeySize != 4096:
			return settings.Invalid(env("ACM_PRIVATE_CA_KEY_SIZE_"), "%d is not 2048, 3072 or 4096", s.KeySize)
		case s.KeyType != ca.KeyRSA && s.KeyType != ca.KeyECDSA:
			return settings.Invalid(env("GANTRY_CA_KEY_TYPE_"), "%q is not rsa or ecdsa", s.KeyType)
		case c.CAType == CATypeACM && s.ARN == "":
			return settings.Invalid(env("ACM_PRIVATE_CA_ARN_"), "required with CA_TYPE=%s", CATypeACM)
		case c.CAType == CATypeLocal && (s.CertFile == "") != (s.KeyFile == ""):
			return settings.Invalid(env("GANTRY_CA_KEY_FILE_"), "set both it and %s, or neither", env("GANTRY_CA_CERT_FILE_"))
		}
		if s.DomainRegex != "" {
			if _, err := compileDomainRegex(s.DomainRegex); err != nil {
				return settings.Invalid(env("ACM_PRIVATE_CA_DOMAIN_REGEX_"), "%v", err)
			}
		}
	}
	return nil
}

// compileDomainRegex compiles a CA's name pattern anchored at both ends, and requires the
// service_name group the access check compares. Confidant used Python's re.match, anchored at the start
// only, so "svc.example.com.evil.org" passed a pattern for "svc.example.com": gantry diverges on purpose.
func compileDomainRegex(expr string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		return nil, err
	}
	if re.SubexpIndex("service_name") < 0 {
		return nil, fmt.Errorf("%q has no (?P<service_name>...) group", expr)
	}
	return re, nil
}
