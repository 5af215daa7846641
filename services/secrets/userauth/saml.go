package userauth

import (
	"bytes"
	"compress/flate"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"
	xrv "github.com/mattermost/xml-roundtrip-validator"
	dsig "github.com/russellhaering/goxmldsig"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/ca"
	"github.com/gantry-dev/gantry/pkg/logging"
)

// Confidant's SAML routes; the IdP is configured against these, so they are fixed.
const (
	samlMetadataPath = "/v1/saml/metadata"
	samlConsumePath  = "/v1/saml/consume"
	samlLogoutPath   = "/v1/saml/logout"
	loggedOutPath    = "/loggedout"
)

const (
	// SAMLRequestCookie carries the IDs of the AuthnRequests this browser started, so Consume only
	// accepts responses to them (no unsolicited or cross-browser assertions).
	SAMLRequestCookie = "gantry_saml_request"
	samlCookiePath    = "/v1/saml"
	// samlRequestTTL bounds how long a login may sit at the IdP; it is also the replay window of
	// an assertion captured together with the tracking cookie.
	samlRequestTTL = 5 * time.Minute
	// maxTrackedRequests lets a few logins started in parallel tabs all complete, while keeping
	// the cookie small.
	maxTrackedRequests = 5
	// maxSAMLResponseLen bounds the base64 SAMLResponse: real responses are a few KiB, and the
	// XML validators downstream are not cheap on hostile megabytes.
	maxSAMLResponseLen = 1 << 20
)

// SAMLConfig configures the SAML service provider. Field comments name the Confidant setting each
// field corresponds to.
type SAMLConfig struct {
	URLRoot              string // SAML_CONFIDANT_URL_ROOT, e.g. https://secrets.example.com
	SPCertPEM            []byte // SAML_SP_CERT: the SP certificate (PEM)
	SPKeyPEM             []byte // SAML_SP_KEY: the SP private key (PEM, RSA or ECDSA)
	IdPEntityID          string // SAML_IDP_ENTITY_ID
	IdPSSOURL            string // SAML_IDP_SIGNON_URL: the IdP's HTTP-Redirect SSO endpoint
	IdPSLOURL            string // SAML_IDP_LOGOUT_URL: optional IdP HTTP-Redirect SLO endpoint
	IdPCertPEM           []byte // SAML_IDP_CERT: IdP signing certificate(s) (PEM)
	WantAssertionsSigned bool   // SAML_WANT_ASSERTIONS_SIGNED: require the assertion itself be signed
	Debug                bool   // SAML_DEBUG: enable the debug endpoint
	CookieSecret         []byte // HMAC key for the request-tracking cookie (>= 32 bytes)
	CookieSecure         bool   // mark cookies Secure (and SameSite=None, see flowCookie)
}

// SAML is a SAML 2.0 service provider for browser login, mirroring Confidant's "saml" user auth
// module. It is safe for concurrent use.
type SAML struct {
	sp                   *saml.ServiceProvider
	acsURL               url.URL
	idpSLOURL            string
	wantAssertionsSigned bool
	debug                bool
	cookies              cookieSigner
	cookieSecure         bool
	cookieSameSite       http.SameSite
	logger               *zap.Logger
	rejections           *logging.Sampler // login rejections, sampled
	now                  func() time.Time
}

