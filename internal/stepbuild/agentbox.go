package stepbuild

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// AgentBox is a Box through a box's agent.
func AgentBox(conn *agentconn.Conn) Box { return agentBox{conn} }

type agentBox struct{ conn *agentconn.Conn }

// maxFrame bounds a frame of the agent's process stream (it sends at most
// 32 KiB of output at once).
const maxFrame = 1 << 20

// Run runs argv as a process stream (the agent's POST /v1/terminals/stream:
// a user of the image, output as it comes), and waits for its exit.
func (a agentBox) Run(ctx context.Context, argv []string, env map[string]string, cwd, user string, output func([]byte)) (int, error) {
	body, err := json.Marshal(wire.ProcessStreamRequest{
		TerminalRequest: wire.TerminalRequest{Argv: argv, Env: env, Cwd: cwd, DetachTimeoutSec: 1},
		User:            user,
	})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent/v1/terminals/stream", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.conn.Send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		typ, p, err := wire.ReadTerminalFrame(br, maxFrame)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("the agent's process stream ended before the process: %w", errors.Join(errdefs.ErrUnavailable, err))
		}
		switch typ {
		case wire.TerminalFrameStdout, wire.TerminalFrameStderr, wire.TerminalFramePTY:
			output(p)
		case wire.TerminalFrameExit:
			var m wire.TerminalMessage
			if err := json.Unmarshal(p, &m); err != nil {
				return 0, fmt.Errorf("the agent's exit frame: %w", errors.Join(errdefs.ErrUnavailable, err))
			}
			switch {
			case m.ExitCode != nil:
				return *m.ExitCode, nil
			case m.Signal != "":
				return 128, nil
			}
			return 0, fmt.Errorf("the agent's exit frame has no exit code: %w", errdefs.ErrUnavailable)
		}
	}
}

// Mkdir makes dir and its parents (the agent's POST /v1/fs/mkdir), with
// nothing asked of the image.
func (a agentBox) Mkdir(ctx context.Context, dir string) error {
	return a.conn.DoJSON(ctx, http.MethodPost, "/v1/fs/mkdir", wire.MkdirRequest{Path: dir, Parents: true}, nil)
}

// Extract unpacks a tar into dir (the agent's PUT /v1/archive), its
// symlinks as they are, as Docker's COPY keeps them.
func (a agentBox) Extract(ctx context.Context, dir string, tar io.Reader) error {
	return a.conn.PutArchive(ctx, dir, tar, true)
}

// Archive streams a tar of path (the agent's GET /v1/archive).
func (a agentBox) Archive(ctx context.Context, p string) (io.ReadCloser, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/archive?"+url.Values{"path": {p}}.Encode(), nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := a.conn.Send(req)
	if err != nil {
		return nil, false, err
	}
	return resp.Body, resp.Header.Get(wire.HeaderArchiveOf) != wire.ArchiveOfFile, nil
}

// List lists dir (the agent's GET /v1/fs/list), by name only: what a
// wildcard matches is read without the files' contents.
func (a agentBox) List(ctx context.Context, dir string) (map[string]bool, error) {
	var l wire.FileList
	if err := a.conn.DoJSON(ctx, http.MethodGet, "/v1/fs/list?"+url.Values{"path": {dir}}.Encode(), nil, &l); err != nil {
		return nil, err
	}
	m := make(map[string]bool, len(l.Entries))
	for _, e := range l.Entries {
		m[e.Name] = e.Type == wire.FileTypeDir
	}
	return m, nil
}

// Move renames from to to (the agent's POST /v1/fs/move).
func (a agentBox) Move(ctx context.Context, from, to string) error {
	return a.conn.DoJSON(ctx, http.MethodPost, "/v1/fs/move", wire.MoveRequest{From: from, To: to}, nil)
}

// Remove removes p and what is under it (the agent's DELETE /v1/files).
func (a agentBox) Remove(ctx context.Context, p string) error {
	return a.conn.DoJSON(ctx, http.MethodDelete, "/v1/files?"+url.Values{"path": {p}, "recursive": {"true"}}.Encode(), nil, nil)
}
