package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// TestStalledClientFreesAgentWork: a client that asks for a stream and
// never reads loses it once a write has waited for the stream write
// timeout, and the agent's side of the request ends with it, for a
// forwarded stream (exec) and a proxied answer (a preview) alike.
func TestStalledClientFreesAgentWork(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, method, path, body string }{
		{"exec stream", "POST", "/v1/sandboxes/" + hostileID + "/exec?stream=true", `{"command":"yes"}`},
		{"preview", "GET", "/v1/sandboxes/" + hostileID + "/ports/8000/http/big", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			agentDone := make(chan struct{})
			// Like the agent's streams: the request's end (the daemon
			// closed the stream) also ends a write stuck on it.
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(agentDone)
				_, _ = io.Copy(io.Discard, r.Body)
				stop := context.AfterFunc(r.Context(), func() { _ = http.NewResponseController(w).SetWriteDeadline(time.Now()) })
				defer stop()
				w.Header().Set("Content-Type", "application/octet-stream")
				chunk := []byte(strings.Repeat("y\n", 32<<10))
				for {
					if _, err := w.Write(chunk); err != nil {
						return
					}
					w.(http.Flusher).Flush()
					if r.Context().Err() != nil {
						return
					}
				}
			})
			m := &agentManager{sb: wire.Sandbox{ID: hostileID, State: wire.StateRunning}, conn: fakeAgent(t, h)}
			s := New(Options{Manager: m, Token: "api-token", StreamWriteTimeout: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
			srv := httptest.NewServer(s.Handler())
			t.Cleanup(srv.Close)

			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.(*net.TCPConn).SetReadBuffer(4096)
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer api-token\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				tc.method, tc.path, len(tc.body), tc.body)
			// Never read: the agent's handler must still come to its end.
			select {
			case <-agentDone:
			case <-t.Context().Done():
				t.Fatal("the agent's side never ended")
			}
		})
	}
}
