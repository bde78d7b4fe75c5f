package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// fakeStats samples "run" and "pause", refuses "stop" as the manager does
// (a conflict) and does not know other ids. It records the disk max age it
// was asked for.
type fakeStats struct {
	sample func(id string) (wire.SandboxStats, error)
	maxAge atomic.Int64
}

func (f *fakeStats) Stats(ctx context.Context, id string, diskMaxAge time.Duration) (wire.SandboxStats, error) {
	f.maxAge.Store(int64(diskMaxAge))
	switch id {
	case "run", "pause":
		return f.sample(id)
	case "stop":
		return wire.SandboxStats{}, fmt.Errorf("sandbox stop is stopped; stats need a running or paused sandbox: %w", errdefs.ErrConflict)
	}
	return wire.SandboxStats{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

func statsServer(t *testing.T, stats Stats, metrics http.Handler) http.Handler {
	t.Helper()
	return New(Options{Token: "t", Stats: stats, Metrics: metrics, Log: slog.New(slog.DiscardHandler)}).Handler()
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer t")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestStatsRoute(t *testing.T) {
	t.Parallel()
	stats := &fakeStats{sample: func(id string) (wire.SandboxStats, error) {
		return wire.SandboxStats{ID: id, Pids: wire.PidsStats{Current: 1}}, nil
	}}
	h := statsServer(t, stats, nil)
	for _, tc := range []struct {
		path   string
		status int
		has    string
	}{
		{"/v1/sandboxes/run/stats", 200, `"pids":{"current":1`},
		{"/v1/sandboxes/pause/stats", 200, `"id":"pause"`},
		{"/v1/sandboxes/stop/stats", 409, "is stopped"},
		{"/v1/sandboxes/nope/stats", 404, "nope"},
		{"/v1/sandboxes/run/stats?stream=true&intervalMs=99", 400, "intervalMs"},
		{"/v1/sandboxes/run/stats?stream=true&intervalMs=60001", 400, "intervalMs"},
		{"/v1/sandboxes/run/stats?stream=true&intervalMs=x", 400, "intervalMs"},
		{"/v1/sandboxes/run/stats?stream=maybe", 400, "stream"},
		{"/metrics", 501, "not enabled"},
	} {
		rec := get(t, h, tc.path)
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
			t.Errorf("GET %s: %d %s, want %d with %q", tc.path, rec.Code, rec.Body, tc.status, tc.has)
		}
	}
	// A plain GET asks for a fresh walk of the workspace.
	stats.maxAge.Store(-1)
	if rec := get(t, h, "/v1/sandboxes/run/stats"); rec.Code != 200 || stats.maxAge.Load() != 0 {
		t.Errorf("GET stats: %d, disk max age %d; want 200 and 0", rec.Code, stats.maxAge.Load())
	}

	none := statsServer(t, nil, nil)
	if rec := get(t, none, "/v1/sandboxes/run/stats"); rec.Code != 501 {
		t.Errorf("stats without a Statter: %d, want 501", rec.Code)
	}
	served := statsServer(t, stats, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m 1\n") }))
	if rec := get(t, served, "/metrics"); rec.Code != 200 || rec.Body.String() != "m 1\n" {
		t.Errorf("metrics: %d %q", rec.Code, rec.Body)
	}
}

func TestStatsStream(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	stats := &fakeStats{sample: func(id string) (wire.SandboxStats, error) {
		if n.Add(1) > 3 {
			return wire.SandboxStats{}, fmt.Errorf("box went away: %w", errdefs.ErrConflict)
		}
		return wire.SandboxStats{ID: id, Time: time.Now()}, nil
	}}
	srv := httptest.NewServer(statsServer(t, stats, nil))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/sandboxes/run/stats?stream=true&intervalMs=100", nil)
	req.Header.Set("Authorization", "Bearer t")
	// Timed from before the request: the first samples may be written
	// before a loaded client gets to read the headers.
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("content type %q", ct)
	}
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct {
			wire.StatsEvent
			Error *errdefs.Detail `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		types = append(types, ev.Type)
		if ev.Type == wire.EventStreamError && (ev.Error == nil || ev.Error.Code != "conflict" || !strings.Contains(ev.Error.Message, "went away")) {
			t.Errorf("failure line %s, want a conflict that says the box went away", sc.Bytes())
		}
	}
	if want := "sample sample sample stream.error"; strings.Join(types, " ") != want {
		t.Errorf("events %v, want %s", types, want)
	}
	if got := time.Duration(stats.maxAge.Load()); got != streamDiskMaxAge {
		t.Errorf("stream's disk max age: got %s, want %s", got, streamDiskMaxAge)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("3 samples at 100ms took %s", el)
	}
	if errors.Is(sc.Err(), context.Canceled) {
		t.Error("stream did not end by itself")
	}
}
