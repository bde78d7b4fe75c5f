package client

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// linesHandler answers path with NDJSON lines, then holds the stream open
// until the client leaves if hold is set.
func linesHandler(t *testing.T, path string, hold bool, lines ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			t.Errorf("got %s, want %s", r.URL.Path, path)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n")
		}
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	}
}

// TestHostEventsGoOnThroughSandboxErrors: a sandbox event of type "error"
// (a neighbour failed) is an event; only a stream.error line ends a
// follower, with the daemon's code.
func TestHostEventsGoOnThroughSandboxErrors(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, linesHandler(t, "/v1/events", false,
		`{"seq":7,"sandboxId":"a","type":"error","time":"2026-12-01T00:00:00Z","message":"its container was removed behind the daemon's back"}`,
		`{"type":"keepalive","time":"2026-12-01T00:00:01Z"}`,
		`{"seq":8,"sandboxId":"b","type":"created","time":"2026-12-01T00:00:02Z"}`,
		`{"type":"stream.error","error":{"code":"unavailable","message":"event log: database is locked","requestId":"r1"}}`,
	))
	s, err := c.FollowHostEvents(t.Context(), EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for {
		ev, err := s.Next()
		if err != nil {
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !errors.Is(err, ErrUnavailable) || !strings.Contains(ae.Message, "database is locked") {
				t.Errorf("end of the stream: got %v, want an *APIError 503 unavailable", err)
			}
			break
		}
		got = append(got, ev.SandboxID+":"+ev.Type)
	}
	if d := cmp.Diff([]string{"a:error", "b:created"}, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

func TestCreateBackupStream(t *testing.T) {
	t.Parallel()
	const path = "/v1/sandboxes/sb1/backups"
	tests := []struct {
		name  string
		lines []string
		hold  bool
		check func(Backup, error) bool
	}{
		{"done", []string{`{"type":"progress"}`, `{"type":"progress","bytes":10}`, `{"type":"backup","backup":{"id":"bk-1","size":10}}`}, false,
			func(b Backup, err error) bool { return err == nil && b.ID == "bk-1" }},
		{"failure line", []string{`{"type":"progress","bytes":10}`, `{"type":"stream.error","error":{"code":"too_large","message":"disk full"}}`}, false,
			func(_ Backup, err error) bool {
				var ae *APIError
				return errors.As(err, &ae) && ae.Status == http.StatusRequestEntityTooLarge && errors.Is(err, ErrTooLarge)
			}},
		{"cut off", []string{`{"type":"progress","bytes":10}`}, false,
			func(_ Backup, err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }},
		// Before the shared reader, a backup stream had no idle timer.
		{"silent daemon", []string{`{"type":"progress","bytes":10}`}, true,
			func(_ Backup, err error) bool { return errors.Is(err, ErrDeadlineExceeded) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, linesHandler(t, path, tt.hold, tt.lines...), WithStreamIdleTimeout(200*time.Millisecond))
			var progress []int64
			b, err := c.CreateBackup(t.Context(), "sb1", BackupOptions{Progress: func(n int64) { progress = append(progress, n) }})
			if !tt.check(b, err) {
				t.Errorf("got %+v, %v", b, err)
			}
			if len(progress) == 0 {
				t.Error("no progress reported")
			}
		})
	}
}
