// Package iamtest is an in-memory fake of AWS IAM's ListRoles that speaks the real wire protocol (the
// AWS Query protocol: form-encoded POST, XML answers), so tests run the production AWS SDK code —
// signing, serialisation, pagination and error decoding — without an AWS account.
//
// It answers ListRoles only. It checks that requests are signed for IAM but not the signature itself.
package iamtest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/xml"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// AccountID is the account in the fake's role ARNs.
const AccountID = "111122223333"

const (
	apiVersion   = "2010-05-08"
	xmlNamespace = "https://iam.amazonaws.com/doc/2010-05-08/"
	formType     = "application/x-www-form-urlencoded"
	// IAM's own bounds for MaxItems and its default when none is given.
	maxItemsLimit   = 1000
	defaultMaxItems = 100
	maxRequestBytes = 1 << 20
	// Every role gets the same creation date and an empty trust policy, URL-encoded as IAM sends it:
	// callers of ListRoles here only read names.
	createDate       = "2026-01-01T00:00:00Z"
	assumeRolePolicy = "%7B%7D"
)

// Server is a running fake IAM endpoint. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	roles    []string
	pageSize int
	requests int
	// pages records the listing pages served, by starting offset: a transport retry of one page
	// (the SDK's) is one page, not two.
	pages    map[int]bool
	failLeft int
	failWith apiError
}

type apiError struct {
	status  int
	code    string
	message string
}

// NewServer starts a fake IAM holding roles, listed in the order given (IAM's order is not
// alphabetical either, so callers must sort). Close it when done.
func NewServer(roles ...string) *Server {
	s := &Server{roles: slices.Clone(roles)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	return s
}

// URL is the endpoint to give the SDK (BaseEndpoint).
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server; later requests fail to connect, as when IAM is unreachable.
func (s *Server) Close() { s.srv.Close() }

// SetRoles replaces the account's roles.
func (s *Server) SetRoles(roles ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles = slices.Clone(roles)
}

// PageSize caps the roles in one answer below what the caller asked for, to test pagination without
// thousands of roles; 0 removes the cap.
func (s *Server) PageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageSize = n
}

// FailNext makes the next n requests answer with HTTP status and the IAM error code (e.g. 500
// "ServiceFailure", 400 "Throttling", 403 "AccessDenied"); n = 0 cancels pending failures.
func (s *Server) FailNext(n int, status int, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLeft = n
	s.failWith = apiError{status: status, code: code, message: "iamtest: injected failure"}
}

// Requests counts the requests received, including those answered by FailNext.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Pages counts the distinct ListRoles pages served (by starting offset). Unlike Requests it does not
// count a page twice when a client retried it after a transport failure, so a test of paging can
// assert it exactly on a loaded machine.
func (s *Server) Pages() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pages)
}

type errorResponse struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

type listRolesResponse struct {
	XMLName   xml.Name        `xml:"ListRolesResponse"`
	Namespace string          `xml:"xmlns,attr"`
	Result    listRolesResult `xml:"ListRolesResult"`
	RequestID string          `xml:"ResponseMetadata>RequestId"`
}

type listRolesResult struct {
	IsTruncated bool   `xml:"IsTruncated"`
	Marker      string `xml:"Marker,omitempty"`
	// A struct rather than "Roles>member" so an empty page still has its <Roles/>, as IAM sends it.
	Roles roleList `xml:"Roles"`
}

type roleList struct {
	Members []role `xml:"member"`
}

type role struct {
	Path                     string `xml:"Path"`
	RoleName                 string `xml:"RoleName"`
	RoleID                   string `xml:"RoleId"`
	Arn                      string `xml:"Arn"`
	CreateDate               string `xml:"CreateDate"`
	AssumeRolePolicyDocument string `xml:"AssumeRolePolicyDocument"`
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	// Parse before locking, so a slow client cannot stall the other requests.
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	parseErr := r.ParseForm()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.failLeft > 0 {
		s.failLeft--
		writeError(w, &s.failWith)
		return
	}
	if e := checkRequest(r, parseErr); e != nil {
		writeError(w, e)
		return
	}
	switch action := r.PostForm.Get("Action"); action {
	case "ListRoles":
		s.listRoles(w, r)
	default:
		writeError(w, &apiError{http.StatusBadRequest, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, apiVersion)})
	}
}

