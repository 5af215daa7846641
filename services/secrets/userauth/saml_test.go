package userauth

import (
	"bytes"
	"compress/flate"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/beevik/etree"
	"github.com/crewjam/saml"
	dsig "github.com/russellhaering/goxmldsig"
	"go.uber.org/zap"

	"github.com/gantry-dev/gantry/pkg/logging/logtest"
)

const (
	testURLRoot   = "https://secrets.example.com"
	testEntityID  = testURLRoot + "/v1/saml/metadata"
	testACSURL    = testURLRoot + "/v1/saml/consume"
	testIdPEntity = "https://idp.example.com/metadata"
	testIdPSSO    = "https://idp.example.com/sso"
	testIdPSLO    = "https://idp.example.com/slo"
)

func testSAMLConfig(t testing.TB) SAMLConfig {
	sp, idp := keyPair(t, "sp"), keyPair(t, "idp")
	return SAMLConfig{
		URLRoot:              testURLRoot,
		SPCertPEM:            sp.certPEM,
		SPKeyPEM:             sp.keyPEM,
		IdPEntityID:          testIdPEntity,
		IdPSSOURL:            testIdPSSO,
		IdPSLOURL:            testIdPSLO,
		IdPCertPEM:           idp.certPEM,
		WantAssertionsSigned: true,
		CookieSecret:         testCookieSecret,
		CookieSecure:         true,
	}
}

// spProvider lets the in-test IdP know our SP only through the metadata the SP publishes.
type spProvider struct{ md *saml.EntityDescriptor }

func (p spProvider) GetServiceProvider(_ *http.Request, id string) (*saml.EntityDescriptor, error) {
	if id != p.md.EntityID {
		return nil, os.ErrNotExist
	}
	return p.md, nil
}

// samlFixture is our SP plus a real crewjam identity provider configured from the SP's metadata.
type samlFixture struct {
	sp  *SAML
	idp *saml.IdentityProvider
}

type fixtureOpts struct {
	cfg       func(*SAMLConfig)
	plaintext bool   // IdP does not encrypt the assertion
	idpKey    string // role of the key the IdP signs with; default "idp"
}

func newSAMLFixture(t testing.TB, o fixtureOpts) *samlFixture {
	t.Helper()
	cfg := testSAMLConfig(t)
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	// zaptest routes logs through t; a fuzz target must not log through its *testing.F.
	logger := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		logger = logtest.New(tt)
	}
	sp, err := NewSAML(cfg, logger)
	if err != nil {
		t.Fatalf("NewSAML: %v", err)
	}
	var ed saml.EntityDescriptor
	if err := xml.Unmarshal(sp.Metadata().Body, &ed); err != nil {
		t.Fatalf("parse SP metadata: %v", err)
	}
	if o.plaintext {
		// Without an SP certificate in the metadata crewjam's IdP sends the assertion in the
		// clear, which lets tests tamper with its content directly.
		for i := range ed.SPSSODescriptors {
			ed.SPSSODescriptors[i].KeyDescriptors = nil
		}
	}
	role := o.idpKey
	if role == "" {
		role = "idp"
	}
	kp := keyPair(t, role)
	metaURL, _ := url.Parse(testIdPEntity)
	ssoURL, _ := url.Parse(testIdPSSO)
	return &samlFixture{
		sp: sp,
		idp: &saml.IdentityProvider{
			Key:                     kp.key,
			Certificate:             kp.cert,
			MetadataURL:             *metaURL,
			SSOURL:                  *ssoURL,
			ServiceProviderProvider: spProvider{md: &ed},
		},
	}
}

func aliceSession() *saml.Session {
	return &saml.Session{
		ID:           "sess-1",
		CreateTime:   time.Now(),
		ExpireTime:   time.Now().Add(time.Hour),
		Index:        "idx-1",
		NameID:       "alice@example.com",
		NameIDFormat: string(saml.EmailAddressNameIDFormat),
		CustomAttributes: []saml.Attribute{
			basicAttr("firstname", "Alice"),
			basicAttr("lastname", "Liddell"),
		},
	}
}

func basicAttr(name, value string) saml.Attribute {
	return saml.Attribute{
		Name:       name,
		NameFormat: "urn:oasis:names:tc:SAML:2.0:attrname-format:basic",
		Values:     []saml.AttributeValue{{Type: "xs:string", Value: value}},
	}
}

// issueOpts shape what the IdP asserts.
type issueOpts struct {
	session  *saml.Session
	idpClock time.Duration               // offset of the IdP's clock from real time
	mutate   func(*saml.IdpAuthnRequest) // runs after the assertion is made, before signing
}

// samlFlow records one SP-initiated login as the browser saw it.
type samlFlow struct {
	login  *Response
	cookie *http.Cookie
	authn  saml.AuthnRequest
	form   saml.IdpAuthnRequestForm
}

