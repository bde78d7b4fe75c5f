package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// ndjsonStream reads one JSON object per line from a long response, with
// an idle timer that aborts a connection silent for too long (keepalives
// reset it). Every NDJSON stream of the SDK reads through it.
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
		return nil, s.explain(err, false)
	}
	s.body = resp.Body
	s.sc = bufio.NewScanner(resp.Body)
	s.sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	s.sc.Split(completeLines)
	return s, nil
}

func (s *ndjsonStream) stopTimer() {
	if s.idle != nil {
		s.idle.Stop()
	}
}

// explain turns the error of an open (cut false) or of a read that found
// no final line (cut true) into a clear one: Close's or the idle timer's
// cancellation, ctx's end, or a stream cut off, which wraps errCut.
func (s *ndjsonStream) explain(err error, cut bool) error {
	s.mu.Lock()
	idle, closed := s.idleHit, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%s: stream closed", s.op)
	case idle && cut:
		return fmt.Errorf("%s: %w: no data or keepalive from the daemon for %s: %w", s.op, errCut, s.idleD, ErrDeadlineExceeded)
	case idle:
		return fmt.Errorf("%s: no data or keepalive from the daemon for %s: %w", s.op, s.idleD, ErrDeadlineExceeded)
	}
	if ctxErr := s.ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w (%v)", s.op, ctxErr, err)
	}
	if cut {
		return fmt.Errorf("%s: %w: %w", s.op, errCut, err)
	}
	return err
}

// errCut marks a stream that ended without its final line: the
// connection broke or went silent. A reader that can resume (process
// logs) tries again; the others report it.
var errCut = errors.New("the stream was cut off before its final event")

// next decodes the next non-empty line into v. A stream.error line, the
// one failure shape of every stream, ends the stream with an *APIError
// carrying its code and message, as the plain call would have.
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
		// The cheap test first: output lines can be large.
		if bytes.Contains(line, []byte(wire.EventStreamError)) {
			var se wire.StreamError
			if json.Unmarshal(line, &se) == nil && se.Type == wire.EventStreamError {
				return s.fail(fmt.Errorf("%s: %w", s.op, streamAPIError(se.Error)))
			}
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
	return s.fail(s.explain(err, true))
}

// streamAPIError is the *APIError for a failure that came on a stream
// after its 200: the status is the one its code maps to, as a plain answer
// would have had.
func streamAPIError(d errdefs.Detail) *APIError {
	status := http.StatusInternalServerError
	if class := errdefs.FromCode(d.Code); class != nil {
		status, _ = errdefs.HTTPStatus(class)
	}
	return &APIError{Status: status, Code: d.Code, Message: d.Message}
}

// completeLines splits at newlines and refuses a last line without one:
// that is an event cut off by a dropped connection, not an event.
func completeLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, io.ErrUnexpectedEOF
	}
	return 0, nil, nil
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
