package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// createStreamHandler checks the request and answers with lines.
func createStreamHandler(t *testing.T, lines ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/sandboxes" || r.URL.Query().Get("progress") != "true" {
			t.Errorf("got %s %s, want POST /v1/sandboxes?progress=true", r.Method, r.URL)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
			t.Errorf("authorization %q", got)
		}
		var req CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Image != "img" {
			t.Errorf("request body: %+v, %v", req, err)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n")
			w.(http.Flusher).Flush()
		}
	}
}

func TestCreateSandboxProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		lines    []string
		wantMsgs []string
		wantID   string
		wantErr  error  // class
		wantText string // in the error
		status   int    // of the *APIError, if any
	}{
		{
			name: "success",
			lines: []string{
				`{"type":"progress","message":"pulling img: done"}`,
				`{"type":"keepalive"}`,
				``,
				`{"type":"progress","message":"setup: make"}`,
				`{"type":"newer-daemon-type"}`,
				`{"type":"sandbox","sandbox":{"id":"sb1","state":"running"}}`,
			},
			wantMsgs: []string{"pulling img: done", "setup: make"},
			wantID:   "sb1",
		},
		{
			name: "failure line",
			lines: []string{
				`{"type":"progress","message":"pulling img"}`,
				`{"type":"stream.error","error":{"code":"not_found","message":"image img is not on this host; build it with make image"}}`,
			},
			wantMsgs: []string{"pulling img"},
			wantErr:  ErrNotFound,
			wantText: "create sandbox: image img is not on this host; build it with make image",
			status:   http.StatusNotFound,
		},
		{
			name:     "stream cut before the end",
			lines:    []string{`{"type":"progress","message":"cloning x"}`},
			wantMsgs: []string{"cloning x"},
			wantErr:  io.ErrUnexpectedEOF,
			wantText: "create sandbox: the stream was cut off before its final event",
		},
		{
			name:     "garbage line",
			lines:    []string{`not json`},
			wantText: "create sandbox: decode stream event",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, createStreamHandler(t, tt.lines...))
			var msgs []string
			sb, err := c.CreateSandboxProgress(t.Context(), CreateSandboxRequest{Image: "img"}, func(m string) { msgs = append(msgs, m) })
			if diff := cmp.Diff(tt.wantMsgs, msgs); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if tt.wantText == "" {
				if err != nil || sb.ID != tt.wantID {
					t.Fatalf("got %+v, %v; want sandbox %s", sb, err, tt.wantID)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantText)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want it to be %v", err, tt.wantErr)
			}
			var apiErr *APIError
			if tt.status != 0 && (!errors.As(err, &apiErr) || apiErr.Status != tt.status) {
				t.Errorf("got %#v, want an *APIError with status %d", err, tt.status)
			}
		})
	}
}

func TestCreateSandboxProgressPlainError(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "invalid_argument", "message": "image: bad"}})
	})
	called := false
	_, err := c.CreateSandboxProgress(t.Context(), CreateSandboxRequest{Image: "img"}, func(string) { called = true })
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("got %v, want a 400 *APIError", err)
	}
	if called {
		t.Error("progress called for a plain error")
	}
}

func TestCreateSandboxProgressIdle(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select { // a daemon gone silent: no keepalives
		case <-release:
		case <-r.Context().Done():
		}
	}, WithStreamIdleTimeout(50*time.Millisecond))
	_, err := c.CreateSandboxProgress(t.Context(), CreateSandboxRequest{Image: "img"}, nil)
	if !errors.Is(err, ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error for a silent stream", err)
	}
}