// start performs Login and decodes the AuthnRequest the browser is redirected with.
func (f *samlFixture) start(t *testing.T, next string, cookies map[string]string) samlFlow {
	t.Helper()
	q := url.Values{}
	if next != "" {
		q.Set("next", next)
	}
	resp, err := f.sp.Login(Request{Method: http.MethodGet, Path: "/v1/saml/login", Query: q, Cookies: cookies})
	if err != nil {
		t.Fatalf("Login: %v", err)
	}
	if resp.Status != http.StatusFound {
		t.Fatalf("Login status = %d, want 302", resp.Status)
	}
	if len(resp.SetCookies) != 1 || resp.SetCookies[0].Name != SAMLRequestCookie {
		t.Fatalf("Login cookies = %v, want one %s", resp.SetCookies, SAMLRequestCookie)
	}
	loc, err := url.Parse(resp.Location)
	if err != nil {
		t.Fatalf("Location: %v", err)
	}
	return samlFlow{login: resp, cookie: resp.SetCookies[0], authn: decodeRedirectAuthn(t, loc)}
}

// issue has the IdP answer the flow's AuthnRequest, exactly as it arrived at its SSO endpoint.
func (f *samlFixture) issue(t *testing.T, flow *samlFlow, o issueOpts) {
	t.Helper()
	req, err := saml.NewIdpAuthnRequest(f.idp, httptest.NewRequest(http.MethodGet, flow.login.Location, nil))
	if err != nil {
		t.Fatalf("IdP: NewIdpAuthnRequest: %v", err)
	}
	if err := req.Validate(); err != nil {
		t.Fatalf("IdP rejected the AuthnRequest: %v", err)
	}
	req.Now = req.Now.Add(o.idpClock)
	session := o.session
	if session == nil {
		session = aliceSession()
	}
	if err := (saml.DefaultAssertionMaker{}).MakeAssertion(req, session); err != nil {
		t.Fatalf("IdP: MakeAssertion: %v", err)
	}
	// DefaultAssertionMaker stamps IssueInstant from the global clock, not req.Now.
	req.Assertion.IssueInstant = req.Assertion.IssueInstant.Add(o.idpClock)
	if o.mutate != nil {
		o.mutate(req)
	}
	if err := req.MakeResponse(); err != nil {
		t.Fatalf("IdP: MakeResponse: %v", err)
	}
	form, err := req.PostBinding()
	if err != nil {
		t.Fatalf("IdP: PostBinding: %v", err)
	}
	flow.form = form
}

func (flow samlFlow) consumeRequest() Request {
	return Request{
		Method:  http.MethodPost,
		Path:    samlConsumePath,
		Form:    url.Values{"SAMLResponse": {flow.form.SAMLResponse}, "RelayState": {flow.form.RelayState}},
		Cookies: map[string]string{SAMLRequestCookie: flow.cookie.Value},
	}
}

// decodeRedirectAuthn undoes the HTTP-Redirect binding (base64 + DEFLATE) and checks the query
// signature with the SP certificate, as a signature-checking IdP would.
func decodeRedirectAuthn(t *testing.T, loc *url.URL) saml.AuthnRequest {
	t.Helper()
	verifyRedirectSignature(t, loc.RawQuery, "SAMLRequest")
	raw := inflateParam(t, loc.Query().Get("SAMLRequest"))
	var ar saml.AuthnRequest
	if err := xml.Unmarshal(raw, &ar); err != nil {
		t.Fatalf("AuthnRequest XML: %v", err)
	}
	return ar
}

func inflateParam(t *testing.T, v string) []byte {
	t.Helper()
	compressed, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		t.Fatalf("base64: %v", err)
	}
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(compressed)))
	if err != nil {
		t.Fatalf("inflate: %v", err)
	}
	return raw
}

// verifyRedirectSignature checks the SAML HTTP-Redirect binding signature (§3.4.4.1): RSA-SHA256
// over "<msg>=..&RelayState=..&SigAlg=.." exactly as the parameters appear in the URL.
func verifyRedirectSignature(t *testing.T, rawQuery, msgParam string) {
	t.Helper()
	raw := map[string]string{}
	for _, part := range strings.Split(rawQuery, "&") {
		k, _, _ := strings.Cut(part, "=")
		raw[k] = part
	}
	var signed []string
	for _, k := range []string{msgParam, "RelayState", "SigAlg"} {
		if p, ok := raw[k]; ok {
			signed = append(signed, p)
		}
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if got := q.Get("SigAlg"); got != dsig.RSASHA256SignatureMethod {
		t.Fatalf("SigAlg = %q, want %q", got, dsig.RSASHA256SignatureMethod)
	}
	sig, err := base64.StdEncoding.DecodeString(q.Get("Signature"))
	if err != nil || len(sig) == 0 {
		t.Fatalf("Signature missing or not base64: %v", err)
	}
	digest := sha256.Sum256([]byte(strings.Join(signed, "&")))
	pub := keyPair(t, "sp").cert.PublicKey.(*rsa.PublicKey)
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig); err != nil {
		t.Fatalf("redirect signature does not verify with the SP certificate: %v", err)
	}
}

