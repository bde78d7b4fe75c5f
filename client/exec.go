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
	"sync"
	"time"
)

// Exec runs a command in a sandbox to completion and returns its buffered
// output. Set exactly one of req.Command (run by /bin/sh -c) and req.Argv.
// A non-zero exit code is not an error: read ExecResult.ExitCode.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var out ExecResult
	op := "exec in sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/exec")}, req, &out)
	return out, err
}

// ExitInfo is how a streamed command ended.
type ExitInfo struct {
	ExitCode   int
	Signal     string
	DurationMs int64
	TimedOut   bool
}

// maxStreamLine bounds one ndjson line of an exec stream. Chunks are small
// (the daemon sends at most tens of KiB per event); base64 adds a third.
const maxStreamLine = 8 << 20

// ExecStream is a command running in a sandbox whose output arrives as it
// is produced. Read it with Next, Events or CopyTo, then Wait for the exit;
// or call Wait alone to discard the output. Close releases the connection
// early. An ExecStream is not safe for concurrent use.
type ExecStream struct {
	op     string
	body   io.ReadCloser
	sc     *bufio.Scanner
	cancel context.CancelFunc
	idle   *time.Timer
	idleD  time.Duration
	ctx    context.Context

	mu       sync.Mutex
	idleHit  bool
	done     bool
	exit     ExitInfo
	err      error
	closeErr sync.Once
}

// ExecStream starts a command and returns as soon as the daemon accepted
// it. The stream always ends with the command's exit or an error, never a
// hang: cancelling ctx, or a connection silent for longer than the stream
// idle timeout (see WithStreamIdleTimeout), ends it with an error.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest) (*ExecStream, error) {
	op := "exec in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", op, err)
	}
	// The stream owns a context of its own so that the idle timer and Close
	// can abort a blocked body read.
	sctx, cancel := context.WithCancel(ctx)
	s := &ExecStream{op: op, cancel: cancel, idleD: c.streamIdle, ctx: ctx}
	if s.idleD > 0 {
		s.idle = time.AfterFunc(s.idleD, func() {
			s.mu.Lock()
			s.idleHit = true
			s.mu.Unlock()
			cancel()
		})
	}
	resp, err := c.do(sctx, request{
		op: op, method: http.MethodPost, path: sandboxPath(id, "/exec"),
		query: url.Values{"stream": {"true"}}, body: bytes.NewReader(data), contentType: "application/json",
	})
	if err != nil {
		s.stopTimer()
		cancel()
		return nil, s.explain(err)
	}
	s.body = resp.Body
	s.sc = bufio.NewScanner(resp.Body)
	s.sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	return s, nil
}

func (s *ExecStream) stopTimer() {
	if s.idle != nil {
		s.idle.Stop()
	}
}

// explain turns the cancellation the idle timer caused into a clear error.
func (s *ExecStream) explain(err error) error {
	s.mu.Lock()
	idle := s.idleHit
	s.mu.Unlock()
	if idle {
		return fmt.Errorf("%s: no data or keepalive from the daemon for %s: %w", s.op, s.idleD, ErrDeadlineExceeded)
	}
	if ctxErr := s.ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w (%v)", s.op, ctxErr, err)
	}
	return err
}

// Next returns the next stdout or stderr event (keepalives are skipped).
// After the final event it returns io.EOF; the exit is then available from
// Wait. Any other error means the stream failed and Wait returns it too.
func (s *ExecStream) Next() (ExecEvent, error) {
	if s.done {
		if s.err != nil {
			return ExecEvent{}, s.err
		}
		return ExecEvent{}, io.EOF
	}
	for s.sc.Scan() {
		if s.idle != nil {
			s.idle.Reset(s.idleD)
		}
		line := s.sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev ExecEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return ExecEvent{}, s.finish(fmt.Errorf("%s: decode stream event: %w", s.op, err))
		}
		switch ev.Type {
		case EventKeepalive:
			continue
		case EventStdout, EventStderr:
			return ev, nil
		case EventExit:
			s.exit = ExitInfo{ExitCode: ev.ExitCode, Signal: ev.Signal, DurationMs: ev.DurationMs, TimedOut: ev.TimedOut}
			s.finish(nil)
			return ExecEvent{}, io.EOF
		case EventError:
			return ExecEvent{}, s.finish(&StreamError{Message: ev.Error})
		default:
			// Unknown event types are newer than this client; skip them.
			continue
		}
	}
	err := s.sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return ExecEvent{}, s.finish(s.explain(fmt.Errorf("%s: stream ended without an exit event: %w", s.op, err)))
}

// StreamError is the error event that ended an exec stream: the command
// could not be run or followed to its end.
type StreamError struct {
	Message string
}

func (e *StreamError) Error() string { return "exec stream: " + e.Message }

func (s *ExecStream) finish(err error) error {
	s.done = true
	s.err = err
	s.release()
	return err
}

func (s *ExecStream) release() {
	s.closeErr.Do(func() {
		s.stopTimer()
		if s.err != nil {
			// Abort first: draining a stream that is still going would block.
			s.cancel()
		}
		if s.body != nil {
			drainClose(s.body)
		}
		s.cancel()
	})
}

// Events iterates over the stdout and stderr events. The iteration ends
// after the last one; a failure is yielded as the final error.
func (s *ExecStream) Events() iter.Seq2[ExecEvent, error] {
	return func(yield func(ExecEvent, error) bool) {
		for {
			ev, err := s.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// CopyTo writes stdout and stderr chunks to the given writers as they
// arrive (a nil writer discards) and returns how the command ended.
func (s *ExecStream) CopyTo(stdout, stderr io.Writer) (ExitInfo, error) {
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return s.exit, nil
		}
		if err != nil {
			return ExitInfo{}, err
		}
		w := stdout
		if ev.Type == EventStderr {
			w = stderr
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			s.Close()
			return ExitInfo{}, fmt.Errorf("%s: write %s: %w", s.op, ev.Type, err)
		}
	}
}

// Wait discards any output not yet read and returns how the command ended.
func (s *ExecStream) Wait() (ExitInfo, error) {
	return s.CopyTo(nil, nil)
}

// Close abandons the stream and releases its connection. The daemon then
// stops the command. Close after the end is a no-op.
func (s *ExecStream) Close() error {
	if !s.done {
		s.done = true
		s.err = fmt.Errorf("%s: stream closed", s.op)
	}
	s.release()
	return nil
}
