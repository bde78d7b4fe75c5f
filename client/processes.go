package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// Background process shapes; see the wire package for their fields.
type (
	StartProcessRequest = wire.StartProcessRequest
	Process             = wire.Process
	ProcessList         = wire.ProcessList
	SignalRequest       = wire.SignalRequest
	LogEvent            = wire.LogEvent
)

// Process states and the log event types beyond those of exec.
const (
	ProcessRunning = wire.ProcessRunning
	ProcessExited  = wire.ProcessExited
	EventGap       = wire.EventGap
	EventEnd       = wire.EventEnd
)

func processPath(id, pid, rest string) string {
	return sandboxPath(id, "/processes/"+url.PathEscape(pid)+rest)
}

func checkProcess(op, id, pid string) error {
	if err := checkID(op, id); err != nil {
		return err
	}
	if pid == "" {
		return fmt.Errorf("%s: process id is empty: %w", op, ErrInvalidArgument)
	}
	return nil
}

// StartProcess starts a background process in a sandbox and returns at
// once. The sandbox's agent owns it: it keeps running, and its logs and
// exit status are kept, whatever happens to this client or the daemon.
func (c *Client) StartProcess(ctx context.Context, id string, req StartProcessRequest) (Process, error) {
	var out Process
	op := "start process in sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/processes")}, req, &out)
	return out, err
}

// ProcessListOptions filter ListProcesses. Zero values match everything.
type ProcessListOptions struct {
	State string // ProcessRunning or ProcessExited
	Name  string
}

// ListProcesses lists a sandbox's background processes, oldest first.
func (c *Client) ListProcesses(ctx context.Context, id string, opts ProcessListOptions) ([]Process, error) {
	op := "list processes in sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	if opts.Name != "" {
		q.Set("name", opts.Name)
	}
	var out ProcessList
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/processes"), query: q}, nil, &out)
	return out.Processes, err
}

// GetProcess returns one background process.
func (c *Client) GetProcess(ctx context.Context, id, pid string) (Process, error) {
	var out Process
	op := "get process " + pid + " in sandbox " + id
	if err := checkProcess(op, id, pid); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: processPath(id, pid, "")}, nil, &out)
	return out, err
}

// SignalProcess sends a signal, by name ("TERM", "SIGKILL") or number
// ("9"), to the process's whole process group.
func (c *Client) SignalProcess(ctx context.Context, id, pid, signal string) error {
	op := "signal process " + pid + " in sandbox " + id
	if err := checkProcess(op, id, pid); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodPost, path: processPath(id, pid, "/signal")}, SignalRequest{Signal: signal}, nil)
}

// RemoveProcess forgets an exited process and deletes its logs.
func (c *Client) RemoveProcess(ctx context.Context, id, pid string) error {
	op := "remove process " + pid + " in sandbox " + id
	if err := checkProcess(op, id, pid); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: processPath(id, pid, "")}, nil, nil)
}

// LogOptions say which output ProcessLogs reads.
type LogOptions struct {
	// Stream is EventStdout, EventStderr, or "" for both.
	Stream string
	// Offset is where a single Stream starts; StdoutOffset and
	// StderrOffset are where each starts when reading both.
	Offset, StdoutOffset, StderrOffset int64
	// Follow keeps reading new output until the process ends.
	Follow bool
	// MaxReconnects bounds the reconnects in a row, without data in between,
	// after a dropped connection. 0 means 5; negative disables resumption.
	MaxReconnects int
}

// ProcessLog is a process's output as it is read: an io.Reader of the
// bytes of the selected stream(s) (both interleaved, in the order they were
// read, when Stream is ""), or a sequence of events with Next. A dropped
// connection is resumed from the last offset received, so no byte is lost
// or repeated. It ends with io.EOF after the process's exit (Follow) or the
// output there was. Not safe for concurrent use; Close it when done.
type ProcessLog struct {
	c     *Client
	ctx   context.Context
	op    string
	path  string
	opts  LogOptions
	tries int
	s     *ndjsonStream // the current connection

	offsets map[string]int64
	dropped int64
	exit    *ExitInfo
	done    bool
	err     error
	pending []byte // the rest of an event's data not yet returned by Read
}

