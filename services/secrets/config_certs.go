package secrets

import (
	"flag"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/envflag"
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
	// CAs are the CA names (-cas, GANTRY_CAS; Confidant's ACM_PRIVATE_CAS wins when set).
	CAs []string
	// KeyType of server-generated keys (-cert-key-type): rsa (2048 bits) or ecdsa (P-256).
	KeyType string
	// Intermediate (-ca-intermediate) gives each generated local CA a root and an issuing
	// intermediate, so certificate chains are real chains.
	Intermediate bool
	// ACMEndpoint (-acm-pca-url) overrides the ACM Private CA endpoint (VPC endpoints, tests).
	ACMEndpoint string
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

func (c *CertConfig) addFlags(fs *flag.FlagSet) {
	fs.Func("cas", "comma list of certificate authority names (default "+strings.Join(c.CAs, ",")+")", func(v string) error {
		c.CAs = splitList(v)
		return nil
	})
	fs.StringVar(&c.KeyType, "cert-key-type", c.KeyType, "key type of server-generated certificate keys: rsa or ecdsa")
	fs.BoolVar(&c.Intermediate, "ca-intermediate", c.Intermediate, "generated local CAs get a root and an issuing intermediate")
	fs.StringVar(&c.ACMEndpoint, "acm-pca-url", c.ACMEndpoint, "ACM Private CA endpoint override (CA_TYPE=aws_acm_pca)")
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var caNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// caEnvSuffix is the suffix of a CA's per-CA variables: Confidant upper-cases the name; characters
// a shell cannot put in a variable name are also accepted as "_".
func caEnvNames(prefix, name string) []string {
	upper := strings.ToUpper(name)
	safe := strings.Map(func(r rune) rune {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			return r
		}
		return '_'
	}, upper)
	if safe == upper {
		return []string{prefix + upper}
	}
	return []string{prefix + upper, prefix + safe}
}

// loadEnv reads CA_TYPE, ACM_PRIVATE_CAS and the per-CA variables of every named CA.
func (c *CertConfig) loadEnv(lookup func(string) (string, bool)) error {
	if v, ok := lookup("CA_TYPE"); ok && v != "" {
		c.CAType = v
	}
	if v, ok := lookup("ACM_PRIVATE_CAS"); ok && strings.TrimSpace(v) != "" {
		c.CAs = splitList(v)
	}
	var defaults CASettings
	if c.CAType == CATypeLocal {
		defaults.DomainRegex, _ = lookup("CUSTOM_CA_DOMAIN_REGEX")
		if v, ok := lookup("CUSTOM_CA_MAX_VALIDITY_DAYS"); ok && v != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("CUSTOM_CA_MAX_VALIDITY_DAYS: %q is not an integer", v)
			}
			defaults.MaxValidityDays = n
		}
	}
	for _, name := range c.CAs {
		s := defaults
		if old, ok := c.PerCA[name]; ok {
			s = old
		}
		get := func(prefix string) (string, string, bool) {
			for _, env := range caEnvNames(prefix, name) {
				if v, ok := lookup(env); ok {
					return env, v, true
				}
			}
			return "", "", false
		}
		str := func(prefix string, dst *string) {
			if _, v, ok := get(prefix); ok {
				*dst = v
			}
		}
		integer := func(prefix string, dst *int) error {
			if env, v, ok := get(prefix); ok && v != "" {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					return fmt.Errorf("%s: %q is not an integer", env, v)
				}
				*dst = n
			}
			return nil
		}
		str("ACM_PRIVATE_CA_DOMAIN_REGEX_", &s.DomainRegex)
		str("ACM_PRIVATE_CA_ARN_", &s.ARN)
		str("ACM_PRIVATE_CA_SIGNING_ALGORITHM_", &s.SigningAlgorithm)
		str("ACM_PRIVATE_CA_TEMPLATE_ARN_", &s.TemplateARN)
		str("ACM_PRIVATE_CA_CSR_COUNTRY_NAME_", &s.Country)
		str("ACM_PRIVATE_CA_CSR_STATE_OR_PROVINCE_NAME_", &s.State)
		str("ACM_PRIVATE_CA_CSR_LOCALITY_NAME_", &s.Locality)
		str("ACM_PRIVATE_CA_CSR_ORGANIZATION_NAME_", &s.Organization)
		str("GANTRY_CA_KEY_TYPE_", &s.KeyType)
		str("GANTRY_CA_CERT_FILE_", &s.CertFile)
		str("GANTRY_CA_KEY_FILE_", &s.KeyFile)
		str("GANTRY_CA_CHAIN_FILE_", &s.ChainFile)
		if _, v, ok := get("GANTRY_CA_ALLOW_WILDCARD_"); ok {
			s.AllowWildcard = confidantBool(v)
		}
		if _, v, ok := get("GANTRY_CA_ALLOW_IP_"); ok {
			s.AllowIP = confidantBool(v)
		}
		if _, v, ok := get("ACM_PRIVATE_CA_CERTIFICATE_USE_CACHE_"); ok {
			s.UseCache = confidantBool(v)
		}
		for _, err := range []error{
			integer("ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_", &s.MaxValidityDays),
			integer("ACM_PRIVATE_CA_CERTIFICATE_CACHE_SIZE_", &s.CacheSize),
			integer("ACM_PRIVATE_CA_KEY_SIZE_", &s.KeySize),
		} {
			if err != nil {
				return err
			}
		}
		if c.PerCA == nil {
			c.PerCA = map[string]CASettings{}
		}
		c.PerCA[name] = s
	}
	return nil
}

