package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// progressManager reports two progress lines, waits, then returns its
// result. With keepalive set, it waits until that is closed (the stream
// sent a keepalive) or for at most wait, whichever comes first.
type progressManager struct {
	Manager   // unused methods panic
	wait      time.Duration
	keepalive <-chan struct{}
	err       error
}

func (m *progressManager) Create(ctx context.Context, req wire.CreateSandboxRequest, co sandbox.CreateOptions) (wire.Sandbox, error) {
	progress := co.Progress
	if progress == nil { // the plain create reports nothing
		progress = func(string) {}
	}
	progress("pulling " + req.Image)
	progress("setup: true")
	select {
	case <-m.keepalive: // nil: never
	case <-time.After(m.wait):
	}
	if m.err != nil {
		return wire.Sandbox{}, m.err
	}
	return wire.Sandbox{ID: "sb1", State: wire.StateRunning, Image: req.Image}, nil
}

func postCreate(t *testing.T, m Manager, query, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	serveCreate(m, query, body, rec)
	return rec
}

func serveCreate(m Manager, query, body string, w http.ResponseWriter) {
	h := New(Options{Manager: m, Token: "t", Log: slog.New(slog.DiscardHandler)}).Handler()
	req := httptest.NewRequest("POST", "/v1/sandboxes"+query, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer t")
	h.ServeHTTP(w, req)
}

// keepaliveRecorder records an answer and closes seen at its first
// keepalive line.
type keepaliveRecorder struct {
	*httptest.ResponseRecorder
	seen chan struct{}
	once sync.Once
}

func (r *keepaliveRecorder) Write(p []byte) (int, error) {
	if strings.Contains(string(p), `"type":"`+wire.CreateEventKeepalive+`"`) {
		r.once.Do(func() { close(r.seen) })
	}
	return r.ResponseRecorder.Write(p)
}

func (r *keepaliveRecorder) Unwrap() http.ResponseWriter { return r.ResponseRecorder }

// createLine is a line of the create stream: a CreateEvent, or the
// stream.error line with its detail.
type createLine struct {
	wire.CreateEvent
	Error *errdefs.Detail `json:"error,omitempty"`
}

func readCreateEvents(t *testing.T, rec *httptest.ResponseRecorder) []createLine {
	t.Helper()
	var evs []createLine
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		var ev createLine
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// withoutKeepalives drops keepalive lines and reports whether there was one.
func withoutKeepalives(evs []createLine) ([]createLine, bool) {
	var out []createLine
	seen := false
	for _, ev := range evs {
		if ev.Type == wire.CreateEventKeepalive {
			seen = true
			continue
		}
		out = append(out, ev)
	}
	return out, seen
}

func TestCreateProgressStream(t *testing.T) {
	// Not parallel: it shortens the package's keepalive interval.
	old := createKeepalive
	createKeepalive = 5 * time.Millisecond
	t.Cleanup(func() { createKeepalive = old })

	progress := []createLine{
		{CreateEvent: wire.CreateEvent{Type: wire.CreateEventProgress, Message: "pulling img"}},
		{CreateEvent: wire.CreateEvent{Type: wire.CreateEventProgress, Message: "setup: true"}},
	}
	tests := []struct {
		name string
		err  error
		last createLine
	}{
		{
			name: "success",
			last: createLine{CreateEvent: wire.CreateEvent{Type: wire.CreateEventSandbox, Sandbox: &wire.Sandbox{ID: "sb1", State: wire.StateRunning, Image: "img"}}},
		},
		{
			name: "failure",
			err:  fmt.Errorf("image %q is not on this host; build it with make image: %w", "img", errdefs.ErrNotFound),
			last: createLine{CreateEvent: wire.CreateEvent{Type: wire.EventStreamError}, Error: &errdefs.Detail{Code: "not_found"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The create lasts until the stream has sent a keepalive (a
			// fixed wait missed it on a loaded host), or 10 s.
			kr := &keepaliveRecorder{ResponseRecorder: httptest.NewRecorder(), seen: make(chan struct{})}
			serveCreate(&progressManager{wait: 10 * time.Second, keepalive: kr.seen, err: tt.err}, "?progress=true", `{"image":"img"}`, kr)
			rec := kr.ResponseRecorder
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", rec.Code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/x-ndjson" {
				t.Errorf("content type %q, want application/x-ndjson", ct)
			}
			got, keepalive := withoutKeepalives(readCreateEvents(t, rec))
			want := append(append([]createLine{}, progress...), tt.last)
			if tt.err != nil {
				want[len(want)-1].Error.Message = tt.err.Error()
			}
			// The request id is random; that it is there is the adapter's business.
			if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(errdefs.Detail{}, "RequestID")); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if !keepalive {
				t.Error("no keepalive during a 10 s create with a 5 ms interval")
			}
		})
	}
}

func TestCreateProgressPlainErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, query, body string
		field             string
	}{
		{"bad progress", "?progress=maybe", `{}`, "progress"},
		{"bad body", "?progress=true", `{"nope":1}`, "body"},
		{"bad image", "?progress=true", `{"image":"UPPER CASE"}`, "image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := postCreate(t, &progressManager{}, tt.query, tt.body)
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", rec.Code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q, want application/json", ct)
			}
			if !strings.Contains(rec.Body.String(), tt.field) {
				t.Errorf("body %s does not name %q", rec.Body, tt.field)
			}
		})
	}
}

func TestCreateWithoutProgressIsPlain(t *testing.T) {
	t.Parallel()
	rec := postCreate(t, &progressManager{}, "", `{"image":"img"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("status %d, want 201: %s", rec.Code, rec.Body)
	}
	var sb wire.Sandbox
	if err := json.Unmarshal(rec.Body.Bytes(), &sb); err != nil || sb.ID != "sb1" {
		t.Errorf("got %s (%v), want sandbox sb1", rec.Body, err)
	}
}
