package client

import (
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/hotcell/hotcell/internal/wire"
)

// Lifecycle shapes.
type (
	Timeouts           = wire.Timeouts
	SandboxTimeouts    = wire.SandboxTimeouts
	SetTimeoutsRequest = wire.SetTimeoutsRequest
	SandboxEvent       = wire.SandboxEvent
	SandboxEventList   = wire.SandboxEventList
)

// Timeout actions.
const (
	ActionStop    = wire.ActionStop
	ActionPause   = wire.ActionPause
	ActionDestroy = wire.ActionDestroy
)

// PauseSandbox freezes a running sandbox with its memory.
func (c *Client) PauseSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.sandboxOp(ctx, "pause sandbox", id, "/pause", nil)
}

// ResumeSandbox thaws a paused sandbox; it returns once its agent answers.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.sandboxOp(ctx, "resume sandbox", id, "/resume", nil)
}

// SetTimeouts changes a sandbox's idle timeout or lifetime, or extends the
// lifetime (ExtendSeconds). Nil fields keep their value.
func (c *Client) SetTimeouts(ctx context.Context, id string, req SetTimeoutsRequest) (Sandbox, error) {
	return c.sandboxOp(ctx, "set timeouts of sandbox", id, "/timeouts", req)
}

func (c *Client) sandboxOp(ctx context.Context, op, id, rest string, in any) (Sandbox, error) {
	op += " " + id
	var out Sandbox
	if err := checkID(op, id); err != nil {
		return out, err
	}
	r := request{op: op, method: http.MethodPost, path: sandboxPath(id, rest)}
	if in == nil {
		r.body = http.NoBody
	}
	err := c.doJSON(ctx, r, in, &out)
	return out, err
}

// EventsOptions select events. Since is the last Seq already seen.
type EventsOptions struct {
	Since int64
	Limit int
}

func (o EventsOptions) query(follow bool) map[string][]string {
	q := map[string][]string{}
	if o.Since > 0 {
		q["since"] = []string{strconv.FormatInt(o.Since, 10)}
	}
	if o.Limit > 0 && !follow {
		q["limit"] = []string{strconv.Itoa(o.Limit)}
	}
	if follow {
		q["follow"] = []string{"true"}
	}
	return q
}

// SandboxEvents returns a sandbox's event log, oldest first.
func (c *Client) SandboxEvents(ctx context.Context, id string, opts EventsOptions) ([]SandboxEvent, error) {
	op := "list events of sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	var out SandboxEventList
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/events"), query: opts.query(false)}, nil, &out)
	return out.Events, err
}

// HostEvents returns the event logs of every sandbox, merged in Seq order.
func (c *Client) HostEvents(ctx context.Context, opts EventsOptions) ([]SandboxEvent, error) {
	var out SandboxEventList
	err := c.doJSON(ctx, request{op: "list events", method: http.MethodGet, path: "/v1/events", query: opts.query(false)}, nil, &out)
	return out.Events, err
}

// FollowSandboxEvents streams a sandbox's events: the backlog after
// opts.Since, then new ones. The stream ends with io.EOF after the sandbox
// is destroyed or the daemon shuts down.
func (c *Client) FollowSandboxEvents(ctx context.Context, id string, opts EventsOptions) (*EventStream, error) {
	op := "follow events of sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	return c.followEvents(ctx, op, sandboxPath(id, "/events"), opts)
}

// FollowHostEvents streams the events of every sandbox.
func (c *Client) FollowHostEvents(ctx context.Context, opts EventsOptions) (*EventStream, error) {
	return c.followEvents(ctx, "follow events", "/v1/events", opts)
}

func (c *Client) followEvents(ctx context.Context, op, path string, opts EventsOptions) (*EventStream, error) {
	s, err := c.openNDJSON(ctx, op, request{op: op, method: http.MethodGet, path: path, query: opts.query(true)})
	if err != nil {
		return nil, err
	}
	return &EventStream{s: s}, nil
}

// EventStream is a followed event log. Next skips keepalives. It is not
// safe for concurrent use, but Close may be called from anywhere.
type EventStream struct {
	s    *ndjsonStream
	done bool
}

// Next returns the next event. It returns io.EOF after the stream's end
// line, an *APIError if the daemon ended the stream with a failure, and an
// error if the stream broke or went silent (no keepalive) for longer than
// the client's stream idle timeout.
func (e *EventStream) Next() (SandboxEvent, error) {
	if e.done {
		return SandboxEvent{}, io.EOF
	}
	for {
		var ev SandboxEvent
		if err := e.s.next(&ev); err != nil {
			return SandboxEvent{}, err
		}
		switch ev.Type {
		case wire.SandboxEventKeepalive:
			continue
		case wire.SandboxEventEnd:
			e.done = true
			e.s.release()
			return SandboxEvent{}, io.EOF
		}
		// A sandbox event of type "error" (a sandbox failed) is an event
		// like any other; only a stream.error line ends the stream.
		return ev, nil
	}
}

// Close ends the stream and releases its connection.
func (e *EventStream) Close() error {
	e.s.close()
	return nil
}
