package e2b

// The watcher trio (CreateWatcher, GetWatcherEvents, RemoveWatcher), which
// the Python SDK uses instead of WatchDir: a watch held by the daemon
// between polls. Each is one agent watch stream read by one goroutine into
// a bounded buffer. They are cheap and bounded: at most
// maxWatchersPerSandbox per sandbox and maxWatchers in all, at most
// maxWatcherEvents buffered each (more are dropped until the next poll),
// and one not polled for watcherIdle is removed. A watcher ends with its
// agent stream (the sandbox stopped, the directory went); its next poll
// answers the error and forgets it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

const (
	maxWatchersPerSandbox = 32
	maxWatchers           = 1024
	maxWatcherEvents      = 10_000
	watcherIdle           = 10 * time.Minute
)

type watchers struct {
	mu   sync.Mutex
	byID map[string]*watcher // sandbox id + "/" + watcher id
	per  map[string]int      // sandbox id → watchers
	// idle is how long a watcher may go unpolled; tests shorten it.
	idle time.Duration
}

type watcher struct {
	cancel context.CancelFunc
	polled chan struct{} // a poll happened (capacity 1)
	done   chan struct{} // closed when the registry forgets it

	mu      sync.Mutex
	events  []filesystemEvent
	dropped int
	err     error // the watch ended
}

func newWatchers() *watchers {
	return &watchers{byID: map[string]*watcher{}, per: map[string]int{}, idle: watcherIdle}
}

func (s *Server) fsCreateWatcher(r *http.Request, reg *watchers, req *watchDirRequest) (*createWatcherResponse, error) {
	c, root, err := s.watchTarget(r, req.Path)
	if err != nil {
		return nil, err
	}
	sb := SandboxID(r)
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := "w" + hex.EncodeToString(b[:])
	key := sb + "/" + id
	w := &watcher{polled: make(chan struct{}, 1), done: make(chan struct{}), cancel: func() {}}
	reg.mu.Lock()
	switch {
	case len(reg.byID) >= maxWatchers:
		reg.mu.Unlock()
		return nil, fmt.Errorf("the daemon holds %d watchers, its limit: remove some: %w", maxWatchers, errdefs.ErrTooLarge)
	case reg.per[sb] >= maxWatchersPerSandbox:
		reg.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s has %d watchers, its limit: remove some: %w", sb, maxWatchersPerSandbox, errdefs.ErrTooLarge)
	}
	reg.byID[key] = w
	reg.per[sb]++
	reg.mu.Unlock()

	// The watch outlives this request: it is owned by the registry and
	// ends on RemoveWatcher, when unpolled for reg.idle, or with its
	// agent stream.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	body, lines, err := c.openWatch(ctx, root, req.Recursive)
	if err != nil {
		cancel()
		reg.forget(sb, key)
		return nil, err
	}
	reg.mu.Lock()
	w.cancel = cancel
	gone := reg.byID[key] != w // removed meanwhile (it cannot be: the id was not out yet)
	reg.mu.Unlock()
	if gone {
		cancel()
	}
	go func() {
		<-ctx.Done()
		body.Close() // ends the reader below
	}()
	go func() {
		for {
			ev, err := nextWatchEvent(lines)
			if err != nil {
				w.mu.Lock()
				if ctx.Err() == nil {
					w.err = err
				} else {
					w.err = fmt.Errorf("watcher %s ended: %w", id, errdefs.ErrNotFound)
				}
				w.mu.Unlock()
				return
			}
			evs := toFilesystemEvents(root, ev)
			if req.IncludeEntry {
				for i := range evs {
					c.addEntry(ctx, root, &evs[i])
				}
			}
			w.mu.Lock()
			for _, fe := range evs {
				if len(w.events) >= maxWatcherEvents {
					w.dropped++
					continue
				}
				w.events = append(w.events, fe)
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		t := time.NewTimer(reg.idle)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-w.polled:
				t.Reset(reg.idle)
			case <-t.C:
				reg.forget(sb, key)
				return
			}
		}
	}()
	return &createWatcherResponse{WatcherID: id}, nil
}

func (reg *watchers) get(sb, id string) (*watcher, string, error) {
	key := sb + "/" + id
	reg.mu.Lock()
	w, ok := reg.byID[key]
	reg.mu.Unlock()
	if !ok {
		return nil, "", fmt.Errorf("watcher %.64q not found: %w", id, errdefs.ErrNotFound)
	}
	return w, key, nil
}

// forget drops a watcher and stops its watch.
func (reg *watchers) forget(sb, key string) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	w, ok := reg.byID[key]
	if !ok {
		return
	}
	delete(reg.byID, key)
	if reg.per[sb]--; reg.per[sb] <= 0 {
		delete(reg.per, sb)
	}
	w.cancel()
	close(w.done)
}

// events drains a watcher's buffer. A watcher whose watch ended answers
// what it still holds, then its error, and is forgotten.
func (reg *watchers) events(sb, id string) (*getWatcherEventsResponse, error) {
	w, key, err := reg.get(sb, id)
	if err != nil {
		return nil, err
	}
	select {
	case w.polled <- struct{}{}:
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.events
	w.events = nil
	if len(evs) == 0 && w.err != nil {
		reg.forget(sb, key)
		return nil, w.err
	}
	if evs == nil {
		evs = []filesystemEvent{}
	}
	return &getWatcherEventsResponse{Events: evs}, nil
}

func (reg *watchers) remove(sb, id string) error {
	_, key, err := reg.get(sb, id)
	if err != nil {
		return err
	}
	reg.forget(sb, key)
	return nil
}
