package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

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
