package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestPassThroughCutMidBody: an agent that fails half-way through an answer
// whose headers are out reaches the client as a broken transfer, with a
// length (file) or chunked (archive), never as a clean end of a short body.
func TestPassThroughCutMidBody(t *testing.T) {
	t.Parallel()
	half := strings.Repeat("x", 256<<10)
	for _, tc := range []struct {
		name, path string
		length     bool
	}{
		{"file with a length", "/v1/sandboxes/" + hostileID + "/files?path=/workspace/f", true},
		{"chunked archive", "/v1/sandboxes/" + hostileID + "/archive?path=/workspace", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := hostileServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.length {
					w.Header().Set("Content-Length", "1048576")
				}
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, half)
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the agent died
			}))
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+tc.path, nil)
			req.Header.Set("Authorization", "Bearer api-token")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("read %d bytes, then %v; want a broken transfer (unexpected EOF)", n, err)
			}
		})
	}
}

// TestAgentStreamFailureCarriesRequestID: the daemon passes its request id
// to the agent, so the failure line of an agent stream names the id the
// client got in X-Request-Id.
func TestAgentStreamFailureCarriesRequestID(t *testing.T) {
	t.Parallel()
	srv := hostileServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_ = json.NewEncoder(w).Encode(wire.StreamError{Type: wire.EventStreamError, Error: errdefs.Detail{
			Code: "not_found", Message: "watch /workspace/x: removed", RequestID: r.Header.Get("X-Request-Id"),
		}})
	}))
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/sandboxes/"+hostileID+"/watch?path=/workspace/x", nil)
	req.Header.Set("Authorization", "Bearer api-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var line wire.StreamError
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatalf("no line: %v", sc.Err())
	}
	if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if rid := resp.Header.Get("X-Request-Id"); rid == "" || line.Error.RequestID != rid {
		t.Errorf("failure line's request id %q, want the response's X-Request-Id %q", line.Error.RequestID, rid)
	}
}
