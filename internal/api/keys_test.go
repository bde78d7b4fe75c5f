package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/apikeys"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestAPIKeys drives key management and bearer keys through the handler,
// over real keys in a real SQLite store.
func TestAPIKeys(t *testing.T) {
	t.Parallel()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "hotcell.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := New(Options{Token: "admin-token", APIKeys: apikeys.New(st, nil), Log: slog.New(slog.DiscardHandler)}).Handler()

	call := func(method, path, bearer, body string) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	want := func(gotCode int, body string, code int, contains string) {
		t.Helper()
		if gotCode != code || !strings.Contains(body, contains) {
			t.Errorf("got %d %s, want %d containing %q", gotCode, body, code, contains)
		}
	}

	code, body := call("POST", "/v1/keys", "admin-token", `{"name":"ci"}`)
	want(code, body, http.StatusCreated, `"key":"e2b_`)
	var created wire.CreatedAPIKey
	if err := json.Unmarshal([]byte(body), &created); err != nil || !apikeys.WellFormed(created.Key) || created.Name != "ci" {
		t.Fatalf("create answer %s: %v", body, err)
	}
	key := created.Key

	code, body = call("POST", "/v1/keys", "admin-token", `{"name":"ci"}`)
	want(code, body, http.StatusConflict, "already_exists")
	code, body = call("POST", "/v1/keys", "admin-token", `{"name":"a/b"}`)
	want(code, body, http.StatusBadRequest, "name")
	code, body = call("POST", "/v1/keys", "admin-token", `{"nme":"x"}`)
	want(code, body, http.StatusBadRequest, "body")

	// The key opens the API, not key management.
	code, body = call("GET", "/v1/openapi.json", key, "")
	want(code, body, http.StatusOK, "openapi")
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/keys", ""},
		{"POST", "/v1/keys", `{"name":"more"}`},
		{"DELETE", "/v1/keys/ci", ""},
	} {
		code, body = call(c.method, c.path, key, c.body)
		want(code, body, http.StatusForbidden, "daemon's token")
	}

	code, body = call("GET", "/v1/keys", "admin-token", "")
	want(code, body, http.StatusOK, `"name":"ci"`)
	if strings.Contains(body, key) {
		t.Errorf("list shows the key: %s", body)
	}

	for _, bad := range []string{"", "e2b_" + strings.Repeat("0", 40), strings.ToUpper(key), key + "0", "admin-token0"} {
		code, body = call("GET", "/v1/openapi.json", bad, "")
		want(code, body, http.StatusUnauthorized, "unauthenticated")
	}

	code, body = call("DELETE", "/v1/keys/ci", "admin-token", "")
	want(code, body, http.StatusNoContent, "")
	code, body = call("GET", "/v1/openapi.json", key, "")
	want(code, body, http.StatusUnauthorized, "unauthenticated")
	code, body = call("DELETE", "/v1/keys/ci", "admin-token", "")
	want(code, body, http.StatusNotFound, "not_found")
	code, body = call("GET", "/v1/openapi.json", "admin-token", "")
	want(code, body, http.StatusOK, "openapi")
}