// rewriteResponse applies f to the decoded SAMLResponse XML.
func rewriteResponse(t *testing.T, b64 string, f func(t *testing.T, doc []byte) []byte) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("SAMLResponse base64: %v", err)
	}
	return base64.StdEncoding.EncodeToString(f(t, raw))
}

// flipByte replaces the first occurrence of old, which must be present, with new (same length).
func flipByte(old, new string) func(*testing.T, []byte) []byte {
	return func(t *testing.T, doc []byte) []byte {
		t.Helper()
		if !bytes.Contains(doc, []byte(old)) {
			t.Fatalf("response does not contain %q", old)
		}
		return bytes.Replace(doc, []byte(old), []byte(new), 1)
	}
}

var cipherValueRE = regexp.MustCompile(`CipherValue>([A-Za-z0-9+/=\s]+)<`)

// flipCipherByte changes one base64 character of the encrypted assertion's ciphertext.
func flipCipherByte(t *testing.T, doc []byte) []byte {
	t.Helper()
	m := cipherValueRE.FindAllSubmatchIndex(doc, -1)
	if len(m) == 0 {
		t.Fatal("response has no CipherValue; is the assertion encrypted?")
	}
	last := m[len(m)-1]
	i := (last[2] + last[3]) / 2
	for doc[i] == '=' || doc[i] == '\n' || doc[i] == ' ' {
		i--
	}
	out := bytes.Clone(doc)
	if out[i] == 'A' {
		out[i] = 'B'
	} else {
		out[i] = 'A'
	}
	return out
}

func stripAllSignatures(t *testing.T, doc []byte) []byte {
	t.Helper()
	d := etree.NewDocument()
	if err := d.ReadFromBytes(doc); err != nil {
		t.Fatalf("parse response: %v", err)
	}
	sigs := d.FindElements("//Signature")
	if len(sigs) == 0 {
		t.Fatal("response carries no Signature to strip")
	}
	for _, el := range sigs {
		el.Parent().RemoveChild(el)
	}
	out, err := d.WriteToBytes()
	if err != nil {
		t.Fatalf("write response: %v", err)
	}
	return out
}

func TestSAMLEndToEnd(t *testing.T) {
	alice := User{Email: "alice@example.com", FirstName: "Alice", LastName: "Liddell"}
	tests := []struct {
		name      string
		opts      fixtureOpts
		next      string
		issue     issueOpts
		relay     string // overrides the RelayState the IdP posts back, when set
		wantUser  User
		wantRelay string
	}{
		{
			name:      "encrypted assertion, NameID is the email",
			wantUser:  alice,
			wantRelay: "/",
		},
		{
			name:      "plaintext assertion, next path kept",
			opts:      fixtureOpts{plaintext: true},
			next:      "/v1/credentials/abc?view=full&x=1",
			wantUser:  alice,
			wantRelay: "/v1/credentials/abc?view=full&x=1",
		},
		{
			name: "email attribute wins over opaque NameID, first_name/last_name spelling",
			issue: issueOpts{session: &saml.Session{
				CreateTime:   time.Now(),
				NameID:       "u-8d7f",
				NameIDFormat: string(saml.PersistentNameIDFormat),
				CustomAttributes: []saml.Attribute{
					basicAttr("email", "alice@example.com"),
					basicAttr("first_name", "Alice"),
					basicAttr("last_name", "Liddell"),
				},
			}},
			wantUser:  alice,
			wantRelay: "/",
		},
		{
			name: "only the Response is signed and assertions need not be",
			opts: fixtureOpts{plaintext: true, cfg: func(c *SAMLConfig) { c.WantAssertionsSigned = false }},
			issue: issueOpts{mutate: func(r *saml.IdpAuthnRequest) {
				r.AssertionEl = r.Assertion.Element()
			}},
			wantUser:  alice,
			wantRelay: "/",
		},
		{
			name:      "absolute next is not used as RelayState",
			next:      "https://evil.example/phish",
			wantUser:  alice,
			wantRelay: "/",
		},
		{
			name:      "RelayState forged to an absolute URL is replaced",
			relay:     "https://evil.example",
			wantUser:  alice,
			wantRelay: "/",
		},
		{
			name:      "RelayState pointing back at the ACS is replaced",
			relay:     "/v1/saml/consume",
			wantUser:  alice,
			wantRelay: "/",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSAMLFixture(t, tc.opts)
			flow := f.start(t, tc.next, nil)

			ar := flow.authn
			if ar.Destination != testIdPSSO {
				t.Errorf("AuthnRequest Destination = %q, want %q", ar.Destination, testIdPSSO)
			}
			if ar.AssertionConsumerServiceURL != testACSURL {
				t.Errorf("AuthnRequest ACS URL = %q, want %q", ar.AssertionConsumerServiceURL, testACSURL)
			}
			if ar.ProtocolBinding != saml.HTTPPostBinding {
				t.Errorf("AuthnRequest ProtocolBinding = %q, want HTTP-POST", ar.ProtocolBinding)
			}
			if ar.Issuer == nil || ar.Issuer.Value != testEntityID {
				t.Errorf("AuthnRequest Issuer = %+v, want %q", ar.Issuer, testEntityID)
			}
			if ar.NameIDPolicy == nil || ar.NameIDPolicy.Format == nil || *ar.NameIDPolicy.Format != string(saml.EmailAddressNameIDFormat) {
				t.Errorf("AuthnRequest NameIDPolicy = %+v, want emailAddress", ar.NameIDPolicy)
			}
			c := flow.cookie
			if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteNoneMode || c.Path != "/v1/saml" || c.MaxAge != 300 {
				t.Errorf("tracking cookie = %+v, want HttpOnly Secure SameSite=None Path=/v1/saml MaxAge=300", c)
			}

			f.issue(t, &flow, tc.issue)
			if flow.form.URL != testACSURL {
				t.Errorf("IdP posts to %q, want %q", flow.form.URL, testACSURL)
			}
			if tc.relay != "" {
				flow.form.RelayState = tc.relay
			}
			user, relay, err := f.sp.Consume(flow.consumeRequest())
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
			if *user != tc.wantUser {
				t.Errorf("user = %+v, want %+v", *user, tc.wantUser)
			}
			if relay != tc.wantRelay {
				t.Errorf("relay state = %q, want %q", relay, tc.wantRelay)
			}
		})
	}
}

