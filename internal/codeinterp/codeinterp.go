// Package codeinterp is the daemon's side of the code interpreter
// (docs/code.md): it starts the code server of a hotcell/code sandbox
// through the sandbox's agent when a call needs it, passes calls to it
// (E2B's code-interpreter protocol on the sandbox's loopback port
// images.CodePort), and translates its NDJSON into hotcell's events.
//
// The contexts live in the code server, a process in the sandbox: they
// outlive the daemon, and go with the sandbox.
package codeinterp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"weak"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/keyedmutex"
	"github.com/hotcell/hotcell/internal/wire"
)

// ProcessName is the name the code server runs under in the sandbox's
// process list.
const ProcessName = "hotcell-code"

// startTimeout bounds how long a call waits for a starting code server.
const startTimeout = 60 * time.Second

// Servers reaches the code servers of sandboxes. The zero value is ready.
type Servers struct {
	locks keyedmutex.Map
	// up remembers, per sandbox, the agent connection through which its
	// server last answered, so a call needs no health check first. The
	// pointer is weak: a destroyed sandbox's connection is not kept.
	up sync.Map // sandbox id -> weak.Pointer[agentconn.Conn]
}

// Call sends method path (a path of the code server's, "/execute") with
// body to sandbox id's code server, starting it first when it is not
// running. A non-2xx answer of the code server is returned as it is, for
// the caller to map; the caller closes the body.
func (s *Servers) Call(ctx context.Context, id string, conn *agentconn.Conn, method, path string, body []byte) (*http.Response, error) {
	if c, ok := s.up.Load(id); ok && c.(weak.Pointer[agentconn.Conn]).Value() == conn {
		resp, err := send(ctx, conn, method, path, body)
		if err != nil || resp.StatusCode != http.StatusBadGateway {
			return resp, err
		}
		// 502 is the agent's: nothing listens on the port (the server
		// died, or the sandbox restarted). Nothing ran; start it and retry.
		drain(resp)
		s.up.Delete(id)
	}
	if err := s.ensure(ctx, id, conn); err != nil {
		return nil, err
	}
	s.up.Store(id, weak.Make(conn))
	resp, err := send(ctx, conn, method, path, body)
	if err == nil && resp.StatusCode == http.StatusBadGateway {
		drain(resp)
		s.up.Delete(id)
		return nil, fmt.Errorf("code server of sandbox %s stopped answering: %w", id, errdefs.ErrUnavailable)
	}
	return resp, err
}

// Send is Call for the daemon's handlers: in (nil for no body) is sent as
// JSON, and a non-2xx answer of the code server becomes its error
// (ServerError). The caller closes the body of the 2xx answer.
func (s *Servers) Send(ctx context.Context, id string, conn *agentconn.Conn, method, path string, in any) (*http.Response, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	resp, err := s.Call(ctx, id, conn, method, path, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, ServerError(id, resp.StatusCode, resp.Body)
	}
	return resp, nil
}

// Forget drops what is known of sandbox id (it was destroyed).
func (s *Servers) Forget(id string) { s.up.Delete(id) }

func send(ctx context.Context, conn *agentconn.Conn, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent/v1/ports/"+strconv.Itoa(images.CodePort)+"/http"+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build code server request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A stream of its own per call: no agent connection is reused.
	req.Close = true
	return conn.Do(req)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// healthy reports whether the code server answers /health.
func healthy(ctx context.Context, conn *agentconn.Conn) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := send(ctx, conn, http.MethodGet, "/health", nil)
	if err != nil {
		return false
	}
	drain(resp)
	return resp.StatusCode == http.StatusOK
}

// ensure starts sandbox id's code server unless it answers or is starting,
// and waits until it answers.
func (s *Servers) ensure(ctx context.Context, id string, conn *agentconn.Conn) error {
	unlock := s.locks.Lock(id)
	defer unlock()
	if healthy(ctx, conn) {
		return nil
	}
	var running *wire.Process
	err := conn.Processes(ctx, func(p wire.Process) bool {
		if p.Name == ProcessName && p.State == wire.ProcessRunning {
			running = &p
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("code server of sandbox %s: list processes: %w", id, err)
	}
	if running == nil {
		if err := conn.DoJSON(ctx, http.MethodGet, "/v1/fs/stat?"+url.Values{"path": {images.CodeServer}}.Encode(), nil, nil); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return fmt.Errorf("sandbox %s has no code interpreter (%s is missing): create the sandbox from image %s (build it with `hotcell image build --code`): %w",
					id, images.CodeServer, images.CodeRef, errdefs.ErrConflict)
			}
			return fmt.Errorf("code server of sandbox %s: %w", id, err)
		}
		var p wire.Process
		req := wire.StartProcessRequest{
			Argv: []string{"python3", images.CodeServer, strconv.Itoa(images.CodePort)},
			Name: ProcessName,
			Cwd:  "/",
			Env:  map[string]string{"PYTHONUNBUFFERED": "1"},
		}
		if err := conn.DoJSON(ctx, http.MethodPost, "/v1/processes", req, &p); err != nil {
			return fmt.Errorf("start the code server of sandbox %s: %w", id, err)
		}
		running = &p
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for tick := time.NewTicker(20 * time.Millisecond); ; {
		if healthy(ctx, conn) {
			tick.Stop()
			return nil
		}
		var p wire.Process
		if err := conn.DoJSON(ctx, http.MethodGet, "/v1/processes/"+url.PathEscape(running.ID), nil, &p); err == nil && p.State == wire.ProcessExited {
			tick.Stop()
			code := -1
			if p.ExitCode != nil {
				code = *p.ExitCode
			}
			return fmt.Errorf("the code server of sandbox %s exited with status %d while starting (its output: `hotcell logs %s %s`): %w",
				id, code, id, p.ID, errdefs.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			tick.Stop()
			return fmt.Errorf("the code server of sandbox %s did not answer within %s: %w", id, startTimeout, errors.Join(errdefs.ErrUnavailable, ctx.Err()))
		case <-tick.C:
		}
	}
}