// NewSAML validates cfg and builds the service provider. Errors name the Confidant setting at
// fault so a misconfigured deployment fails at startup with an actionable message.
func NewSAML(cfg SAMLConfig, logger *zap.Logger) (*SAML, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	root, err := parseAbsoluteURL(strings.TrimRight(cfg.URLRoot, "/"))
	if err != nil {
		return nil, fmt.Errorf("userauth: SAML_CONFIDANT_URL_ROOT %q: %w", cfg.URLRoot, err)
	}
	if root.RawQuery != "" || root.Fragment != "" {
		return nil, fmt.Errorf("userauth: SAML_CONFIDANT_URL_ROOT %q must not have a query or fragment", cfg.URLRoot)
	}
	spCerts, err := parseCertificates(cfg.SPCertPEM)
	if err != nil {
		return nil, fmt.Errorf("userauth: SAML_SP_CERT: %w", err)
	}
	spKey, err := parsePrivateKey(cfg.SPKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("userauth: SAML_SP_KEY: %w", err)
	}
	pub, ok := spKey.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(spCerts[0].PublicKey) {
		return nil, errors.New("userauth: SAML_SP_KEY does not match the public key of SAML_SP_CERT")
	}
	if strings.TrimSpace(cfg.IdPEntityID) == "" {
		return nil, errors.New("userauth: SAML_IDP_ENTITY_ID is required")
	}
	if _, err := parseAbsoluteURL(cfg.IdPSSOURL); err != nil {
		return nil, fmt.Errorf("userauth: SAML_IDP_SIGNON_URL %q: %w", cfg.IdPSSOURL, err)
	}
	if cfg.IdPSLOURL != "" {
		if _, err := parseAbsoluteURL(cfg.IdPSLOURL); err != nil {
			return nil, fmt.Errorf("userauth: SAML_IDP_LOGOUT_URL %q: %w", cfg.IdPSLOURL, err)
		}
	}
	idpCerts, err := parseCertificates(cfg.IdPCertPEM)
	if err != nil {
		return nil, fmt.Errorf("userauth: SAML_IDP_CERT: %w", err)
	}
	signer, err := newCookieSigner(cfg.CookieSecret)
	if err != nil {
		return nil, fmt.Errorf("userauth: SAML request cookie: %w", err)
	}

	metadataURL := *root
	metadataURL.Path += samlMetadataPath
	acsURL := *root
	acsURL.Path += samlConsumePath
	sloURL := *root
	sloURL.Path += samlLogoutPath

	sigMethod := dsig.RSASHA256SignatureMethod
	if _, isEC := spKey.(*ecdsa.PrivateKey); isEC {
		sigMethod = dsig.ECDSASHA256SignatureMethod
	}

	sp := &saml.ServiceProvider{
		EntityID:          metadataURL.String(),
		Key:               spKey,
		Certificate:       spCerts[0],
		Intermediates:     spCerts[1:],
		MetadataURL:       metadataURL,
		AcsURL:            acsURL,
		SloURL:            sloURL,
		IDPMetadata:       idpMetadata(cfg, idpCerts),
		AuthnNameIDFormat: saml.EmailAddressNameIDFormat,
		// Signing AuthnRequests costs nothing, lets IdPs that require it work, and is ignored by
		// those that don't.
		SignatureMethod: sigMethod,
		LogoutBindings:  []string{saml.HTTPRedirectBinding},
		// Only responses to requests this browser started are accepted; IdP-initiated login
		// would make Consume a login-CSRF sink.
		AllowIDPInitiated: false,
	}

	sameSite := http.SameSiteLaxMode
	if cfg.CookieSecure {
		sameSite = http.SameSiteNoneMode
	}
	s := &SAML{
		sp:                   sp,
		acsURL:               acsURL,
		idpSLOURL:            cfg.IdPSLOURL,
		wantAssertionsSigned: cfg.WantAssertionsSigned,
		debug:                cfg.Debug,
		cookies:              signer,
		cookieSecure:         cfg.CookieSecure,
		cookieSameSite:       sameSite,
		logger:               logger,
		rejections:           logging.NewSampler(logger, 0, 0),
		now:                  time.Now,
	}
	logger.Info("saml service provider configured",
		zap.String("entity_id", sp.EntityID),
		zap.String("acs_url", acsURL.String()),
		zap.String("idp_entity_id", cfg.IdPEntityID),
		zap.Bool("want_assertions_signed", cfg.WantAssertionsSigned),
		zap.Bool("debug", cfg.Debug))
	return s, nil
}