func TestSAMLConsumeRejects(t *testing.T) {
	tests := []struct {
		name       string
		opts       fixtureOpts
		loginClock time.Duration // offset of the SP clock during Login
		issue      issueOpts
		alter      func(t *testing.T, f *samlFixture, flow samlFlow, r *Request)
		reason     string
	}{
		{
			name: "tampered attribute value in a signed plaintext assertion",
			opts: fixtureOpts{plaintext: true},
			alter: func(t *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Form.Set("SAMLResponse", rewriteResponse(t, r.Form.Get("SAMLResponse"), flipByte(">Alice<", ">Blice<")))
			},
			reason: "signature",
		},
		{
			// WantAssertionsSigned ignores the envelope signature, so this fails either in
			// decryption or on the assertion's signature depending on what the garbled CBC
			// block decrypts to; both are rejections.
			name: "tampered ciphertext of an encrypted assertion",
			alter: func(t *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Form.Set("SAMLResponse", rewriteResponse(t, r.Form.Get("SAMLResponse"), flipCipherByte))
			},
			reason: "SAML response rejected",
		},
		{
			name: "tampered ciphertext under a signed Response",
			opts: fixtureOpts{cfg: func(c *SAMLConfig) { c.WantAssertionsSigned = false }},
			alter: func(t *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Form.Set("SAMLResponse", rewriteResponse(t, r.Form.Get("SAMLResponse"), flipCipherByte))
			},
			reason: "cannot validate signature on Response",
		},
		{
			name: "all signatures stripped",
			opts: fixtureOpts{plaintext: true, cfg: func(c *SAMLConfig) { c.WantAssertionsSigned = false }},
			alter: func(t *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Form.Set("SAMLResponse", rewriteResponse(t, r.Form.Get("SAMLResponse"), stripAllSignatures))
			},
			reason: "signature",
		},
		{
			name: "WantAssertionsSigned and only the Response is signed",
			opts: fixtureOpts{plaintext: true},
			issue: issueOpts{mutate: func(r *saml.IdpAuthnRequest) {
				r.AssertionEl = r.Assertion.Element()
			}},
			reason: "signature",
		},
		{
			name:   "signed by another IdP key",
			opts:   fixtureOpts{idpKey: "other-idp"},
			reason: "cannot validate signature",
		},
		{
			name:   "expired assertion (IdP clock an hour behind)",
			issue:  issueOpts{idpClock: -time.Hour},
			reason: "expired",
		},
		{
			name: "assertion for another audience",
			issue: issueOpts{mutate: func(r *saml.IdpAuthnRequest) {
				r.Assertion.Conditions.AudienceRestrictions[0].Audience.Value = "https://other-sp.example.com/metadata"
			}},
			reason: "AudienceRestriction",
		},
		{
			name: "response addressed to another destination",
			issue: issueOpts{mutate: func(r *saml.IdpAuthnRequest) {
				r.ACSEndpoint = &saml.IndexedEndpoint{Binding: saml.HTTPPostBinding, Location: "https://other-sp.example.com/acs"}
			}},
			reason: "Destination",
		},
		{
			name: "assertion from another issuer",
			issue: issueOpts{mutate: func(r *saml.IdpAuthnRequest) {
				r.Assertion.Issuer.Value = "https://evil-idp.example.com"
			}},
			reason: "issuer",
		},
		{
			name: "response to a request this browser did not make",
			alter: func(t *testing.T, f *samlFixture, _ samlFlow, r *Request) {
				other := f.start(t, "", nil)
				r.Cookies[SAMLRequestCookie] = other.cookie.Value
			},
			reason: "InResponseTo",
		},
		{
			name: "missing tracking cookie (unsolicited)",
			alter: func(_ *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				delete(r.Cookies, SAMLRequestCookie)
			},
			reason: "unsolicited",
		},
		{
			name: "tracking cookie forged with another key",
			alter: func(t *testing.T, _ *samlFixture, flow samlFlow, r *Request) {
				forger, err := newCookieSigner([]byte("an-attacker-chosen-secret-of-32-bytes!"))
				if err != nil {
					t.Fatal(err)
				}
				exp := time.Now().Add(time.Minute)
				v, err := forger.seal(SAMLRequestCookie, samlTracker{Requests: []trackedRequest{{ID: flow.authn.ID, Exp: exp.Unix()}}}, exp)
				if err != nil {
					t.Fatal(err)
				}
				r.Cookies[SAMLRequestCookie] = v
			},
			reason: "unsolicited",
		},
		{
			name:       "expired tracking cookie",
			loginClock: -(samlRequestTTL + time.Second),
			reason:     "unsolicited",
		},
		{
			name: "not a POST",
			alter: func(_ *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Method = http.MethodGet
			},
			reason: "POST",
		},
		{
			name: "missing SAMLResponse",
			alter: func(_ *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Form.Del("SAMLResponse")
			},
			reason: "missing SAMLResponse",
		},
		{
			name: "SAMLResponse not base64",
			alter: func(_ *testing.T, _ *samlFixture, _ samlFlow, r *Request) {
				r.Form.Set("SAMLResponse", "%%%not-base64%%%")
			},
			reason: "base64",
		},
		{
			// crewjam dereferences Conditions unchecked; Consume must turn that into a rejection.
			name: "validly signed assertion without Conditions",
			issue: issueOpts{mutate: func(r *saml.IdpAuthnRequest) {
				r.Assertion.Conditions = nil
			}},
			reason: "malformed SAML response",
		},
		{
			name: "assertion without any email",
			issue: issueOpts{session: &saml.Session{
				CreateTime:   time.Now(),
				NameIDFormat: string(saml.TransientNameIDFormat),
			}},
			reason: "no email",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSAMLFixture(t, tc.opts)
			if tc.loginClock != 0 {
				f.sp.now = func() time.Time { return time.Now().Add(tc.loginClock) }
			}
			flow := f.start(t, "", nil)
			f.sp.now = time.Now
			f.issue(t, &flow, tc.issue)
			req := flow.consumeRequest()
			if tc.alter != nil {
				tc.alter(t, f, flow, &req)
			}
			user, relay, err := f.sp.Consume(req)
			if user != nil || relay != "" {
				t.Errorf("Consume returned user %+v, relay %q alongside an error", user, relay)
			}
			wantNotAuthenticated(t, err, tc.reason)
			if strings.Contains(err.Error(), req.Form.Get("SAMLResponse")) && req.Form.Get("SAMLResponse") != "" {
				t.Error("error quotes the SAMLResponse")
			}
		})
	}
}

