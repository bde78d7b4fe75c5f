package api

import (
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
)

// Watching is the agent's (inotify, in the sandbox); the daemon validates
// the request and passes the NDJSON stream through as it comes.

const (
	maxWatchDebounceMs = 60_000
	maxWatchExcludes   = 64
	maxWatchExcludeLen = 256
)

// watchRoutes registers the routes of this feature.
func (s *Server) watchRoutes() {
	s.handle("GET /v1/sandboxes/{id}/watch", s.watch)
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q, err := parseWatchQuery(r.URL.Query())
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodGet, "/v1/watch", q, nil, 0, true)
}

// parseWatchQuery validates a watch request and returns the agent's query.
func parseWatchQuery(in url.Values) (url.Values, error) {
	p := in.Get("path")
	if p == "" {
		p = fspath.Workspace
	}
	root, err := fspath.Resolve("path", p)
	if err != nil {
		return nil, err
	}
	q := url.Values{"path": {root}}
	if raw := in.Get("recursive"); raw != "" {
		rec, err := parseBool("recursive", raw)
		if err != nil {
			return nil, err
		}
		q.Set("recursive", strconv.FormatBool(rec))
	}
	if raw := in.Get("debounceMs"); raw != "" {
		ms, err := parseNonNegative("debounceMs", raw)
		if err != nil {
			return nil, err
		}
		if ms > maxWatchDebounceMs {
			return nil, errdefs.Invalid("debounceMs", "must be at most %d, got %d", maxWatchDebounceMs, ms)
		}
		q.Set("debounceMs", strconv.FormatInt(ms, 10))
	}
	if err := validateExcludes(in["exclude"]); err != nil {
		return nil, err
	}
	if ex := in["exclude"]; len(ex) > 0 {
		q["exclude"] = ex
	}
	return q, nil
}

// validateExcludes checks exclude patterns as the agent will read them:
// path.Match globs, matched against path segments (or, with a slash,
// against the path relative to the watched root).
func validateExcludes(pats []string) error {
	if len(pats) > maxWatchExcludes {
		return errdefs.Invalid("exclude", "at most %d patterns, got %d", maxWatchExcludes, len(pats))
	}
	for _, p := range pats {
		switch {
		case strings.Trim(p, "/") == "":
			return errdefs.Invalid("exclude", "pattern %q is empty", clip(p))
		case len(p) > maxWatchExcludeLen:
			return errdefs.Invalid("exclude", "pattern is longer than %d bytes", maxWatchExcludeLen)
		case strings.IndexByte(p, 0) >= 0:
			return errdefs.Invalid("exclude", "pattern contains a NUL byte")
		}
		// path.Match checks the whole pattern even when the name does not match.
		if _, err := path.Match(p, ""); err != nil {
			return errdefs.Invalid("exclude", "pattern %q does not parse: %v", clip(p), err)
		}
	}
	return nil
}