// idpMetadata synthesises IdP metadata from the discrete Confidant settings, which is all crewjam
// needs to verify signatures and address requests.
func idpMetadata(cfg SAMLConfig, certs []*x509.Certificate) *saml.EntityDescriptor {
	keys := make([]saml.KeyDescriptor, 0, len(certs))
	for _, c := range certs {
		keys = append(keys, saml.KeyDescriptor{
			Use: "signing",
			KeyInfo: saml.KeyInfo{X509Data: saml.X509Data{
				X509Certificates: []saml.X509Certificate{{Data: base64.StdEncoding.EncodeToString(c.Raw)}},
			}},
		})
	}
	var slo []saml.Endpoint
	if cfg.IdPSLOURL != "" {
		slo = []saml.Endpoint{{Binding: saml.HTTPRedirectBinding, Location: cfg.IdPSLOURL}}
	}
	return &saml.EntityDescriptor{
		EntityID: cfg.IdPEntityID,
		IDPSSODescriptors: []saml.IDPSSODescriptor{{
			SSODescriptor: saml.SSODescriptor{
				RoleDescriptor: saml.RoleDescriptor{
					ProtocolSupportEnumeration: "urn:oasis:names:tc:SAML:2.0:protocol",
					KeyDescriptors:             keys,
				},
				SingleLogoutServices: slo,
			},
			SingleSignOnServices: []saml.Endpoint{{Binding: saml.HTTPRedirectBinding, Location: cfg.IdPSSOURL}},
		}},
	}
}

// Metadata renders the SP metadata an IdP administrator imports (GET /v1/saml/metadata).
func (s *SAML) Metadata() *Response {
	md := s.sp.Metadata()
	for i := range md.SPSSODescriptors {
		d := &md.SPSSODescriptors[i]
		want := s.wantAssertionsSigned
		d.WantAssertionsSigned = &want
		// crewjam also advertises an HTTP-Artifact ACS, but Consume only implements HTTP-POST;
		// an IdP that picked artifact would produce logins that can never complete.
		var acs []saml.IndexedEndpoint
		for _, e := range d.AssertionConsumerServices {
			if e.Binding == saml.HTTPPostBinding {
				isDefault := true
				e.IsDefault = &isDefault
				acs = append(acs, e)
			}
		}
		d.AssertionConsumerServices = acs
	}
	buf, err := xml.MarshalIndent(md, "", "  ")
	if err != nil {
		s.logger.Error("saml: cannot render metadata", zap.Error(err))
		return textResponse(http.StatusInternalServerError, "cannot render SAML metadata\n")
	}
	return &Response{
		Status:      http.StatusOK,
		ContentType: "text/xml",
		Body:        append([]byte(xml.Header), buf...),
	}
}

// trackedRequest is one AuthnRequest this browser started.
type trackedRequest struct {
	ID  string `json:"id"`
	Exp int64  `json:"exp"`
}

type samlTracker struct {
	Requests []trackedRequest `json:"r"`
}

// trackedRequests returns the still-valid request IDs from the tracking cookie.
func (s *SAML) trackedRequests(req Request, now time.Time) ([]trackedRequest, error) {
	var t samlTracker
	if err := s.cookies.open(SAMLRequestCookie, req.Cookies[SAMLRequestCookie], now, &t); err != nil {
		return nil, err
	}
	live := t.Requests[:0]
	for _, r := range t.Requests {
		if r.ID != "" && now.Before(time.Unix(r.Exp, 0)) {
			live = append(live, r)
		}
	}
	return live, nil
}

// Login starts SP-initiated SSO (GET /v1/saml/login): it redirects the browser to the IdP with an
// AuthnRequest (HTTP-Redirect binding) and records the request ID in a signed cookie. The query
// parameter "next" becomes the RelayState when it is a safe relative path.
func (s *SAML) Login(req Request) (*Response, error) {
	now := s.now()
	relay := postLoginPath(req.Query.Get("next"))

	authn, err := s.sp.MakeAuthenticationRequest(s.sp.GetSSOBindingLocation(saml.HTTPRedirectBinding), saml.HTTPRedirectBinding, saml.HTTPPostBinding)
	if err != nil {
		return nil, fmt.Errorf("userauth: saml: make AuthnRequest: %w", err)
	}
	// crewjam v0.5.1 appends RelayState to the query verbatim, so it must be escaped here or a
	// "next" with '&' or '#' would corrupt the redirect (and its signature).
	loc, err := authn.Redirect(url.QueryEscape(relay), s.sp)
	if err != nil {
		return nil, fmt.Errorf("userauth: saml: encode AuthnRequest: %w", err)
	}

	// Keep the other in-flight requests of this browser so parallel tabs can all finish; a
	// missing or invalid old cookie simply starts a fresh list.
	tracked, _ := s.trackedRequests(req, now)
	tracked = append(tracked, trackedRequest{ID: authn.ID, Exp: now.Add(samlRequestTTL).Unix()})
	if len(tracked) > maxTrackedRequests {
		tracked = tracked[len(tracked)-maxTrackedRequests:]
	}
	value, err := s.cookies.seal(SAMLRequestCookie, samlTracker{Requests: tracked}, now.Add(samlRequestTTL))
	if err != nil {
		return nil, fmt.Errorf("userauth: saml: seal request cookie: %w", err)
	}
	s.logger.Debug("saml login started", logging.Untrusted("relay_state", relay))
	return &Response{
		Status:     http.StatusFound,
		Location:   loc.String(),
		SetCookies: []*http.Cookie{flowCookie(SAMLRequestCookie, value, samlCookiePath, samlRequestTTL, s.cookieSecure, s.cookieSameSite)},
	}, nil
}

