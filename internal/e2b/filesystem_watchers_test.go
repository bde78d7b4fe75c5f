package e2b

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// addTestWatcher registers a watcher as fsCreateWatcher does, without a
// watch behind it.
func addTestWatcher(reg *watchers, sb, id string) (*watcher, *bool) {
	cancelled := false
	w := &watcher{polled: make(chan struct{}, 1), done: make(chan struct{}), cancel: func() { cancelled = true }}
	reg.byID[sb+"/"+id] = w
	reg.per[sb]++
	return w, &cancelled
}

func TestWatchersRegistry(t *testing.T) {
	t.Parallel()
	reg := newWatchers()
	w, cancelled := addTestWatcher(reg, "sbA", "w1")
	addTestWatcher(reg, "sbA", "w2")

	// Another sandbox does not see A's watchers.
	if _, err := reg.events("sbB", "w1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("events from another sandbox: %v, want not found", err)
	}
	if err := reg.remove("sbB", "w1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("remove from another sandbox: %v, want not found", err)
	}

	// A poll drains what is buffered, and notes the poll.
	w.events = []filesystemEvent{{Name: "a", Type: "EVENT_TYPE_CREATE"}}
	got, err := reg.events("sbA", "w1")
	if err != nil || len(got.Events) != 1 || got.Events[0].Name != "a" {
		t.Fatalf("events: %+v %v", got, err)
	}
	select {
	case <-w.polled:
	default:
		t.Errorf("the poll was not noted")
	}
	if got, err := reg.events("sbA", "w1"); err != nil || got.Events == nil || len(got.Events) != 0 {
		t.Errorf("second poll: %+v %v, want an empty list", got, err)
	}

	// A watch that ended: its last events, then its error, then gone.
	w.events = []filesystemEvent{{Name: "b", Type: "EVENT_TYPE_WRITE"}}
	w.err = fmt.Errorf("the agent's watch ended: %w", errdefs.ErrUnavailable)
	if got, err := reg.events("sbA", "w1"); err != nil || len(got.Events) != 1 {
		t.Errorf("events before the error: %+v %v", got, err)
	}
	if _, err := reg.events("sbA", "w1"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("events after the end: %v, want its error", err)
	}
	if _, err := reg.events("sbA", "w1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("events once the error was told: %v, want not found", err)
	}
	if !*cancelled {
		t.Errorf("the forgotten watcher's watch was not stopped")
	}
	select {
	case <-w.done:
	default:
		t.Errorf("the forgotten watcher's done is open")
	}

	// Remove stops it and frees the sandbox's count.
	if err := reg.remove("sbA", "w2"); err != nil {
		t.Fatal(err)
	}
	if n := len(reg.byID) + len(reg.per); n != 0 {
		t.Errorf("the registry holds %d entries after everything was removed", n)
	}
	reg.forget("sbA", "sbA/w2") // twice is harmless
}