// TestSAMLParallelLogins covers two tabs logging in at once: both requests stay tracked, and both
// responses are accepted, in either order.
func TestSAMLParallelLogins(t *testing.T) {
	f := newSAMLFixture(t, fixtureOpts{})
	first := f.start(t, "/first", nil)
	second := f.start(t, "/second", map[string]string{SAMLRequestCookie: first.cookie.Value})
	f.issue(t, &first, issueOpts{})
	f.issue(t, &second, issueOpts{})

	for _, tc := range []struct {
		name      string
		flow      samlFlow
		wantRelay string
	}{
		{"first tab", first, "/first"},
		{"second tab", second, "/second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.flow.consumeRequest()
			req.Cookies[SAMLRequestCookie] = second.cookie.Value // the browser holds the latest cookie
			user, relay, err := f.sp.Consume(req)
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
			if user.Email != "alice@example.com" || relay != tc.wantRelay {
				t.Errorf("got %q, %q; want alice@example.com, %q", user.Email, relay, tc.wantRelay)
			}
		})
	}

	t.Run("oldest requests are forgotten", func(t *testing.T) {
		cookies := map[string]string{SAMLRequestCookie: first.cookie.Value}
		for i := 0; i < maxTrackedRequests; i++ {
			cookies[SAMLRequestCookie] = f.start(t, "", cookies).cookie.Value
		}
		req := first.consumeRequest()
		req.Cookies = cookies
		_, _, err := f.sp.Consume(req)
		wantNotAuthenticated(t, err, "InResponseTo")
	})
}