// ExpireRequestCookie returns a cookie that deletes the request-tracking cookie. Consume's
// signature has no room for it, so callers may attach it to their post-login redirect to shorten
// the replay window of the consumed assertion.
func (s *SAML) ExpireRequestCookie() *http.Cookie {
	return expiredCookie(SAMLRequestCookie, samlCookiePath, s.cookieSecure, s.cookieSameSite)
}

// Consume is the assertion consumer service (POST /v1/saml/consume, HTTP-POST binding). It
// verifies the IdP's response against the requests tracked in this browser's cookie and returns
// the user and a safe post-login path. Every rejection wraps ErrNotAuthenticated.
func (s *SAML) Consume(req Request) (user *User, relayState string, err error) {
	defer func() {
		// The XML and crypto stack underneath parses attacker-controlled input; a panic there
		// (e.g. a signed assertion missing an optional element) must fail the login, not the
		// server.
		if r := recover(); r != nil {
			s.logger.Error("saml: panic while consuming response", zap.String("panic", fmt.Sprint(r)))
			user, relayState, err = nil, "", s.reject("malformed SAML response", nil)
		}
	}()

	if !strings.EqualFold(req.Method, http.MethodPost) {
		return nil, "", s.reject("SAML responses must be POSTed", nil)
	}
	encoded := req.Form.Get("SAMLResponse")
	if encoded == "" {
		return nil, "", s.reject("missing SAMLResponse", nil)
	}
	if len(encoded) > maxSAMLResponseLen {
		return nil, "", s.reject("SAMLResponse too large", nil)
	}
	now := s.now()
	tracked, err := s.trackedRequests(req, now)
	if err != nil || len(tracked) == 0 {
		if err == nil {
			err = errCookieExpired
		}
		return nil, "", s.reject("no SAML login in progress in this browser (unsolicited response)", err)
	}
	ids := make([]string, len(tracked))
	for i, t := range tracked {
		ids[i] = t.ID
	}

	// Some IdPs wrap the base64 at 64/76 columns.
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(encoded), ""))
	if err != nil {
		return nil, "", s.reject("SAMLResponse is not base64", nil)
	}
	// Checked here, not only inside crewjam, so the preprocessing below never sees XML that
	// encoding/xml and etree would read differently; the validator's own error is not reported
	// because it quotes document content.
	if err := xrv.Validate(bytes.NewReader(raw)); err != nil {
		return nil, "", s.reject("malformed SAML response XML", nil)
	}
	if s.wantAssertionsSigned {
		if raw, err = stripResponseSignature(raw); err != nil {
			return nil, "", s.reject("malformed SAML response XML", nil)
		}
	}

	assertion, err := s.sp.ParseXMLResponse(raw, ids, s.acsURL)
	if err != nil {
		return nil, "", s.reject("SAML response rejected", responseDetail(err))
	}
	user = userFromAssertion(assertion)
	if user.Email == "" {
		return nil, "", s.reject("SAML assertion carries no email address", nil)
	}
	relayState = postLoginPath(req.Form.Get("RelayState"))
	s.logger.Info("saml login succeeded", zap.String("email", user.Email))
	return user, relayState, nil
}

