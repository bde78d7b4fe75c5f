// Package ndjson writes the newline-delimited JSON streams of the daemon's
// API and of the agent, so that every stream behaves the same: the same
// headers, a write deadline on every line (a client that stops reading
// frees the handler instead of holding it forever), a flush per line,
// keepalives while the stream is quiet, and exactly one terminal line: the
// stream's own final event (End) or the one failure shape of every stream
// (Fail, a wire.StreamError). It uses only the standard library and wire,
// so the agent can use it.
package ndjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// DefaultWriteTimeout bounds each line's write when Options sets none. It
// is long enough for a slow but live reader and short enough that a
// stalled one does not hold a goroutine (and the work behind it) for long.
const DefaultWriteTimeout = time.Minute

// ErrEnded is returned by Send, End and Fail after the terminal line.
var ErrEnded = errors.New("ndjson: the stream has already ended")

// Options configure a stream.
type Options struct {
	// Status is the response's status; 0 means 200.
	Status int
	// WriteTimeout bounds the write of each line; 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Keepalive, when > 0 with KeepaliveEvent set, sends KeepaliveEvent()
	// whenever nothing else was sent for that long.
	Keepalive      time.Duration
	KeepaliveEvent func() any
	// RequestID goes into the failure line's detail.
	RequestID string
}

// Writer is one NDJSON response. Send, End and Fail may be called from
// several goroutines.
type Writer struct {
	rc     *http.ResponseController
	enc    *json.Encoder
	opts   Options
	reqCtx context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	ended bool
	err   error     // the first write error; every later write returns it
	last  time.Time // when the last line went out

	stopAfter     func() bool
	stopKeepalive chan struct{}
	keepaliveDone chan struct{}
	closeOnce     sync.Once
}

// Start sends the headers (status, Content-Type application/x-ndjson,
// Cache-Control no-store) and starts the keepalives. Close the Writer when
// the handler is done.
func Start(w http.ResponseWriter, r *http.Request, opts Options) *Writer {
	if opts.Status == 0 {
		opts.Status = http.StatusOK
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	s := &Writer{
		rc:     http.NewResponseController(w),
		enc:    json.NewEncoder(w),
		opts:   opts,
		reqCtx: r.Context(),
		ctx:    ctx,
		cancel: cancel,
	}
	// A write stuck on a client that went away (or on a broken stream)
	// ends now rather than at its deadline.
	s.stopAfter = context.AfterFunc(ctx, func() { _ = s.rc.SetWriteDeadline(time.Now()) })
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	s.mu.Lock()
	_ = s.rc.SetWriteDeadline(time.Now().Add(opts.WriteTimeout))
	w.WriteHeader(opts.Status)
	if err := s.rc.Flush(); err != nil {
		s.broke(err)
	}
	s.last = time.Now()
	s.mu.Unlock()
	if opts.Keepalive > 0 && opts.KeepaliveEvent != nil {
		s.stopKeepalive = make(chan struct{})
		s.keepaliveDone = make(chan struct{})
		go s.keepalives()
	}
	return s
}

// Context is done when the request's context is or the stream broke (a
// write failed or ran past its deadline): work that feeds the stream
// should stop then. context.Cause tells which.
func (s *Writer) Context() context.Context { return s.ctx }

// Send writes one line.
func (s *Writer) Send(v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return ErrEnded
	}
	return s.write(v)
}

// End writes the stream's final line. Nothing can be sent after it.
func (s *Writer) End(v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return ErrEnded
	}
	s.ended = true
	return s.write(v)
}

// Fail ends the stream with the failure line carrying err's detail: the
// code and message an error response would have had. It returns the
// write's error, not err.
func (s *Writer) Fail(err error) error {
	_, d := errdefs.Describe(err, s.opts.RequestID)
	return s.End(wire.StreamError{Type: wire.EventStreamError, Error: d})
}

// Err returns the first write error, if any.
func (s *Writer) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops the keepalives. A stream that is still whole, whose client is
// still there and whose handler sent no terminal line, gets a failure line
// so that it never ends looking complete.
func (s *Writer) Close() {
	s.closeOnce.Do(func() {
		if s.stopKeepalive != nil {
			close(s.stopKeepalive)
			<-s.keepaliveDone
		}
		s.mu.Lock()
		missing := !s.ended && s.err == nil && s.reqCtx.Err() == nil
		s.mu.Unlock()
		if missing {
			_ = s.Fail(errors.New("the stream ended without its final event"))
		}
		s.stopAfter()
		s.cancel(context.Canceled)
	})
}

// write encodes v under a fresh deadline and flushes it; s.mu is held.
func (s *Writer) write(v any) error {
	if s.err != nil {
		return s.err
	}
	if err := context.Cause(s.ctx); err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	if err := s.enc.Encode(v); err != nil {
		return s.broke(err)
	}
	if err := s.rc.Flush(); err != nil {
		return s.broke(err)
	}
	s.last = time.Now()
	return nil
}

// broke records a failed write and cancels the stream's context.
func (s *Writer) broke(err error) error {
	if s.err == nil {
		s.err = fmt.Errorf("write stream: %w", err)
		s.cancel(s.err)
	}
	return s.err
}

func (s *Writer) keepalives() {
	defer close(s.keepaliveDone)
	t := time.NewTicker(s.opts.Keepalive)
	defer t.Stop()
	for {
		select {
		case <-s.stopKeepalive:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
			// Lines at most about 1.5 intervals apart, whatever else is sent.
			s.mu.Lock()
			if !s.ended && time.Since(s.last) >= s.opts.Keepalive/2 {
				_ = s.write(s.opts.KeepaliveEvent())
			}
			s.mu.Unlock()
		}
	}
}
