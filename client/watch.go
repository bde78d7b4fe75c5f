package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// WatchEvent is one event of a watch stream.
type WatchEvent = wire.WatchEvent

// Watch event types (WatchEvent.Type).
const (
	WatchReady      = wire.WatchReady
	WatchCreated    = wire.WatchCreated
	WatchModified   = wire.WatchModified
	WatchDeleted    = wire.WatchDeleted
	WatchRenamed    = wire.WatchRenamed
	WatchOverflow   = wire.WatchOverflow
	WatchKeepalive  = wire.WatchKeepalive
	WatchErrorEvent = wire.WatchError
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

// WatchError is the error event that ended a watch stream (its root was
// removed or moved away). Its type is WatchErrorEvent.
type WatchError struct {
	Path    string
	Message string
}

func (e *WatchError) Error() string { return "watch " + e.Path + ": " + e.Message }

// Next returns the next change or overflow event; keepalives are skipped.
// An error event ends the stream with a *WatchError.
func (w *WatchStream) Next() (WatchEvent, error) {
	for {
		var ev WatchEvent
		if err := w.s.next(&ev); err != nil {
			return WatchEvent{}, err
		}
		switch ev.Type {
		case WatchKeepalive, WatchReady:
			continue
		case WatchErrorEvent:
			return WatchEvent{}, w.s.fail(&WatchError{Path: ev.Path, Message: ev.Error})
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

// ndjsonStream reads one JSON object per line from a long response, with
// an idle timer that aborts a connection silent for too long (keepalives
// reset it).
type ndjsonStream struct {
	op     string
	body   io.ReadCloser
	sc     *bufio.Scanner
	ctx    context.Context
	cancel context.CancelFunc
	idle   *time.Timer
	idleD  time.Duration

	mu      sync.Mutex
	idleHit bool
	closed  bool
	err     error
}

func (c *Client) openNDJSON(ctx context.Context, op string, r request) (*ndjsonStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	s := &ndjsonStream{op: op, ctx: ctx, cancel: cancel, idleD: c.streamIdle}
	if s.idleD > 0 {
		s.idle = time.AfterFunc(s.idleD, func() {
			s.mu.Lock()
			s.idleHit = true
			s.mu.Unlock()
			cancel()
		})
	}
	resp, err := c.do(sctx, r)
	if err != nil {
		s.stopTimer()
		cancel()
		return nil, s.explain(err)
	}
	s.body = resp.Body
	s.sc = bufio.NewScanner(resp.Body)
	s.sc.Buffer(make([]byte, 0, 16<<10), maxStreamLine)
	return s, nil
}

func (s *ndjsonStream) stopTimer() {
	if s.idle != nil {
		s.idle.Stop()
	}
}

func (s *ndjsonStream) explain(err error) error {
	s.mu.Lock()
	idle, closed := s.idleHit, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%s: stream closed", s.op)
	case idle:
		return fmt.Errorf("%s: no data or keepalive from the daemon for %s: %w", s.op, s.idleD, ErrDeadlineExceeded)
	}
	if ctxErr := s.ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w (%v)", s.op, ctxErr, err)
	}
	return err
}

// next decodes the next non-empty line into v.
func (s *ndjsonStream) next(v any) error {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	for s.sc.Scan() {
		if s.idle != nil {
			s.idle.Reset(s.idleD)
		}
		line := s.sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := json.Unmarshal(line, v); err != nil {
			return s.fail(fmt.Errorf("%s: decode stream event: %w", s.op, err))
		}
		return nil
	}
	err = s.sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return s.fail(s.explain(fmt.Errorf("%s: stream ended: %w", s.op, err)))
}

// fail ends the stream with err (the first error sticks) and returns it.
func (s *ndjsonStream) fail(err error) error {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	err = s.err
	s.mu.Unlock()
	s.release()
	return err
}

func (s *ndjsonStream) release() {
	s.stopTimer()
	// Abort rather than drain: the stream does not end on its own.
	s.cancel()
	if s.body != nil {
		_ = s.body.Close()
	}
}

func (s *ndjsonStream) close() {
	s.mu.Lock()
	s.closed = true
	if s.err == nil {
		s.err = fmt.Errorf("%s: stream closed", s.op)
	}
	s.mu.Unlock()
	s.release()
}

func (s *ndjsonStream) closedByUser() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
