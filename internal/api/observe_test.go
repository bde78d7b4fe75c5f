package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestObserveRequestSeesTheRoute: the metrics label requests by the route
// that served them, also for requests that passed authentication (which
// hands the mux a copy of the request carrying the caller).
func TestObserveRequestSeesTheRoute(t *testing.T) {
	var got []string
	h := New(Options{Token: "t", Log: slog.New(slog.DiscardHandler),
		ObserveRequest: func(r *http.Request, status int, _ time.Duration) { got = append(got, r.Pattern) },
	}).Handler()
	for _, path := range []string{"/healthz", "/v1/openapi.json"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer t")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(got) != 2 || got[0] != "GET /healthz" || got[1] != "GET /v1/openapi.json" {
		t.Fatalf("routes observed %q, want GET /healthz and GET /v1/openapi.json", got)
	}
}

// TestObserveRequestSeesTheRouteOfAnAbort: a handler that aborts its
// response (a stalled stream) is still counted under its route.
func TestObserveRequestSeesTheRouteOfAnAbort(t *testing.T) {
	var got string
	s := New(Options{Token: "t", Log: slog.New(slog.DiscardHandler),
		ObserveRequest: func(r *http.Request, status int, _ time.Duration) { got = r.Pattern },
	})
	s.handle("GET /v1/test-abort", func(w http.ResponseWriter, r *http.Request) error { panic(http.ErrAbortHandler) })
	req := httptest.NewRequest(http.MethodGet, "/v1/test-abort", nil)
	req.Header.Set("Authorization", "Bearer t")
	func() {
		defer func() { _ = recover() }()
		s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}()
	if got != "GET /v1/test-abort" {
		t.Fatalf("route observed %q, want GET /v1/test-abort", got)
	}
}
