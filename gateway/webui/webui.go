// Package webui is gantry's web interface for people: static HTML, one style sheet and small
// dependency-free ES modules, embedded in the binary and served by the gateway at / on the REST
// listener. The pages call the same REST API (/v1/...) as every other client, so authentication, the
// ACL, maintenance mode and the XSRF check apply to them unchanged; this package serves files only.
package webui

import (
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static admin
var files embed.FS

// AssetPrefix is the path under which the scripts and the style sheet are served.
const AssetPrefix = "/ui/"

// ContentSecurityPolicy allows only this origin's own files: no inline script or style, no
// eval, no framing, and requests to this origin only.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Serves reports whether the UI answers path: the page itself and its assets.
func Serves(p string) bool {
	return p == "/" || p == "/index.html" || strings.HasPrefix(p, AssetPrefix)
}

// Handler serves the page at / and the assets under AssetPrefix.
func Handler() http.Handler {
	static, _ := fs.Sub(files, "static")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := "index.html"
		if strings.HasPrefix(r.URL.Path, AssetPrefix) {
			name = path.Clean(strings.TrimPrefix(r.URL.Path, AssetPrefix))
		}
		data, err := fs.ReadFile(static, name)
		if err != nil || name == "index.html" && r.URL.Path != "/" && r.URL.Path != "/index.html" {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("Content-Type", contentType(name))
		// The files are embedded, so they change only with the binary; revalidating on each load
		// keeps an upgraded server from running old scripts. The page itself holds no values.
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(data)
	})
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "text/html; charset=utf-8"
}

// AdminHandler serves the admin listener's dashboard: the page for a browser's GET / (Accept:
// text/html; text clients keep Envoy's plain menu) and its script, which polls /clusters and /stats
// of the same listener. It returns false when the request is not for the dashboard.
func AdminHandler(w http.ResponseWriter, r *http.Request) bool {
	var name string
	switch {
	case r.URL.Path == "/" && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html"):
		name = "admin/index.html"
	case r.URL.Path == AssetPrefix+"admin.js":
		name = "admin/admin.js"
	case r.URL.Path == AssetPrefix+"app.css":
		name = "static/app.css"
	default:
		return false
	}
	data, _ := files.ReadFile(name)
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", contentType(name))
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(data)
	return true
}

// loginErrorPage is what a browser sees when a login route refuses it (a used or expired login link,
// an identity provider's answer not accepted): the API's message on a page, not raw JSON.
var loginErrorPage = template.Must(template.New("login-error").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Login failed · gantry</title>
<link rel="stylesheet" href="/ui/app.css">
</head>
<body>
<header class="top"><span class="brand">gantry</span></header>
<main id="main">
<h1>Login failed</h1>
<p class="error" role="alert">{{.}}</p>
<p>With the default configuration, run this where the data folder is and open the new link it prints (it works once, for 5 minutes):</p>
<pre>gantry login -user you@example.com</pre>
<p><a class="button" href="/">Back to gantry</a></p>
</main>
</body>
</html>
`))

// WantsLoginErrorPage reports whether a failed request is a browser's navigation to a login route,
// which gets WriteLoginErrorPage instead of the API's JSON error.
func WantsLoginErrorPage(r *http.Request) bool {
	if r.Method != http.MethodGet || !strings.Contains(r.Header.Get("Accept"), "text/html") {
		return false
	}
	return r.URL.Path == "/v1/login" || strings.HasPrefix(r.URL.Path, "/v1/saml/")
}

// WriteLoginErrorPage answers with the login error page: the status and message of the API's error
// (escaped; the message never holds the link's code), with the UI's security headers.
func WriteLoginErrorPage(w http.ResponseWriter, code int, message string) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = loginErrorPage.Execute(w, message)
}
