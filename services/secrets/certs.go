package secrets

import (
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/workload"
)

// Limits on a certificate request, so one request cannot ask for unbounded work.
const (
	maxCommonNameLen = 64 // X.509's upper bound for a common name
	maxSANs          = 100
	// issueTimeout bounds one shared issuance: it runs detached from the first caller's context so
	// that caller going away does not fail everybody waiting on the same request.
	issueTimeout = 2 * time.Minute
)

// CAView is a certificate authority as responses show it.
type CAView struct {
	Name        string
	Certificate string
	Chain       string
	Tags        map[string]string
}

// CertificateRequest is GET /v1/certificates/{ca}/{cn}: the server generates the key.
type CertificateRequest struct {
	CA, CN string
	SANs   []string
	// ValidityDays: 0 means the CA's maximum; more than the maximum is capped.
	ValidityDays int
	// KeyType: "" for the CA's default, rsa or ecdsa.
	KeyType string
}

// IssuedCertificate is an issued certificate; Key is set only when the server generated the key.
type IssuedCertificate struct {
	Certificate, Chain, Key string
}

// certAuthority is one configured CA with its settings.
type certAuthority struct {
	name      string
	authority ca.Authority
	settings  CASettings
	domain    *regexp.Regexp // nil: services get no certificates
	cache     *certCache     // nil: caching off
}

// certificates are the CAs of a Service and the machinery shared by their issuances.
type certificates struct {
	names  []string // in configuration order
	byName map[string]*certAuthority
	// flight collapses concurrent identical requests into one issuance; the others wait for it.
	flight singleflight.Group
	// joined, when set (tests only), is called once a request has started or joined an issuance.
	joined func()
	// workloadCA and trustDomain, when client certificates identify services: a service may get,
	// from that CA, a certificate whose CN is its name and whose one SAN is its SPIFFE ID (its own
	// workload certificate, renewed with the current one).
	workloadCA, trustDomain string
}

func newCertificates(cfg CertConfig, authorities map[string]ca.Authority) (*certificates, error) {
	c := &certificates{byName: map[string]*certAuthority{}}
	for _, name := range cfg.CAs {
		authority, ok := authorities[name]
		if !ok {
			continue
		}
		a := &certAuthority{name: name, authority: authority, settings: cfg.Settings(name)}
		if a.settings.DomainRegex != "" {
			re, err := compileDomainRegex(a.settings.DomainRegex)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", caEnv("ACM_PRIVATE_CA_DOMAIN_REGEX_", name), err)
			}
			a.domain = re
		}
		if a.settings.UseCache {
			a.cache = newCertCache(a.settings.CacheSize)
		}
		c.names = append(c.names, name)
		c.byName[name] = a
	}
	return c, nil
}

// serviceMayGet is the rule for services under the default ACL: the CN and every SAN must match the
// CA's domain pattern in full, with its service_name group equal to the caller's name. Wildcard names
// and IP addresses pass only where the CA allows them. Confidant matched the CN's start only and
// ignored SANs, so a service could get svc.example.com.evil.org or another service's name as a SAN.
func (c *certificates) serviceMayGet(p Principal, caName, cn string, sans []string) bool {
	if c.workloadCA != "" && caName == c.workloadCA && cn == p.Name && len(sans) == 1 && sans[0] == workload.SPIFFEID(c.trustDomain, p.Name) {
		return true
	}
	a := c.byName[caName]
	if a == nil || a.domain == nil {
		return false
	}
	for _, name := range append([]string{cn}, sans...) {
		if !a.nameOwnedBy(name, p.Name) {
			return false
		}
	}
	return true
}

// nameOwnedBy reports whether the CA's domain rule gives name to the service.
func (a *certAuthority) nameOwnedBy(name, service string) bool {
	if ip := net.ParseIP(name); ip != nil {
		// An IP address names no service; only a CA that allows IPs hands them out.
		return a.settings.AllowIP
	}
	if strings.Contains(name, "*") && !a.settings.AllowWildcard {
		return false
	}
	m := a.domain.FindStringSubmatch(name)
	return m != nil && m[a.domain.SubexpIndex("service_name")] == service
}