// stripResponseSignature removes the <ds:Signature> that signs the Response envelope. crewjam
// accepts an unsigned assertion inside a signed Response; without the envelope signature it must
// find a valid signature on every assertion, which is what WantAssertionsSigned promises. Nothing
// is lost: the envelope fields that matter (Destination, InResponseTo, Issuer, status) are still
// checked, and the assertion's own signed SubjectConfirmation repeats the request binding.
func stripResponseSignature(raw []byte) ([]byte, error) {
	doc := etree.NewDocument()
	if err := doc.ReadFromBytes(raw); err != nil {
		return nil, err
	}
	root := doc.Root()
	if root == nil {
		return nil, errors.New("no root element")
	}
	for _, child := range root.ChildElements() {
		if child.Tag == "Signature" && child.NamespaceURI() == "http://www.w3.org/2000/09/xmldsig#" {
			root.RemoveChild(child)
		}
	}
	return doc.WriteToBytes()
}

// responseDetail extracts crewjam's private diagnostic, which explains which check failed
// without quoting the response (its Response field holds the XML and is deliberately dropped).
func responseDetail(err error) error {
	var ire *saml.InvalidResponseError
	if errors.As(err, &ire) && ire.PrivateErr != nil {
		return ire.PrivateErr
	}
	return err
}

func (s *SAML) reject(reason string, detail error) error {
	fields := []zap.Field{zap.String("reason", reason)}
	if detail != nil {
		fields = append(fields, logging.Untrusted("detail", detail.Error()))
	}
	// Anyone can post a forged login: rejections are sampled, and their detail (which may quote
	// what was posted) cut.
	s.rejections.Info("saml.login_rejected", "saml login rejected", fields...)
	if detail != nil {
		return fmt.Errorf("%w: saml: %s: %v", ErrNotAuthenticated, reason, detail)
	}
	return fmt.Errorf("%w: saml: %s", ErrNotAuthenticated, reason)
}

// userFromAssertion applies Confidant's attribute mapping: email from the "email" attribute,
// falling back to the NameID (requested in emailAddress format); names from
// firstname|first_name and lastname|last_name.
func userFromAssertion(a *saml.Assertion) *User {
	u := &User{
		Email:     assertionAttribute(a, "email"),
		FirstName: assertionAttribute(a, "firstname", "first_name"),
		LastName:  assertionAttribute(a, "lastname", "last_name"),
	}
	if u.Email == "" && a.Subject != nil && a.Subject.NameID != nil {
		u.Email = strings.TrimSpace(a.Subject.NameID.Value)
	}
	return u
}

// assertionAttribute returns the first non-empty value of the first attribute whose Name or
// FriendlyName matches one of names (case-insensitively, as IdPs differ in casing).
func assertionAttribute(a *saml.Assertion, names ...string) string {
	for _, name := range names {
		for _, st := range a.AttributeStatements {
			for _, attr := range st.Attributes {
				if !strings.EqualFold(attr.Name, name) && !strings.EqualFold(attr.FriendlyName, name) {
					continue
				}
				for _, v := range attr.Values {
					if val := strings.TrimSpace(v.Value); val != "" {
						return val
					}
				}
			}
		}
	}
	return ""
}

// Logout handles GET /v1/saml/logout. When the IdP calls back (SAMLResponse or SAMLRequest in the
// query) the browser goes to /loggedout. Otherwise it is sent to the IdP's logout endpoint; with no
// user at hand there is no NameID to put in a LogoutRequest, so this is a plain redirect (see
// LogoutUser). Without a configured IdP logout endpoint the browser goes straight to /loggedout.
// The caller clears its own session in every case.
func (s *SAML) Logout(req Request) (*Response, error) {
	return s.LogoutUser(req, nil)
}

// LogoutUser is Logout for a caller that knows the session's user: it starts single logout with a
// LogoutRequest (HTTP-Redirect binding, signed with the SP key) whose emailAddress NameID is the
// user's email.
func (s *SAML) LogoutUser(req Request, user *User) (*Response, error) {
	// The IdP's half of single logout. Its message is not verified: the only effect is a redirect
	// to a static page, and the caller ends the local session regardless, which is always safe.
	if req.Query.Get("SAMLResponse") != "" || req.Query.Get("SAMLRequest") != "" {
		return redirect(loggedOutPath), nil
	}
	if s.idpSLOURL == "" {
		return redirect(loggedOutPath), nil
	}
	if user == nil || user.Email == "" {
		return redirect(s.idpSLOURL), nil
	}
	loc, err := s.logoutRequestURL(user.Email)
	if err != nil {
		return nil, err
	}
	return redirect(loc), nil
}

