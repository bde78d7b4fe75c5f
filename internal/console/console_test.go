package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// webDir is the console's sources, from this package's directory.
const webDir = "../../web"

// sourceHash is web/build.mjs's sourceHash: sha256 over
// "path\x00sha256(content)\n" of every file of web/ but node_modules, paths
// relative to web/ with "/", sorted by bytes.
func sourceHash(root string) (string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files) // Go compares strings by bytes, as build.mjs does
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return "", err
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(h, "%s\x00%s\n", f, hex.EncodeToString(sum[:]))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TestBundleIsFresh fails when web/ changed after the committed bundle was
// built: the bundle records the hash of the sources it came from.
func TestBundleIsFresh(t *testing.T) {
	t.Parallel()
	want, err := sourceHash(webDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fs.ReadFile(Dist, "source.sha256")
	if err != nil {
		t.Fatalf("the bundle has no source.sha256: build it (cd web && npm ci && npm run build): %v", err)
	}
	if strings.TrimSpace(string(got)) != want {
		t.Errorf("internal/console/dist is stale: it was built from web/ sources with hash %s, they now hash to %s; rebuild it with: cd web && npm ci && npm run build, and commit internal/console/dist",
			strings.TrimSpace(string(got)), want)
	}
}

// TestBundleSelfContained checks that the console asks nothing of another
// origin: the page loads only its own files, and neither the page nor the
// stylesheet names a URL elsewhere (fonts, images, scripts are embedded).
func TestBundleSelfContained(t *testing.T) {
	t.Parallel()
	index, err := fs.ReadFile(Dist, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{`src="/ui/app.js"`, `href="/ui/app.css"`} {
		if !bytes.Contains(index, []byte(ref)) {
			t.Errorf("index.html does not load %s", ref)
		}
	}
	for _, name := range []string{"index.html", "app.css", "app.js"} {
		b, err := fs.ReadFile(Dist, name)
		if err != nil {
			t.Fatalf("the bundle lacks %s: %v", name, err)
		}
		if name == "app.js" {
			// Script text may mention URLs (xterm's link detection does);
			// what matters is what it loads: nothing by import().
			if bytes.Contains(b, []byte("import(\"http")) || bytes.Contains(b, []byte("importScripts(")) {
				t.Errorf("app.js loads code from elsewhere")
			}
			continue
		}
		s := strings.ReplaceAll(string(b), `xmlns="http://www.w3.org/2000/svg"`, "")
		for _, bad := range []string{"http://", "https://", "//fonts.", "@import"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s names %q: the console must not load anything from another origin", name, bad)
			}
		}
		if name == "index.html" && strings.Count(s, "<script") != strings.Count(s, "<script type=\"module\" src=\"/ui/") {
			t.Errorf("index.html has a script that is not one of the bundle's files, which the CSP forbids")
		}
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	h := Handler()
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/ui/", 200, `<div id="app">`},
		{"GET", "/ui/sandboxes/sb-x", 200, `<div id="app">`}, // a reload of any page
		{"GET", "/ui/app.js", 200, ""},
		{"GET", "/ui/app.css", 200, ""},
		{"GET", "/ui", 302, ""},
		{"POST", "/ui/", 405, ""},
		{"GET", "/ui/../v1/sandboxes", 200, `<div id="app">`},
	} {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %.100q, want %d with %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.status, tc.body)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); csp != CSP {
			t.Errorf("%s %s: Content-Security-Policy %q, want %q", tc.method, tc.path, csp, CSP)
		}
		if rec.Code == http.StatusOK && rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: no X-Content-Type-Options: nosniff", tc.method, tc.path)
		}
	}
}