func (s *Service) findCA(name string) (*certAuthority, error) {
	if a := s.certs.byName[name]; a != nil {
		return a, nil
	}
	return nil, &notFoundError{msg: "Provided CA not found."}
}

func caError(err error) error {
	switch {
	case errors.Is(err, ca.ErrInvalidCSR):
		return invalid("csr could not be decoded")
	case errors.Is(err, ca.ErrUnavailable):
		return fmt.Errorf("%w: %v", errUnavailable, err)
	}
	return err
}

func (s *Service) caView(ctx context.Context, a *certAuthority) (CAView, error) {
	info, err := a.authority.Info(ctx)
	if err != nil {
		return CAView{}, caError(err)
	}
	return CAView{Name: a.name, Certificate: info.Certificate, Chain: info.Chain, Tags: info.Tags}, nil
}

// ListCAs returns every configured CA, in configuration order.
func (s *Service) ListCAs(ctx context.Context) ([]CAView, error) {
	p := PrincipalFrom(ctx)
	if !s.allowed(ctx, ResourceCA, ActionList, "", nil) {
		return nil, s.deny(ctx, ResourceCA, ActionList, "", &deniedError{msg: p.Name + " does not have access to list cas"})
	}
	views := make([]CAView, 0, len(s.certs.names))
	for _, name := range s.certs.names {
		v, err := s.caView(ctx, s.certs.byName[name])
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	return views, nil
}

// GetCA returns one CA. An unknown CA is 404 before the access check, as in Confidant.
func (s *Service) GetCA(ctx context.Context, name string) (CAView, error) {
	p := PrincipalFrom(ctx)
	a, err := s.findCA(name)
	if err != nil {
		return CAView{}, err
	}
	if !s.allowed(ctx, ResourceCA, ActionGet, name, nil) {
		return CAView{}, s.deny(ctx, ResourceCA, ActionGet, name, &deniedError{msg: fmt.Sprintf("%s does not have access to get ca %s", p.Name, name), reference: name})
	}
	return s.caView(ctx, a)
}

// checkCommonName refuses what cannot be a certificate's CN.
func checkCommonName(cn string) error {
	if cn == "" || len(cn) > maxCommonNameLen || !utf8.ValidString(cn) || strings.ContainsFunc(cn, unicode.IsControl) {
		return invalid("cn must be 1 to %d printable characters", maxCommonNameLen)
	}
	return nil
}

// dnsName reports whether s is a host name a certificate may carry: letters, digits and hyphens
// in dot-separated labels, optionally a leading "*." wildcard.
func dnsName(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// splitSANs sorts request SANs into DNS names, IP addresses and SPIFFE IDs, dropping duplicates.
func splitSANs(sans []string) (dns []string, ips []net.IP, uris []*url.URL, err error) {
	if len(sans) > maxSANs {
		return nil, nil, nil, invalid("at most %d san values are allowed", maxSANs)
	}
	for _, san := range sans {
		san = strings.TrimSpace(san)
		if strings.HasPrefix(san, "spiffe://") {
			u, perr := url.Parse(san)
			if perr != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") {
				return nil, nil, nil, invalid("san %q is not a SPIFFE ID spiffe://<trust-domain>/<path>", san)
			}
			if !slices.ContainsFunc(uris, func(x *url.URL) bool { return x.String() == u.String() }) {
				uris = append(uris, u)
			}
			continue
		}
		if ip := net.ParseIP(san); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		if !dnsName(san) {
			return nil, nil, nil, invalid("san %q is neither a DNS name, an IP address nor a SPIFFE ID", san)
		}
		if !slices.Contains(dns, san) {
			dns = append(dns, san)
		}
	}
	return dns, ips, uris, nil
}

func (a *certAuthority) validity(requested int) (int, error) {
	if requested < 0 {
		return 0, invalid("validity must be a positive number of days")
	}
	if requested == 0 || requested > a.settings.MaxValidityDays {
		return a.settings.MaxValidityDays, nil
	}
	return requested, nil
}

func certDenied(p Principal, cn, caName string) *deniedError {
	return &deniedError{msg: fmt.Sprintf("%s does not have access to get certificate cn %s against ca %s", p.Name, cn, caName), reference: cn}
}

// GetCertificate generates a key pair and a CSR for the request and has the CA sign it. Identical
// concurrent requests share one issuance; with the CA's cache on, identical requests of the same day
// get the same certificate and key.
func (s *Service) GetCertificate(ctx context.Context, req CertificateRequest) (IssuedCertificate, error) {
	p := PrincipalFrom(ctx)
	a, err := s.findCA(req.CA)
	if err != nil {
		return IssuedCertificate{}, err
	}
	if err := checkCommonName(req.CN); err != nil {
		return IssuedCertificate{}, err
	}
	dns, ips, uris, err := splitSANs(req.SANs)
	if err != nil {
		return IssuedCertificate{}, err
	}
	days, err := a.validity(req.ValidityDays)
	if err != nil {
		return IssuedCertificate{}, err
	}
	keyType := req.KeyType
	if keyType == "" {
		keyType = a.settings.KeyType
	}
	if keyType != ca.KeyRSA && keyType != ca.KeyECDSA {
		return IssuedCertificate{}, invalid("key_type must be rsa or ecdsa")
	}
	if !s.allowed(ctx, ResourceCertificate, ActionGet, req.CN, map[string]any{"ca": req.CA, "san": slices.Clone(req.SANs)}) {
		return IssuedCertificate{}, s.deny(ctx, ResourceCertificate, ActionGet, req.CN, certDenied(p, req.CN, req.CA))
	}
	// A certificate is checked against its SANs, not its CN, by today's TLS clients: a CN that is a
	// host name is added to the SANs, so GET /v1/certificates/ca/api.example.com is usable as is.
	if net.ParseIP(req.CN) == nil && dnsName(req.CN) && !slices.Contains(dns, req.CN) {
		dns = append([]string{req.CN}, dns...)
	}
	sanKey := slices.Clone(dns)
	for _, ip := range ips {
		sanKey = append(sanKey, ip.String())
	}
	for _, u := range uris {
		sanKey = append(sanKey, u.String())
	}
	slices.Sort(sanKey)
	key := strings.Join([]string{"get", a.name, req.CN, strings.Join(sanKey, ","), strconv.Itoa(days), keyType,
		s.now().Format(time.DateOnly)}, "\x00")
	if cached, ok := a.cache.get(key); ok {
		return cached, nil
	}
	issued, err := s.issueOnce(ctx, key, func(ctx context.Context) (IssuedCertificate, error) {
		keyPEM, csrPEM, err := ca.NewKeyAndCSR(ca.KeyRequest{
			KeyType: keyType, RSABits: a.settings.KeySize, Subject: a.subject(req.CN), DNSNames: dns, IPAddresses: ips, URIs: uris,
		})
		if err != nil {
			return IssuedCertificate{}, err
		}
		out, err := a.authority.Issue(ctx, csrPEM, days)
		if err != nil {
			return IssuedCertificate{}, caError(err)
		}
		got := IssuedCertificate{Certificate: out.Certificate, Chain: out.Chain, Key: string(keyPEM)}
		a.cache.put(key, got)
		return got, nil
	})
	if err != nil {
		return IssuedCertificate{}, err
	}
	if err := s.auditDisclosure(ctx, "get-certificate", ResourceCertificate, a.name+"/"+req.CN, 0); err != nil {
		return IssuedCertificate{}, err
	}
	return issued, nil
}

func (a *certAuthority) subject(cn string) pkix.Name {
	name := pkix.Name{CommonName: cn}
	for dst, v := range map[*[]string]string{&name.Country: a.settings.Country, &name.Province: a.settings.State,
		&name.Locality: a.settings.Locality, &name.Organization: a.settings.Organization} {
		if v != "" {
			*dst = []string{v}
		}
	}
	return name
}

// IssueCertificate signs a client's CSR. The CN and DNS SANs the access check sees come from the
// CSR itself, so a caller cannot ask for one name and sign another.
func (s *Service) IssueCertificate(ctx context.Context, caName, csrPEM string, validityDays int) (IssuedCertificate, error) {
	p := PrincipalFrom(ctx)
	a, err := s.findCA(caName)
	if err != nil {
		return IssuedCertificate{}, err
	}
	if strings.TrimSpace(csrPEM) == "" {
		return IssuedCertificate{}, invalid("csr must be provided in the POST body.")
	}
	csr, err := ca.ParseCSR([]byte(csrPEM))
	if err != nil {
		return IssuedCertificate{}, invalid("csr could not be decoded")
	}
	cn := csr.Subject.CommonName
	if err := checkCommonName(cn); err != nil {
		return IssuedCertificate{}, invalid("the csr must have a common name of 1 to %d printable characters", maxCommonNameLen)
	}
	days, err := a.validity(validityDays)
	if err != nil {
		return IssuedCertificate{}, err
	}
	// Every SAN of the CSR is shown to the access check (Confidant's passes the DNS names only, and
	// its default rules ignore them), so a policy on names also covers IP, URI and email SANs.
	sans := slices.Clone(csr.DNSNames)
	for _, ip := range csr.IPAddresses {
		sans = append(sans, ip.String())
	}
	for _, u := range csr.URIs {
		sans = append(sans, u.String())
	}
	sans = append(sans, csr.EmailAddresses...)
	if !s.allowed(ctx, ResourceCertificate, ActionGet, cn, map[string]any{"ca": caName, "san": sans}) {
		return IssuedCertificate{}, s.deny(ctx, ResourceCertificate, ActionGet, cn, certDenied(p, cn, caName))
	}
	sum := sha256.Sum256([]byte(csrPEM))
	key := strings.Join([]string{"csr", a.name, hex.EncodeToString(sum[:]), strconv.Itoa(days)}, "\x00")
	issued, err := s.issueOnce(ctx, key, func(ctx context.Context) (IssuedCertificate, error) {
		out, err := a.authority.Issue(ctx, []byte(csrPEM), days)
		if err != nil {
			return IssuedCertificate{}, caError(err)
		}
		return IssuedCertificate{Certificate: out.Certificate, Chain: out.Chain}, nil
	})
	if err != nil {
		return IssuedCertificate{}, err
	}
	s.auditLog(ctx, "issue-certificate", ResourceCertificate, a.name+"/"+cn, 0)
	return issued, nil
}

// issueOnce runs issue once for all concurrent callers with the same key. The issuance runs on a
// context detached from the first caller's, bounded by issueTimeout; each caller still stops
// waiting when its own context ends.
func (s *Service) issueOnce(ctx context.Context, key string, issue func(context.Context) (IssuedCertificate, error)) (IssuedCertificate, error) {
	ch := s.certs.flight.DoChan(key, func() (any, error) {
		detached, cancel := context.WithTimeout(context.WithoutCancel(ctx), issueTimeout)
		defer cancel()
		got, err := issue(detached)
		if err != nil {
			s.logger.Debug("certificate issuance failed", zap.Error(err))
		}
		return got, err
	})
	if s.certs.joined != nil {
		s.certs.joined()
	}
	select {
	case <-ctx.Done():
		return IssuedCertificate{}, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return IssuedCertificate{}, r.Err
		}
		return r.Val.(IssuedCertificate), nil
	}
}

// certCache is a small LRU of server-generated certificates. Keys carry the day, so entries of
// earlier days are never hit again and age out as new ones arrive.
type certCache struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used
	items map[string]*list.Element
}

type cacheEntry struct {
	key string
	val IssuedCertificate
}

func newCertCache(size int) *certCache {
	return &certCache{size: size, order: list.New(), items: map[string]*list.Element{}}
}

func (c *certCache) get(key string) (IssuedCertificate, bool) {
	if c == nil {
		return IssuedCertificate{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return IssuedCertificate{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).val, true
}

func (c *certCache) put(key string, val IssuedCertificate) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value.(*cacheEntry).val = val
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cacheEntry{key: key, val: val})
	for c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*cacheEntry).key)
	}
}
