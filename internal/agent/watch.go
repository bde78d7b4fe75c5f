package agent

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/ndjson"
	"github.com/hotcell/hotcell/internal/wire"
)

// Watch streams file system changes under a path as NDJSON (the same
// framing as a streamed exec, so the daemon passes it through unchanged):
// GET /v1/watch?path=&recursive=&debounceMs=&exclude=... The stream starts
// with a "ready" event once every watch is in place and runs until the
// client hangs up, which closes the inotify instance and with it every
// watch. See wire.WatchEvent for the event types.

const (
	defaultWatchQueue = 4096
	maxWatchDebounce  = 60 * time.Second
	maxExcludes       = 64
	maxExcludeLen     = 256
	// maxDebouncePending bounds the paths held back by a debounce window;
	// past it they are sent at once rather than held in memory.
	maxDebouncePending = 10000
	// watchFailed marks the watcher's last event, when the watch cannot go
	// on; the stream turns it into its failure line.
	watchFailed = "failed"
	// watchChmod is a change of a file's attributes only (IN_ATTRIB),
	// reported as such with attrib=true (the E2B front's CHMOD events);
	// otherwise it is "modified".
	watchChmod = "chmod"
)

type watchService struct {
	h *handler
	// queue is the number of events buffered between the inotify reader
	// and the stream; when the client reads slower than changes happen it
	// fills and the loss is reported as an overflow event.
	queue int
}

// watchRoutes registers the watch stream and the disk usage walk.
func (h *handler) watchRoutes(mux *http.ServeMux) {
	s := &watchService{h: h, queue: defaultWatchQueue}
	mux.Handle("GET /v1/watch", h.adapt(s.watch))
	d := &diskService{h: h, cache: map[string]diskCacheEntry{}}
	mux.Handle("GET /v1/stats/disk", h.adapt(d.usage))
}

// watchSpec is a validated watch request.
type watchSpec struct {
	root      string
	recursive bool
	debounce  time.Duration
	exclude   excludeSet
	attrib    bool
}

func parseWatch(workspace string, q url.Values) (watchSpec, error) {
	var s watchSpec
	p := q.Get("path")
	if p == "" {
		p = workspace
	}
	var err error
	if s.root, err = fspath.ResolveIn(workspace, "path", p); err != nil {
		return s, err
	}
	s.recursive = true
	if q.Has("recursive") {
		if s.recursive, err = queryBool(q, "recursive"); err != nil {
			return s, err
		}
	}
	ms, err := queryInt64(q, "debounceMs", 0)
	if err != nil {
		return s, err
	}
	if ms > maxWatchDebounce.Milliseconds() {
		return s, errdefs.Invalid("debounceMs", "must be at most %d, got %d", maxWatchDebounce.Milliseconds(), ms)
	}
	s.debounce = time.Duration(ms) * time.Millisecond
	if s.exclude, err = parseExcludes(q["exclude"]); err != nil {
		return s, err
	}
	if s.attrib, err = queryBool(q, "attrib"); err != nil {
		return s, err
	}
	return s, nil
}

// excludeSet holds glob patterns (path.Match syntax). A pattern without a
// slash matches any one path segment, so ".git" hides every .git directory
// and everything under it and "*.tmp" every such file; a pattern with a
// slash matches the path relative to the watched root or any of its
// leading parts ("build/out" hides that directory and what is in it).
type excludeSet struct {
	segment  []string
	relative []string
}

func parseExcludes(pats []string) (excludeSet, error) {
	var s excludeSet
	if len(pats) > maxExcludes {
		return s, errdefs.Invalid("exclude", "at most %d patterns, got %d", maxExcludes, len(pats))
	}
	for _, p := range pats {
		switch {
		case p == "":
			return s, errdefs.Invalid("exclude", "pattern is empty")
		case len(p) > maxExcludeLen:
			return s, errdefs.Invalid("exclude", "pattern is longer than %d bytes", maxExcludeLen)
		case strings.IndexByte(p, 0) >= 0:
			return s, errdefs.Invalid("exclude", "pattern contains a NUL byte")
		}
		// path.Match checks the whole pattern even when the name does not
		// match, so a bad pattern is found here, not silently at match.
		if _, err := path.Match(p, ""); err != nil {
			return s, errdefs.Invalid("exclude", "pattern %q does not parse: %v", p, err)
		}
		p = strings.Trim(p, "/")
		if p == "" {
			return s, errdefs.Invalid("exclude", "pattern is only slashes")
		}
		if strings.Contains(p, "/") {
			s.relative = append(s.relative, p)
		} else {
			s.segment = append(s.segment, p)
		}
	}
	return s, nil
}

func (s excludeSet) empty() bool { return len(s.segment) == 0 && len(s.relative) == 0 }

// match reports whether rel, a slash-separated path relative to the watched
// root, or any directory above it, is excluded.
func (s excludeSet) match(rel string) bool {
	if s.empty() || rel == "" {
		return false
	}
	for _, p := range s.segment {
		for seg := range strings.SplitSeq(rel, "/") {
			if ok, _ := path.Match(p, seg); ok {
				return true
			}
		}
	}
	for _, p := range s.relative {
		for i := 0; i <= len(rel); i++ {
			if i == len(rel) || rel[i] == '/' {
				if ok, _ := path.Match(p, rel[:i]); ok {
					return true
				}
			}
		}
	}
	return false
}

