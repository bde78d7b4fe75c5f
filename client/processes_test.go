package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// A log server that cuts the connection after every event: the reader must
// resume from the offset it reached and put the bytes together exactly.
func TestProcessLogsResume(t *testing.T) {
	t.Parallel()
	const text = "line 1\nline 2\nline 3\nline 4\n"
	var conns atomic.Int32
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sb/processes/42/logs" || r.URL.Query().Get("stream") != "stdout" || r.URL.Query().Get("follow") != "true" {
			t.Errorf("request %s", r.URL)
		}
		conns.Add(1)
		off, err := strconv.Atoi(r.URL.Query().Get("offset"))
		if err != nil {
			t.Errorf("offset %q", r.URL.Query().Get("offset"))
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		if off >= len(text) {
			_ = enc.Encode(LogEvent{Type: EventExit, ExitCode: 3})
			return
		}
		// Up to 5 bytes, then a cut mid-line.
		end := min(off+5, len(text))
		_ = enc.Encode(LogEvent{Type: EventKeepalive})
		_ = enc.Encode(LogEvent{Type: EventStdout, Offset: int64(off), Data: []byte(text[off:end])})
		_, _ = w.Write([]byte(`{"type":"std`))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	l, err := c.ProcessLogs(t.Context(), "sb", "42", LogOptions{Stream: EventStdout, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := io.ReadAll(l)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(got) != text {
		t.Errorf("got %q, want %q", got, text)
	}
	if exit, ok := l.Exit(); !ok || exit.ExitCode != 3 {
		t.Errorf("exit %+v %v, want 3", exit, ok)
	}
	if n := conns.Load(); n < 6 {
		t.Errorf("%d connections, want one per 5 bytes", n)
	}
	if l.Offset(EventStdout) != int64(len(text)) {
		t.Errorf("offset %d, want %d", l.Offset(EventStdout), len(text))
	}
}

func TestProcessLogsGivesUp(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stdoutOffset") != "0" {
			writeJSON(w, 404, map[string]any{"error": map[string]string{"code": "not_found", "message": "process gone"}})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_ = json.NewEncoder(w).Encode(LogEvent{Type: EventStdout, Offset: 0, Data: []byte("x")})
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	l, err := c.ProcessLogs(t.Context(), "sb", "42", LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(l)
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("got %v, want the daemon's not found on resumption", err)
	}
}

func TestProcessLogsIdleResumes(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		if conns.Add(1) == 1 {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select { // silent: the reader's idle timer must cut this
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_ = json.NewEncoder(w).Encode(LogEvent{Type: EventEnd})
	}, WithStreamIdleTimeout(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	l, err := c.ProcessLogs(ctx, "sb", "42", LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Next(); err != io.EOF {
		t.Errorf("got %v, want EOF after resuming", err)
	}
}