// ProcessLogs opens a process's output from the offsets in opts. Errors
// found before anything is read (unknown process, bad offset) are returned
// here.
func (c *Client) ProcessLogs(ctx context.Context, id, pid string, opts LogOptions) (*ProcessLog, error) {
	op := "process logs " + pid + " in sandbox " + id
	if err := checkProcess(op, id, pid); err != nil {
		return nil, err
	}
	switch opts.Stream {
	case "", EventStdout, EventStderr:
	default:
		return nil, fmt.Errorf("%s: stream %q is not stdout, stderr or empty: %w", op, opts.Stream, ErrInvalidArgument)
	}
	if opts.MaxReconnects == 0 {
		opts.MaxReconnects = 5
	}
	l := &ProcessLog{c: c, ctx: ctx, op: op, path: processPath(id, pid, "/logs"), opts: opts, offsets: map[string]int64{}}
	if opts.Stream != "" {
		l.offsets[opts.Stream] = opts.Offset
	} else {
		l.offsets[EventStdout] = opts.StdoutOffset
		l.offsets[EventStderr] = opts.StderrOffset
	}
	if err := l.connect(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *ProcessLog) connect() error {
	q := url.Values{}
	if l.opts.Follow {
		q.Set("follow", "true")
	}
	if l.opts.Stream != "" {
		q.Set("stream", l.opts.Stream)
		q.Set("offset", strconv.FormatInt(l.offsets[l.opts.Stream], 10))
	} else {
		q.Set("stdoutOffset", strconv.FormatInt(l.offsets[EventStdout], 10))
		q.Set("stderrOffset", strconv.FormatInt(l.offsets[EventStderr], 10))
	}
	// Silence longer than the idle timeout, keepalives included, means a
	// dead connection: the stream cuts it, and the reader resumes on a new one.
	s, err := l.c.openNDJSON(l.ctx, l.op, request{op: l.op, method: http.MethodGet, path: l.path, query: q})
	if err != nil {
		return err
	}
	l.s = s
	return nil
}

func (l *ProcessLog) closeConn() {
	if l.s != nil {
		l.s.release()
		l.s = nil
	}
}

// Next returns the next stdout, stderr or gap event. After the last one it
// returns io.EOF; Exit then tells how the process ended, if it did.
func (l *ProcessLog) Next() (LogEvent, error) {
	for {
		if l.done {
			if l.err != nil {
				return LogEvent{}, l.err
			}
			return LogEvent{}, io.EOF
		}
		ev, err := l.next()
		if err == nil {
			return ev, nil
		}
		if errors.Is(err, errCut) && l.ctx.Err() == nil {
			if rerr := l.reconnect(err); rerr != nil {
				return LogEvent{}, l.finish(rerr)
			}
			continue
		}
		return LogEvent{}, l.finish(err)
	}
}

// next reads one event from the current connection. An error that wraps
// errCut means the connection ended early and may be resumed.
func (l *ProcessLog) next() (LogEvent, error) {
	for {
		var ev LogEvent
		if err := l.s.next(&ev); err != nil {
			return LogEvent{}, err
		}
		switch ev.Type {
		case EventStdout, EventStderr:
			want, ok := l.offsets[ev.Type]
			if !ok || ev.Offset != want {
				return LogEvent{}, fmt.Errorf("%s: %s event at offset %d, want %d", l.op, ev.Type, ev.Offset, want)
			}
			l.offsets[ev.Type] += int64(len(ev.Data))
			l.tries = 0
			return ev, nil
		case EventGap:
			if _, ok := l.offsets[ev.Stream]; ok && ev.Offset > l.offsets[ev.Stream] {
				l.dropped += ev.Offset - l.offsets[ev.Stream]
				l.offsets[ev.Stream] = ev.Offset
			}
			return ev, nil
		case EventExit:
			l.exit = &ExitInfo{ExitCode: ev.ExitCode, Signal: ev.Signal}
			_ = l.finish(nil)
			return LogEvent{}, io.EOF
		case EventEnd:
			_ = l.finish(nil)
			return LogEvent{}, io.EOF
		}
		// Keepalives, and event types newer than this client.
	}
}

// reconnect resumes after a dropped connection from the offsets reached.
func (l *ProcessLog) reconnect(cause error) error {
	l.closeConn()
	for {
		if l.opts.MaxReconnects < 0 || l.tries >= l.opts.MaxReconnects {
			return cause
		}
		l.tries++
		wait := min(100*time.Millisecond<<(l.tries-1), 2*time.Second)
		select {
		case <-time.After(wait):
		case <-l.ctx.Done():
			return fmt.Errorf("%s: %w", l.op, l.ctx.Err())
		}
		err := l.connect()
		if err == nil {
			return nil
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err // the daemon answered: resuming will not help
		}
		cause = err
	}
}

func (l *ProcessLog) finish(err error) error {
	l.done = true
	l.err = err
	l.closeConn()
	return err
}

// Read reads the output's bytes. It returns io.EOF at the end (see Next).
func (l *ProcessLog) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		ev, err := l.Next()
		if err != nil {
			return 0, err
		}
		l.pending = ev.Data
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

// Offset returns the offset of the next byte of stream not yet received.
func (l *ProcessLog) Offset(stream string) int64 { return l.offsets[stream] }

// Dropped returns how many bytes rotation dropped before they were read.
func (l *ProcessLog) Dropped() int64 { return l.dropped }

// Exit returns how the process ended, once the log reached its exit event.
func (l *ProcessLog) Exit() (ExitInfo, bool) {
	if l.exit == nil {
		return ExitInfo{}, false
	}
	return *l.exit, true
}

// Close releases the connection. It is safe to call more than once.
func (l *ProcessLog) Close() error {
	if !l.done {
		_ = l.finish(nil)
		l.err = errors.New(l.op + ": log closed")
	}
	return nil
}