func checkRequest(r *http.Request, parseErr error) *apiError {
	if r.Method != http.MethodPost {
		return &apiError{http.StatusBadRequest, "InvalidAction", "the Query API takes POST here"}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != formType {
		return &apiError{http.StatusBadRequest, "MalformedInput", "Content-Type must be " + formType}
	}
	if parseErr != nil {
		return &apiError{http.StatusBadRequest, "MalformedInput", "cannot parse form: " + parseErr.Error()}
	}
	// A request signed for another service would be refused by IAM; catching it here catches a client
	// built with the wrong signing name.
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") {
		return &apiError{http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token"}
	}
	if !strings.Contains(auth, "/iam/aws4_request") {
		return &apiError{http.StatusForbidden, "SignatureDoesNotMatch", "Credential should be scoped to correct service: 'iam'."}
	}
	if v := r.PostForm.Get("Version"); v != apiVersion {
		return &apiError{http.StatusBadRequest, "InvalidParameterValue", fmt.Sprintf("Version %q is not %s", v, apiVersion)}
	}
	return nil
}

func validationError(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "ValidationError", fmt.Sprintf(format, args...)}
}

func (s *Server) listRoles(w http.ResponseWriter, r *http.Request) {
	limit := defaultMaxItems
	if v := r.PostForm.Get("MaxItems"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxItemsLimit {
			writeError(w, validationError("1 validation error detected: Value '%s' at 'maxItems' failed to satisfy constraint: Member must have value between 1 and %d", v, maxItemsLimit))
			return
		}
		limit = n
	}
	if s.pageSize > 0 {
		limit = min(limit, s.pageSize)
	}
	// Every role has the path "/", so a prefix either matches all of them or none.
	prefix := r.PostForm.Get("PathPrefix")
	matched := s.roles
	if prefix != "" && prefix != "/" {
		matched = nil
	}
	start := 0
	if m := r.PostForm.Get("Marker"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 0 || n > len(matched) {
			writeError(w, validationError("Invalid Marker: %s", m))
			return
		}
		start = n
	}
	end := min(start+limit, len(matched))
	if s.pages == nil { // s.mu is held (serveHTTP)
		s.pages = map[int]bool{}
	}
	s.pages[start] = true

	resp := listRolesResponse{Namespace: xmlNamespace, RequestID: newRequestID()}
	for _, name := range matched[start:end] {
		resp.Result.Roles.Members = append(resp.Result.Roles.Members, role{
			Path:                     "/",
			RoleName:                 name,
			RoleID:                   roleID(name),
			Arn:                      "arn:aws:iam::" + AccountID + ":role/" + name,
			CreateDate:               createDate,
			AssumeRolePolicyDocument: assumeRolePolicy,
		})
	}
	if end < len(matched) {
		resp.Result.IsTruncated = true
		resp.Result.Marker = strconv.Itoa(end)
	}
	writeXML(w, http.StatusOK, resp)
}

func writeError(w http.ResponseWriter, e *apiError) {
	typ := "Sender"
	if e.status >= 500 {
		typ = "Receiver"
	}
	writeXML(w, e.status, errorResponse{Type: typ, Code: e.code, Message: e.message, RequestID: newRequestID()})
}

func writeXML(w http.ResponseWriter, status int, v any) {
	data, err := xml.Marshal(v)
	if err != nil {
		// Only the fake's own types are marshalled; failing here is a bug in it.
		panic(fmt.Sprintf("iamtest: encode response: %v", err))
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", newRequestID())
	w.WriteHeader(status)
	w.Write([]byte(xml.Header))
	w.Write(data)
}

// roleID derives a stable IAM-style role id ("AROA" and 17 base-32 characters) from the name.
func roleID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "AROA" + base32.StdEncoding.EncodeToString(sum[:])[:17]
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