func TestSAMLLoginCookieAttributes(t *testing.T) {
	tests := []struct {
		name     string
		secure   bool
		sameSite http.SameSite
	}{
		{"secure deployment", true, http.SameSiteNoneMode},
		{"plain http development", false, http.SameSiteLaxMode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSAMLFixture(t, fixtureOpts{cfg: func(c *SAMLConfig) { c.CookieSecure = tc.secure }})
			c := f.start(t, "", nil).cookie
			if c.Secure != tc.secure || c.SameSite != tc.sameSite || !c.HttpOnly {
				t.Errorf("cookie = %+v, want Secure=%v SameSite=%v HttpOnly", c, tc.secure, tc.sameSite)
			}
			exp := f.sp.ExpireRequestCookie()
			if exp.Name != SAMLRequestCookie || exp.MaxAge != -1 || exp.Path != c.Path || exp.Value != "" {
				t.Errorf("ExpireRequestCookie = %+v", exp)
			}
		})
	}
}

func TestPostLoginPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/v1/credentials", "/v1/credentials"},
		{"/v1/credentials?a=1&b=2#frag", "/v1/credentials?a=1&b=2#frag"},
		{"https://evil.example", "/"},
		{"http://evil.example/x", "/"},
		{"//evil.example", "/"},
		{"/\\evil.example", "/"},
		{"/x\\y", "/"},
		{"javascript:alert(1)", "/"},
		{"evil.example", "/"},
		{"/\tevil", "/"},
		{"/v1/saml/consume", "/"},
		{"/v1/saml/consume/", "/"},
		{"/login", "/"},
		{"/v1/login?code=x", "/"},
		{"/loginhelp", "/loginhelp"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := postLoginPath(tc.in); got != tc.want {
				t.Errorf("postLoginPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestSAMLMetadata(t *testing.T) {
	for _, want := range []bool{true, false} {
		t.Run(fmt.Sprintf("WantAssertionsSigned=%v", want), func(t *testing.T) {
			f := newSAMLFixture(t, fixtureOpts{cfg: func(c *SAMLConfig) { c.WantAssertionsSigned = want }})
			resp := f.sp.Metadata()
			if resp.Status != http.StatusOK || resp.ContentType != "text/xml" {
				t.Fatalf("status %d content type %q, want 200 text/xml", resp.Status, resp.ContentType)
			}
			if !bytes.Contains(resp.Body, []byte(testACSURL)) || !bytes.Contains(resp.Body, []byte(testEntityID)) {
				t.Fatalf("metadata lacks ACS URL or entity ID:\n%s", resp.Body)
			}
			var ed saml.EntityDescriptor
			if err := xml.Unmarshal(resp.Body, &ed); err != nil {
				t.Fatalf("metadata is not XML: %v", err)
			}
			if ed.EntityID != testEntityID {
				t.Errorf("entityID = %q, want %q", ed.EntityID, testEntityID)
			}
			if len(ed.SPSSODescriptors) != 1 {
				t.Fatalf("got %d SPSSODescriptors", len(ed.SPSSODescriptors))
			}
			d := ed.SPSSODescriptors[0]
			if len(d.AssertionConsumerServices) != 1 || d.AssertionConsumerServices[0].Binding != saml.HTTPPostBinding || d.AssertionConsumerServices[0].Location != testACSURL {
				t.Errorf("ACS = %+v, want only HTTP-POST at %s", d.AssertionConsumerServices, testACSURL)
			}
			if len(d.SingleLogoutServices) != 1 || d.SingleLogoutServices[0].Location != testURLRoot+"/v1/saml/logout" {
				t.Errorf("SLO = %+v, want %s/v1/saml/logout", d.SingleLogoutServices, testURLRoot)
			}
			if len(d.NameIDFormats) != 1 || d.NameIDFormats[0] != saml.EmailAddressNameIDFormat {
				t.Errorf("NameIDFormats = %v, want emailAddress", d.NameIDFormats)
			}
			if d.WantAssertionsSigned == nil || *d.WantAssertionsSigned != want {
				t.Errorf("WantAssertionsSigned = %v, want %v", d.WantAssertionsSigned, want)
			}
			if d.AuthnRequestsSigned == nil || !*d.AuthnRequestsSigned {
				t.Error("AuthnRequestsSigned should be advertised: requests are signed")
			}
		})
	}
}

func TestSAMLDebug(t *testing.T) {
	alice := &User{Email: "alice@example.com", FirstName: "Alice", LastName: "Liddell"}
	tests := []struct {
		name       string
		debug      bool
		user       *User
		wantStatus int
		wantEmail  string
	}{
		{"disabled", false, alice, http.StatusForbidden, ""},
		{"enabled", true, alice, http.StatusOK, "alice@example.com"},
		{"enabled without session", true, nil, http.StatusOK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSAMLFixture(t, fixtureOpts{cfg: func(c *SAMLConfig) { c.Debug = tc.debug }})
			resp, err := f.sp.Debug(Request{Method: http.MethodGet}, tc.user)
			if err != nil {
				t.Fatalf("Debug: %v", err)
			}
			if resp.Status != tc.wantStatus {
				t.Fatalf("status = %d, want %d", resp.Status, tc.wantStatus)
			}
			if tc.wantStatus != http.StatusOK {
				if bytes.Contains(resp.Body, []byte("alice")) {
					t.Error("disabled debug endpoint leaks the session")
				}
				return
			}
			var body struct {
				Session map[string]string `json:"session"`
				Headers map[string]string `json:"headers"`
			}
			if err := json.Unmarshal(resp.Body, &body); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if body.Session == nil || body.Headers == nil {
				t.Errorf("body = %s, want session and headers objects", resp.Body)
			}
			if body.Session["email"] != tc.wantEmail {
				t.Errorf("session email = %q, want %q", body.Session["email"], tc.wantEmail)
			}
		})
	}
}

func TestSAMLLogout(t *testing.T) {
	alice := &User{Email: "alice@example.com"}
	tests := []struct {
		name      string
		noIdPSLO  bool
		query     url.Values
		user      *User
		wantLoc   string // exact Location, unless checkLogoutRequest
		logoutReq bool   // expect a signed LogoutRequest to the IdP
	}{
		{name: "start without a user", wantLoc: testIdPSLO},
		{name: "start with a user sends a LogoutRequest", user: alice, logoutReq: true},
		{name: "IdP LogoutResponse callback", query: url.Values{"SAMLResponse": {"x"}}, user: alice, wantLoc: "/loggedout"},
		{name: "IdP LogoutRequest callback", query: url.Values{"SAMLRequest": {"x"}}, wantLoc: "/loggedout"},
		{name: "no IdP logout endpoint", noIdPSLO: true, user: alice, wantLoc: "/loggedout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newSAMLFixture(t, fixtureOpts{cfg: func(c *SAMLConfig) {
				if tc.noIdPSLO {
					c.IdPSLOURL = ""
				}
			}})
			req := Request{Method: http.MethodGet, Path: samlLogoutPath, Query: tc.query}
			var resp *Response
			var err error
			if tc.user == nil {
				resp, err = f.sp.Logout(req)
			} else {
				resp, err = f.sp.LogoutUser(req, tc.user)
			}
			if err != nil {
				t.Fatalf("Logout: %v", err)
			}
			if resp.Status != http.StatusFound {
				t.Fatalf("status = %d, want 302", resp.Status)
			}
			if !tc.logoutReq {
				if resp.Location != tc.wantLoc {
					t.Errorf("Location = %q, want %q", resp.Location, tc.wantLoc)
				}
				return
			}
			loc, err := url.Parse(resp.Location)
			if err != nil {
				t.Fatal(err)
			}
			if got := loc.Scheme + "://" + loc.Host + loc.Path; got != testIdPSLO {
				t.Errorf("redirected to %q, want %q", got, testIdPSLO)
			}
			verifyRedirectSignature(t, loc.RawQuery, "SAMLRequest")
			raw := inflateParam(t, loc.Query().Get("SAMLRequest"))
			var lr saml.LogoutRequest
			if err := xml.Unmarshal(raw, &lr); err != nil {
				t.Fatalf("LogoutRequest XML: %v", err)
			}
			if lr.NameID == nil || lr.NameID.Value != alice.Email || lr.NameID.Format != string(saml.EmailAddressNameIDFormat) {
				t.Errorf("NameID = %+v, want emailAddress %s", lr.NameID, alice.Email)
			}
			if lr.Destination != testIdPSLO || lr.Issuer == nil || lr.Issuer.Value != testEntityID {
				t.Errorf("Destination %q Issuer %+v", lr.Destination, lr.Issuer)
			}
			if bytes.Contains(raw, []byte("SignatureValue")) {
				t.Error("redirect-binding LogoutRequest must not carry an enveloped signature")
			}
		})
	}
}

