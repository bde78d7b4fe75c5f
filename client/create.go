package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/wire"
)

// CreateEvent is one line of a create streamed by CreateSandboxProgress.
type CreateEvent = wire.CreateEvent

// CreateEvent types.
const (
	CreateEventProgress  = wire.CreateEventProgress
	CreateEventKeepalive = wire.CreateEventKeepalive
	CreateEventSandbox   = wire.CreateEventSandbox
)

// CreateSandboxProgress is CreateSandbox that reports what the daemon is
// doing while it creates: progress gets each line (image pull, "cloning
// <url>", "setup: <command>") as it happens, from the calling goroutine. A
// failed create returns an *APIError as CreateSandbox would. Keepalives
// keep the stream alive through long silent steps, so ctx, not an idle
// timeout, bounds the create.
func (c *Client) CreateSandboxProgress(ctx context.Context, req CreateSandboxRequest, progress func(msg string)) (Sandbox, error) {
	const op = "create sandbox"
	data, err := json.Marshal(req)
	if err != nil {
		return Sandbox{}, fmt.Errorf("%s: encode request: %w", op, err)
	}
	s, err := c.openNDJSON(ctx, op, request{
		op:          op,
		method:      http.MethodPost,
		path:        "/v1/sandboxes",
		query:       url.Values{"progress": {"true"}},
		body:        bytes.NewReader(data),
		contentType: "application/json",
	})
	if err != nil {
		return Sandbox{}, err
	}
	defer s.release()
	for {
		var ev CreateEvent
		if err := s.next(&ev); err != nil {
			return Sandbox{}, err
		}
		switch ev.Type {
		case CreateEventProgress:
			if progress != nil {
				progress(ev.Message)
			}
		case CreateEventSandbox:
			if ev.Sandbox == nil {
				return Sandbox{}, fmt.Errorf("%s: the final sandbox line has no sandbox", op)
			}
			return *ev.Sandbox, nil
		}
		// Keepalives, and types a newer daemon may add, only reset the idle timer.
	}
}
