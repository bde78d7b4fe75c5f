package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
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
	s    *ndjsonStream
	done bool
	exit ExitInfo
	err  error
}

// ExecStream starts a command and returns as soon as the daemon accepted
// it. The stream always ends with the command's exit or an error, never a
// hang: cancelling ctx, or a connection silent for longer than the stream
// idle timeout (see WithStreamIdleTimeout), ends it with an error. A
// failure the daemon reports on the stream is an *APIError.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest) (*ExecStream, error) {
	op := "exec in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", op, err)
	}
	s, err := c.openNDJSON(ctx, op, request{
		op: op, method: http.MethodPost, path: sandboxPath(id, "/exec"),
		query: url.Values{"stream": {"true"}}, body: bytes.NewReader(data), contentType: "application/json",
	})
	if err != nil {
		return nil, err
	}
	return &ExecStream{s: s}, nil
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
	for {
		var ev ExecEvent
		if err := s.s.next(&ev); err != nil {
			return ExecEvent{}, s.finish(err)
		}
		switch ev.Type {
		case EventStdout, EventStderr:
			return ev, nil
		case EventExit:
			s.exit = ExitInfo{ExitCode: ev.ExitCode, Signal: ev.Signal, DurationMs: ev.DurationMs, TimedOut: ev.TimedOut}
			s.finish(nil)
			return ExecEvent{}, io.EOF
		}
		// Keepalives, and event types newer than this client.
	}
}

func (s *ExecStream) finish(err error) error {
	s.done = true
	s.err = err
	s.s.release()
	return err
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
			return ExitInfo{}, fmt.Errorf("%s: write %s: %w", s.s.op, ev.Type, err)
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
		s.err = fmt.Errorf("%s: stream closed", s.s.op)
	}
	s.s.close()
	return nil
}
