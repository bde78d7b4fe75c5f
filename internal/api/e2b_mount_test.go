package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestE2BMount: /e2b/... goes to the E2B handler with the prefix stripped
// and without hotcell's bearer check (E2B checks its own credentials);
// a path that only starts with "e2b" stays on hotcell's API.
func TestE2BMount(t *testing.T) {
	var got []string
	e2b := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
	h := New(Options{Token: "t", E2B: e2b, Log: slog.New(slog.DiscardHandler)}).Handler()
	for path, want := range map[string]int{
		"/e2b/v2/sandboxes":          http.StatusTeapot,
		"/e2b/process.Process/Start": http.StatusTeapot,
		"/e2bx/v2/sandboxes":         http.StatusUnauthorized,
		"/v1/sandboxes":              http.StatusUnauthorized,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		if rec.Code != want {
			t.Errorf("%s: %d, want %d", path, rec.Code, want)
		}
	}
	if len(got) != 2 || got[0] == got[1] || (got[0] != "/v2/sandboxes" && got[0] != "/process.Process/Start") {
		t.Errorf("E2B handler saw %q", got)
	}
}
