package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// WatchEvent is one event of a watch stream.
type WatchEvent = wire.WatchEvent

// Watch event types (WatchEvent.Type).
const (
	WatchReady     = wire.WatchReady
	WatchCreated   = wire.WatchCreated
	WatchModified  = wire.WatchModified
	WatchDeleted   = wire.WatchDeleted
	WatchRenamed   = wire.WatchRenamed
	WatchOverflow  = wire.WatchOverflow
	WatchKeepalive = wire.WatchKeepalive
)

// WatchOptions say what to watch. The zero value watches /workspace and
// everything below it, sending each event at once.
type WatchOptions struct {
	// Path is the directory (or file) to watch; relative paths are under
	// /workspace. Default /workspace.
	Path string
	// NonRecursive watches only Path itself, not its subdirectories.
	NonRecursive bool
	// Debounce coalesces the events of each path within this window
	// (rounded down to milliseconds, at most a minute).
	Debounce time.Duration
	// Exclude holds glob patterns (path.Match syntax) of what not to
	// watch: one without a slash matches any path segment (".git",
	// "node_modules", "*.tmp"), one with a slash the path relative to Path.
	Exclude []string
}

// WatchStream is a running watch. Read it with Next or Events; Close it
// when done, which removes the watches in the sandbox. A WatchStream is not
// safe for concurrent use (Close may be called from another goroutine).
type WatchStream struct {
	s *ndjsonStream
	// Root is the watched path, as the sandbox resolved it.
	Root string
}

// Watch starts watching and returns once every watch is in place: changes
// made after it returns are reported. The stream runs until ctx ends or
// Close; it fails if the daemon stays silent (not even a keepalive) for
// longer than the stream idle timeout.
func (c *Client) Watch(ctx context.Context, id string, opts WatchOptions) (*WatchStream, error) {
	op := "watch in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.Path != "" {
		q.Set("path", opts.Path)
	}
	if opts.NonRecursive {
		q.Set("recursive", "false")
	}
	if opts.Debounce > 0 {
		q.Set("debounceMs", strconv.FormatInt(opts.Debounce.Milliseconds(), 10))
	}
	for _, p := range opts.Exclude {
		q.Add("exclude", p)
	}
	s, err := c.openNDJSON(ctx, op, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/watch"), query: q})
	if err != nil {
		return nil, err
	}
	var ev WatchEvent
	if err := s.next(&ev); err != nil {
		s.close()
		return nil, err
	}
	if ev.Type != WatchReady {
		s.close()
		return nil, fmt.Errorf("%s: first event is %q, want ready", op, ev.Type)
	}
	return &WatchStream{s: s, Root: ev.Path}, nil
}

// Next returns the next change or overflow event; keepalives are skipped.
// A watch that cannot go on (its root was removed or moved away) ends with
// an *APIError that wraps ErrNotFound.
func (w *WatchStream) Next() (WatchEvent, error) {
	for {
		var ev WatchEvent
		if err := w.s.next(&ev); err != nil {
			return WatchEvent{}, err
		}
		switch ev.Type {
		case WatchKeepalive, WatchReady:
			continue
		}
		return ev, nil
	}
}

// Events iterates over the events until the stream fails or is closed; the
// failure is yielded last (after Close it is not).
func (w *WatchStream) Events() iter.Seq2[WatchEvent, error] {
	return func(yield func(WatchEvent, error) bool) {
		for {
			ev, err := w.Next()
			if err != nil {
				if !w.s.closedByUser() {
					yield(WatchEvent{}, err)
				}
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Close ends the watch; the sandbox drops its watches. It is safe to call
// more than once and from another goroutine than the reader.
func (w *WatchStream) Close() error {
	w.s.close()
	return nil
}
