package loglimit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestAllow: each key has its own budget per interval; the first line let
// through after drops says how many there were; a new interval refills.
func TestAllow(t *testing.T) {
	t.Parallel()
	l := New(3, time.Minute)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if ok, d := l.Allow("a", t0); !ok || d != 0 {
			t.Fatalf("line %d: got %v %d, want true 0", i, ok, d)
		}
	}
	for i := range 5 {
		if ok, _ := l.Allow("a", t0.Add(time.Second)); ok {
			t.Fatalf("line %d past the budget: let through", 3+i)
		}
	}
	if ok, d := l.Allow("b", t0); !ok || d != 0 {
		t.Errorf("another key: got %v %d, want true 0 (keys share nothing)", ok, d)
	}
	if ok, d := l.Allow("a", t0.Add(time.Minute)); !ok || d != 5 {
		t.Errorf("next interval: got %v %d, want true 5", ok, d)
	}
	l.Allow("a", t0.Add(time.Minute))
	l.Allow("a", t0.Add(time.Minute))
	l.Allow("a", t0.Add(time.Minute)) // dropped
	if got := l.Forget("a"); got != 1 {
		t.Errorf("Forget: got %d dropped, want 1", got)
	}
	if got := l.Forget("a"); got != 0 {
		t.Errorf("Forget again: got %d, want 0", got)
	}
}

// TestPrune: the map of keys stays bounded; keys whose interval is over
// go first, but not one with drops to report.
func TestPrune(t *testing.T) {
	t.Parallel()
	l := New(1, time.Second)
	t0 := time.Unix(1000, 0)
	l.Allow("noisy", t0)
	l.Allow("noisy", t0) // dropped: must survive pruning
	for i := range maxKeys - 10 {
		l.Allow(fmt.Sprint("old", i), t0)
	}
	for i := range 100 {
		l.Allow(fmt.Sprint("new", i), t0.Add(2*time.Second))
	}
	if n := len(l.keys); n > maxKeys {
		t.Errorf("got %d keys, want at most %d", n, maxKeys)
	}
	if ok, d := l.Allow("noisy", t0.Add(3*time.Second)); !ok || d != 1 {
		t.Errorf("noisy after pruning: got %v %d, want true 1", ok, d)
	}
}

// TestLog: lines past the budget do not reach the handler, and the next
// one let through carries droppedLines.
func TestLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := New(2, time.Hour)
	for range 10 {
		l.Log(context.Background(), log, "sb", slog.LevelWarn, "noise")
	}
	if got := strings.Count(buf.String(), "noise"); got != 2 {
		t.Errorf("got %d lines, want 2:\n%s", got, buf.String())
	}
	l.mu.Lock()
	l.keys["sb"].start = time.Now().Add(-2 * time.Hour)
	l.mu.Unlock()
	l.Log(context.Background(), log, "sb", slog.LevelWarn, "again")
	if !strings.Contains(buf.String(), "droppedLines=8") {
		t.Errorf("the line after the drops does not say how many:\n%s", buf.String())
	}
}