func TestNewSAMLValidation(t *testing.T) {
	other := keyPair(t, "other-idp")
	tests := []struct {
		name string
		mod  func(*SAMLConfig)
		want string
	}{
		{"missing URL root", func(c *SAMLConfig) { c.URLRoot = "" }, "SAML_CONFIDANT_URL_ROOT"},
		{"relative URL root", func(c *SAMLConfig) { c.URLRoot = "secrets.example.com" }, "SAML_CONFIDANT_URL_ROOT"},
		{"URL root with query", func(c *SAMLConfig) { c.URLRoot = "https://secrets.example.com/?x=1" }, "SAML_CONFIDANT_URL_ROOT"},
		{"missing SP cert", func(c *SAMLConfig) { c.SPCertPEM = nil }, "SAML_SP_CERT"},
		{"garbage SP key", func(c *SAMLConfig) { c.SPKeyPEM = []byte("not a key") }, "SAML_SP_KEY"},
		{"SP key does not match cert", func(c *SAMLConfig) { c.SPKeyPEM = other.keyPEM }, "SAML_SP_KEY"},
		{"missing IdP entity ID", func(c *SAMLConfig) { c.IdPEntityID = "" }, "SAML_IDP_ENTITY_ID"},
		{"missing IdP SSO URL", func(c *SAMLConfig) { c.IdPSSOURL = "" }, "SAML_IDP_SIGNON_URL"},
		{"relative IdP SLO URL", func(c *SAMLConfig) { c.IdPSLOURL = "/slo" }, "SAML_IDP_LOGOUT_URL"},
		{"IdP cert is a key", func(c *SAMLConfig) { c.IdPCertPEM = other.keyPEM }, "SAML_IDP_CERT"},
		{"short cookie secret", func(c *SAMLConfig) { c.CookieSecret = []byte("short") }, "cookie secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testSAMLConfig(t)
			tc.mod(&cfg)
			_, err := NewSAML(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewSAML error = %v, want mention of %s", err, tc.want)
			}
		})
	}
	t.Run("valid config with trailing slash and nil logger", func(t *testing.T) {
		cfg := testSAMLConfig(t)
		cfg.URLRoot += "/"
		s, err := NewSAML(cfg, nil)
		if err != nil {
			t.Fatalf("NewSAML: %v", err)
		}
		if got := s.acsURL.String(); got != testACSURL {
			t.Errorf("ACS = %q, want %q", got, testACSURL)
		}
	})
}