func (s *watchService) watch(w http.ResponseWriter, r *http.Request) error {
	spec, err := parseWatch(s.h.workspace, r.URL.Query())
	if err != nil {
		return err
	}
	iw, err := newInotifyWatcher(spec, s.queue)
	if err != nil {
		return err
	}
	// Closing the instance drops every watch with it: a client that hangs
	// up leaves nothing behind in the kernel.
	defer iw.Close()
	go iw.run()

	out := ndjson.Start(w, r, ndjson.Options{
		WriteTimeout:   streamWriteDeadline,
		Keepalive:      s.h.opts.Keepalive,
		KeepaliveEvent: func() any { return wire.WatchEvent{Type: wire.WatchKeepalive, Time: time.Now().UTC()} },
		RequestID:      r.Header.Get("X-Request-Id"),
	})
	defer out.Close()
	if err := out.Send(wire.WatchEvent{Type: wire.WatchReady, Path: spec.root, Time: time.Now().UTC()}); err != nil {
		return nil
	}
	deb := newDebouncer(spec.debounce)
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	armFlush := func() {
		if at, ok := deb.next(); ok {
			flush.Reset(time.Until(at))
		}
	}
	send := func(evs []wire.WatchEvent) error {
		for _, e := range evs {
			if e.Type == watchFailed {
				if err := out.Fail(fmt.Errorf("watch %s: %s: %w", e.Path, e.Message, errdefs.ErrNotFound)); err != nil {
					return err
				}
				return ndjson.ErrEnded
			}
			if err := out.Send(e); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		select {
		case ev, ok := <-iw.out:
			if !ok {
				return nil // the watcher ended after its final event
			}
			if send(deb.add(ev, time.Now())) != nil {
				return nil
			}
			armFlush()
		case <-flush.C:
			if send(deb.due(time.Now())) != nil {
				return nil
			}
			armFlush()
		case <-out.Context().Done():
			return nil
		}
	}
}

// debouncer coalesces change events per path within a window: the first
// event of a path starts its window, later ones merge into it, and the
// merged event goes out when the window ends. Renames, overflows and errors
// are never held back; they first flush everything pending, so the order of
// what is sent still tells a true story.
type debouncer struct {
	window  time.Duration
	seq     uint64
	order   []debounceKey // deadlines are in order: every window is as long
	pending map[string]*debounced
}

type debounceKey struct {
	path string
	seq  uint64
}

type debounced struct {
	ev       wire.WatchEvent
	seq      uint64
	deadline time.Time
	// created marks a path that did not exist when its window opened, so
	// that a create and delete inside one window cancel out.
	created bool
}

func newDebouncer(window time.Duration) *debouncer {
	return &debouncer{window: window, pending: map[string]*debounced{}}
}

// add takes one event and returns what is to be sent now.
func (d *debouncer) add(ev wire.WatchEvent, now time.Time) []wire.WatchEvent {
	if d.window <= 0 {
		return []wire.WatchEvent{ev}
	}
	switch ev.Type {
	case wire.WatchCreated, wire.WatchModified, wire.WatchDeleted:
	default:
		return append(d.flushAll(), ev)
	}
	if p, ok := d.pending[ev.Path]; ok {
		switch {
		case ev.Type == wire.WatchDeleted && p.created:
			// Came and went inside the window: nothing to report.
			delete(d.pending, ev.Path)
		case ev.Type == wire.WatchDeleted:
			p.ev.Type, p.ev.FileType = wire.WatchDeleted, ev.FileType
		case ev.Type == wire.WatchCreated && p.ev.Type == wire.WatchDeleted:
			// Replaced (delete, then create): to a watcher that is a change.
			p.ev.Type, p.ev.FileType = wire.WatchModified, ev.FileType
		case p.ev.Type == wire.WatchCreated:
			// created + modified is still created.
		default:
			p.ev.Type = ev.Type
		}
		return nil
	}
	if len(d.pending) >= maxDebouncePending {
		return append(d.flushAll(), ev)
	}
	d.seq++
	d.pending[ev.Path] = &debounced{ev: ev, seq: d.seq, deadline: now.Add(d.window), created: ev.Type == wire.WatchCreated}
	d.order = append(d.order, debounceKey{ev.Path, d.seq})
	return nil
}

// live reports whether k still names a pending event (it may have been
// cancelled or flushed and the path pended anew).
func (d *debouncer) live(k debounceKey) (*debounced, bool) {
	p, ok := d.pending[k.path]
	return p, ok && p.seq == k.seq
}

// due returns the events whose window has ended by now.
func (d *debouncer) due(now time.Time) []wire.WatchEvent {
	var out []wire.WatchEvent
	for len(d.order) > 0 {
		k := d.order[0]
		p, ok := d.live(k)
		if ok && p.deadline.After(now) {
			break
		}
		d.order = d.order[1:]
		if ok {
			delete(d.pending, k.path)
			out = append(out, p.ev)
		}
	}
	if len(d.order) == 0 {
		d.order = nil // let the backing array go
	}
	return out
}

func (d *debouncer) flushAll() []wire.WatchEvent {
	var out []wire.WatchEvent
	for _, k := range d.order {
		if p, ok := d.live(k); ok {
			out = append(out, p.ev)
		}
	}
	d.order = nil
	clear(d.pending)
	return out
}

// next returns when the earliest pending window ends.
func (d *debouncer) next() (time.Time, bool) {
	for len(d.order) > 0 {
		if p, ok := d.live(d.order[0]); ok {
			return p.deadline, true
		}
		d.order = d.order[1:]
	}
	return time.Time{}, false
}