// validate reports the first bad certificate setting, by name.
func (c CertConfig) validate() error {
	if c.CAType != CATypeLocal && c.CAType != CATypeACM {
		return fmt.Errorf("CA_TYPE: %q is not %s or %s (Confidant's custom_ca: use %s with GANTRY_CA_CERT_FILE_<NAME> and GANTRY_CA_KEY_FILE_<NAME>)",
			c.CAType, CATypeLocal, CATypeACM, CATypeLocal)
	}
	if c.KeyType != ca.KeyRSA && c.KeyType != ca.KeyECDSA {
		return envflag.Invalid("cert-key-type", "%q is not rsa or ecdsa", c.KeyType)
	}
	if c.ACMEndpoint != "" {
		if u, err := url.Parse(c.ACMEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return envflag.Invalid("acm-pca-url", "%q is not an http or https URL", c.ACMEndpoint)
		}
	}
	for i, name := range c.CAs {
		if !caNamePattern.MatchString(name) {
			return envflag.Invalid("cas", "CA name %q: use letters, digits, '.', '_' and '-' (at most 64)", name)
		}
		if slices.Contains(c.CAs[:i], name) {
			return envflag.Invalid("cas", "CA %q is listed twice", name)
		}
		s := c.Settings(name)
		env := func(prefix string) string { return caEnvNames(prefix, name)[0] }
		switch {
		case s.MaxValidityDays < 1:
			return fmt.Errorf("%s: must be at least 1, got %d", env("ACM_PRIVATE_CA_MAX_VALIDITY_DAYS_"), s.MaxValidityDays)
		case s.CacheSize < 1:
			return fmt.Errorf("%s: must be at least 1, got %d", env("ACM_PRIVATE_CA_CERTIFICATE_CACHE_SIZE_"), s.CacheSize)
		case s.KeySize != 2048 && s.KeySize != 3072 && s.KeySize != 4096:
			return fmt.Errorf("%s: %d is not 2048, 3072 or 4096", env("ACM_PRIVATE_CA_KEY_SIZE_"), s.KeySize)
		case s.KeyType != ca.KeyRSA && s.KeyType != ca.KeyECDSA:
			return fmt.Errorf("%s: %q is not rsa or ecdsa", env("GANTRY_CA_KEY_TYPE_"), s.KeyType)
		case c.CAType == CATypeACM && s.ARN == "":
			return fmt.Errorf("%s: required with CA_TYPE=%s", env("ACM_PRIVATE_CA_ARN_"), CATypeACM)
		case c.CAType == CATypeLocal && (s.CertFile == "") != (s.KeyFile == ""):
			return fmt.Errorf("%s and %s: set both or neither", env("GANTRY_CA_CERT_FILE_"), env("GANTRY_CA_KEY_FILE_"))
		}
		if s.DomainRegex != "" {
			if _, err := compileDomainRegex(s.DomainRegex); err != nil {
				return fmt.Errorf("%s: %v", env("ACM_PRIVATE_CA_DOMAIN_REGEX_"), err)
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
