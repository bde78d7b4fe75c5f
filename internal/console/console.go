// Package console holds hotcell's web console: the static bundle built from
// web/ (npm run build there writes dist/), embedded so that `go build`
// alone makes the full binary, and the handler that serves it at /ui/ with
// a strict Content-Security-Policy. The console uses only the public API.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed dist
var distFS embed.FS

// Dist is the built bundle: index.html, app.js, app.css and source.sha256
// (the hash of web/ it was built from; see SourceHash).
var Dist, _ = fs.Sub(distFS, "dist")

// Prefix is where the console is served.
const Prefix = "/ui"

// CSP is the Content-Security-Policy of every console answer: scripts,
// styles, images and connections only from the daemon itself (no inline
// script, no eval, no other origin), no plugins, no framing. Inline style
// is allowed because xterm.js writes its theme and cell sizes into <style>
// elements it creates; no page content is ever inserted as markup, so
// style injection has no way in.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

// Handler serves the console's files under Prefix. Paths that name no file
// get index.html, so that a reload of any console page works.
func Handler() http.Handler {
	files := http.FileServerFS(Dist)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console's files are read with GET", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == Prefix {
			http.Redirect(w, r, Prefix+"/", http.StatusFound)
			return
		}
		name := strings.TrimPrefix(path.Clean(strings.TrimPrefix(r.URL.Path, Prefix)), "/")
		if name == "" || name == "source.sha256" || !exists(name) {
			name = "index.html"
		}
		if name == "index.html" {
			h.Set("Cache-Control", "no-cache")
		} else {
			h.Set("Cache-Control", "public, max-age=300")
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path = "/" + name
		if name == "index.html" {
			u.Path = "/" // FileServer redirects /index.html to ./
		}
		r2.URL = &u
		files.ServeHTTP(w, r2)
	})
}

func exists(name string) bool {
	st, err := fs.Stat(Dist, name)
	return err == nil && !st.IsDir()
}