// logoutRequestURL encodes a LogoutRequest for the HTTP-Redirect binding. crewjam builds the
// message but its Redirect neither signs the query nor orders it as the binding requires
// (SAMLRequest, RelayState, SigAlg), so the encoding and signature are done here.
func (s *SAML) logoutRequestURL(nameID string) (string, error) {
	lr, err := s.sp.MakeLogoutRequest(s.idpSLOURL, nameID)
	if err != nil {
		return "", fmt.Errorf("userauth: saml: make LogoutRequest: %w", err)
	}
	// The redirect binding signs the query string; an enveloped XML signature must not be sent.
	lr.Signature = nil

	var buf bytes.Buffer
	b64 := base64.NewEncoder(base64.StdEncoding, &buf)
	fw, err := flate.NewWriter(b64, flate.BestCompression)
	if err != nil {
		return "", err
	}
	doc := etree.NewDocument()
	doc.SetRoot(lr.Element())
	if _, err := doc.WriteTo(fw); err != nil {
		return "", err
	}
	if err := fw.Close(); err != nil {
		return "", err
	}
	if err := b64.Close(); err != nil {
		return "", err
	}

	query := "SAMLRequest=" + url.QueryEscape(buf.String()) + "&SigAlg=" + url.QueryEscape(s.sp.SignatureMethod)
	ctx, err := saml.GetSigningContext(s.sp)
	if err != nil {
		return "", fmt.Errorf("userauth: saml: signing context: %w", err)
	}
	sig, err := ctx.SignString(query)
	if err != nil {
		return "", fmt.Errorf("userauth: saml: sign LogoutRequest: %w", err)
	}
	query += "&Signature=" + url.QueryEscape(base64.StdEncoding.EncodeToString(sig))

	u, err := url.Parse(s.idpSLOURL)
	if err != nil {
		return "", err
	}
	if u.RawQuery != "" {
		// An endpoint that already carries a query keeps it; the signed part follows it, as
		// crewjam does for AuthnRequests.
		query = u.RawQuery + "&" + query
	}
	u.RawQuery = query
	return u.String(), nil
}

// Debug serves Confidant's SAML debug endpoint: the session's user as JSON when SAML_DEBUG is
// set, 403 otherwise. Request headers are not available to this transport-neutral package, so
// "headers" is always empty.
func (s *SAML) Debug(req Request, user *User) (*Response, error) {
	if !s.debug {
		return textResponse(http.StatusForbidden, "SAML debugging is disabled\n"), nil
	}
	session := map[string]string{}
	if user != nil {
		session["email"] = user.Email
		session["first_name"] = user.FirstName
		session["last_name"] = user.LastName
	}
	body, err := json.Marshal(struct {
		Session map[string]string `json:"session"`
		Headers map[string]string `json:"headers"`
	}{session, map[string]string{}})
	if err != nil {
		return nil, err
	}
	return &Response{Status: http.StatusOK, ContentType: "application/json", Body: body}, nil
}

func redirect(loc string) *Response {
	return &Response{Status: http.StatusFound, Location: loc}
}

func textResponse(status int, msg string) *Response {
	return &Response{Status: status, ContentType: "text/plain; charset=utf-8", Body: []byte(msg)}
}

// parseAbsoluteURL accepts only http(s) URLs with a host: anything else cannot be a browser
// redirect target or an entity ID the IdP will match.
func parseAbsoluteURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("is required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, errors.New("must be an absolute http(s) URL")
	}
	return u, nil
}

// parseCertificates decodes every CERTIFICATE block; more than one lets an IdP roll its signing
// key without downtime.
func parseCertificates(pemBytes []byte) ([]*x509.Certificate, error) {
	certs, err := ca.ParseCertificates(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block found")
	}
	return certs, nil
}

// parsePrivateKey accepts the PEM encodings OpenSSL commonly emits for RSA and ECDSA keys.
func parsePrivateKey(pemBytes []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM private key block found")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("unsupported private key type %T (want RSA or ECDSA)", key)
	}
}
