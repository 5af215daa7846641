package secrets

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/b64url"
)

// errBadSession: a session cookie that is malformed, forged or expired.
var errBadSession = errors.New("secrets: invalid or expired session")

// sessions issues and checks browser sessions: a signed cookie (HMAC-SHA256 under a key derived from
// SESSION_SECRET) carrying the user and two expiries, a sliding one and an absolute one. No server
// state, so any replica can check any session.
type sessions struct {
	cookieName string
	key        []byte
	lifetime   time.Duration
	maxLife    time.Duration
	secure     bool
	xsrfCookie string
	now        func() time.Time
	// newID names a new session (randomSessionID; a test that must sign the same cookie in several
	// processes, as the fuzzer's workers do, fixes it).
	newID func() string
}

type session struct {
	Email     string `json:"e"`
	FirstName string `json:"f,omitempty"`
	LastName  string `json:"l,omitempty"`
	Issued    int64  `json:"i"`
	Expires   int64  `json:"x"`
	MaxExpiry int64  `json:"m"`
	// ID names the session for logout: random, set at login. Sessions opened before logout existed
	// have none; sessions.id derives one for them.
	ID string `json:"n,omitempty"`
}

func newSessions(cfg AuthConfig, xsrfCookie string) *sessions {
	key := sha256.Sum256([]byte("gantry session v1\x00" + cfg.SessionSecret))
	return &sessions{
		cookieName: cfg.SessionCookieName, key: key[:], lifetime: cfg.PermanentSessionLifetime,
		maxLife: cfg.MaxPermanentSessionLifetime, secure: cfg.SecureCookies, xsrfCookie: xsrfCookie,
		now: time.Now, newID: randomSessionID,
	}
}

// randomSessionID is 128 random bits, URL-safe.
func randomSessionID() string {
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (it panics on a broken system source)
	return base64.RawURLEncoding.EncodeToString(id[:])
}

func (s *sessions) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write([]byte(strconv.Itoa(len(p))))
		m.Write([]byte{':'})
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// start opens a session for a user who just logged in.
func (s *sessions) start(email, first, last string) *session {
	now := s.now().Unix()
	maxLife := s.maxLife
	if maxLife <= 0 || maxLife < s.lifetime {
		maxLife = s.lifetime
	}
	return &session{Email: email, FirstName: first, LastName: last, Issued: now,
		Expires: now + int64(s.lifetime/time.Second), MaxExpiry: now + int64(maxLife/time.Second),
		ID: s.newID()}
}

// id names a session for logout: its random ID, or for a session made before IDs existed a MAC of
// its user and issue time (every replica derives the same one).
func (s *sessions) id(sess *session) string {
	if sess.ID != "" {
		return sess.ID
	}
	return hex.EncodeToString(s.mac("session-id", sess.Email, strconv.FormatInt(sess.Issued, 10)))[:32]
}

// endedSessionKey is the login-nonce record of an ended session.
func endedSessionKey(id string) string { return "session-ended/" + id }

// slide extends a session by the sliding lifetime, never past its absolute expiry.
func (s *sessions) slide(sess *session) {
	sess.Expires = min(s.now().Unix()+int64(s.lifetime/time.Second), sess.MaxExpiry)
}

func (s *sessions) encode(sess *session) string {
	payload, _ := json.Marshal(sess)
	p := base64.RawURLEncoding.EncodeToString(payload)
	return p + "." + base64.RawURLEncoding.EncodeToString(s.mac("session", p))
}

func (s *sessions) decode(value string) (*session, error) {
	p, sig, ok := strings.Cut(value, ".")
	if !ok || len(value) > 4096 {
		return nil, errBadSession
	}
	got, err := b64url.Decode(sig)
	if err != nil || !hmac.Equal(got, s.mac("session", p)) {
		return nil, errBadSession
	}
	payload, err := b64url.Decode(p)
	if err != nil {
		return nil, errBadSession
	}
	var sess session
	if err := json.Unmarshal(payload, &sess); err != nil || sess.Email == "" {
		return nil, errBadSession
	}
	if now := s.now().Unix(); now >= sess.Expires || now >= sess.MaxExpiry {
		return nil, errBadSession
	}
	return &sess, nil
}

// cookie is the session cookie: HttpOnly, so scripts never see it.
func (s *sessions) cookie(sess *session) *http.Cookie {
	return &http.Cookie{Name: s.cookieName, Value: s.encode(sess), Path: "/", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteLaxMode, Expires: time.Unix(sess.Expires, 0).UTC()}
}

// xsrfToken is the value the XSRF cookie carries and writes must echo in X-XSRF-TOKEN for a session.
// It is derived from the user and the session's issue time, so it needs no server state, dies with
// the session and changes at every login.
func (s *sessions) xsrfToken(email string, issued int64) string {
	return hex.EncodeToString(s.mac("xsrf", email, strconv.FormatInt(issued, 10)))[:40]
}

// xsrfCookieFor is readable by the web UI's scripts (not HttpOnly), as AngularJS expects.
func (s *sessions) xsrfCookieFor(email string, issued int64) *http.Cookie {
	return s.xsrfCookieWith(s.xsrfToken(email, issued))
}

func (s *sessions) xsrfCookieWith(token string) *http.Cookie {
	return &http.Cookie{Name: s.xsrfCookie, Value: token, Path: "/", Secure: s.secure, SameSite: http.SameSiteLaxMode}
}

// checkXSRF compares the header with the expected token of a session in constant time.
func (s *sessions) checkXSRF(header, email string, issued int64) bool {
	return header != "" && hmac.Equal([]byte(header), []byte(s.xsrfToken(email, issued)))
}

// xsrfClockSkew is how far in the future a header login XSRF token's issue time may be: another
// replica whose clock runs a little ahead may have issued it.
const xsrfClockSkew = time.Minute

// headerXSRFLifetime is how long a header login XSRF token is valid: the session lifetime, as if the
// token opened a session of its own (a lifetime left unset falls back to Confidant's default).
func (s *sessions) headerXSRFLifetime() time.Duration {
	if s.lifetime <= 0 {
		return 43200 * time.Second
	}
	return s.lifetime
}

// headerXSRFToken is the XSRF token of a user logged in by trusted headers. Such a user has no session
// whose issue time the token could bind, so the token carries its own: "<unix issue time>.<MAC of the
// user and that time>". It is valid for headerXSRFLifetime, and a fresh one is set on every response,
// so a leaked token stops working instead of lasting as long as the email.
func (s *sessions) headerXSRFToken(email string, issued int64) string {
	at := strconv.FormatInt(issued, 10)
	return at + "." + hex.EncodeToString(s.mac("xsrf-header", email, at))[:40]
}

// headerXSRFCookie is a fresh header login XSRF cookie for email, issued now.
func (s *sessions) headerXSRFCookie(email string) *http.Cookie {
	return s.xsrfCookieWith(s.headerXSRFToken(email, s.now().Unix()))
}

// checkHeaderXSRF accepts a header login XSRF token made for email by this server (any replica with
// the same SESSION_SECRET), within its lifetime.
func (s *sessions) checkHeaderXSRF(header, email string) bool {
	at, _, ok := strings.Cut(header, ".")
	issued, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || strconv.FormatInt(issued, 10) != at {
		return false
	}
	now := s.now()
	issuedAt := time.Unix(issued, 0)
	if issuedAt.After(now.Add(xsrfClockSkew)) || !now.Before(issuedAt.Add(s.headerXSRFLifetime())) {
		return false
	}
	return hmac.Equal([]byte(header), []byte(s.headerXSRFToken(email, issued)))
}