// FuzzConsume feeds arbitrary SAMLResponse values, raw and as base64-wrapped XML, through a
// service provider that has a request in flight. Nothing may panic and nothing may authenticate.
func FuzzConsume(f *testing.F) {
	fx := newSAMLFixture(f, fixtureOpts{plaintext: true})
	fixed := time.Now()
	fx.sp.now = func() time.Time { return fixed }
	resp, err := fx.sp.Login(Request{Method: http.MethodGet})
	if err != nil {
		f.Fatal(err)
	}
	cookie := resp.SetCookies[0].Value
	// A genuine IdP response, re-addressed to a request nobody made, seeds the corpus with
	// well-formed signed XML that must still be refused.
	idpReq, err := saml.NewIdpAuthnRequest(fx.idp, httptest.NewRequest(http.MethodGet, resp.Location, nil))
	if err != nil {
		f.Fatal(err)
	}
	if err := idpReq.Validate(); err != nil {
		f.Fatal(err)
	}
	if err := (saml.DefaultAssertionMaker{}).MakeAssertion(idpReq, aliceSession()); err != nil {
		f.Fatal(err)
	}
	idpReq.Request.ID = "id-not-tracked"
	form, err := idpReq.PostBinding()
	if err != nil {
		f.Fatal(err)
	}
	genuine, _ := base64.StdEncoding.DecodeString(form.SAMLResponse)

	f.Add(string(genuine), true)
	f.Add(form.SAMLResponse, false)
	f.Add("", false)
	f.Add("PD94bWw", false)
	f.Add(`<samlp:Response xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol"><saml:Assertion xmlns:saml="urn:oasis:names:tc:SAML:2.0:assertion"/></samlp:Response>`, true)
	f.Add(`<!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>`, true)

	f.Fuzz(func(t *testing.T, value string, encode bool) {
		if encode {
			value = base64.StdEncoding.EncodeToString([]byte(value))
		}
		user, _, err := fx.sp.Consume(Request{
			Method:  http.MethodPost,
			Form:    url.Values{"SAMLResponse": {value}, "RelayState": {"/"}},
			Cookies: map[string]string{SAMLRequestCookie: cookie},
		})
		if err == nil || user != nil {
			t.Fatalf("fuzzed response authenticated %+v", user)
		}
	})
}
