// Package mcpserver is hotcell's Model Context Protocol server: tools an
// agent calls to create sandboxes, run commands, read and write files and
// run background processes in them. The tools are built on the public Go
// SDK (package client), so the same server works from `hotcell mcp` over
// stdio, talking to a daemon over HTTP, and inside the daemon at /v1/mcp.
//
// Results are sized for an agent's context: long outputs keep their head
// and tail around a note that says how much was left out and how to read
// the rest, never a silent cut.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/buildinfo"
	"github.com/hotcell/hotcell/internal/clientconfig"
	"github.com/hotcell/hotcell/internal/redact"
)

// Options configure the server.
type Options struct {
	// Settings say, in errors, where the daemon was looked for and where
	// the token came from, so that an agent or its user can tell what to
	// fix. Nil gives general advice.
	Settings *clientconfig.Settings
	Log      *slog.Logger
}

const instructions = `hotcell gives you isolated Linux sandboxes (containers) with a persistent /workspace.
Typical use: sandbox_create (returns the sandbox id) → exec / file_write / file_read / file_list → sandbox_destroy when done.
Relative paths are relative to /workspace. exec runs a command to completion; for servers and other long-running programs use process_start, then process_logs.
In a sandbox made from hotcell/code:latest, run_code runs Python, JavaScript or Bash cells whose variables persist between calls, and returns charts as images.
Long outputs are cut in the middle with a note saying how many bytes were left out; redirect to a file and page through it with file_read to see everything.`

// New returns an MCP server whose tools act through c.
func New(c *client.Client, opts Options) *mcp.Server {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "hotcell", Title: "hotcell sandboxes", Version: buildinfo.Version()}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       opts.Log,
		// No logging capability: the tools report through their results.
		Capabilities: &mcp.ServerCapabilities{},
	})
	t := &tools{c: c, settings: opts.Settings}
	t.register(s)
	return s
}

// tools holds what the tool handlers share.
type tools struct {
	c        *client.Client
	settings *clientconfig.Settings
}

// explain turns an SDK error into the message an agent sees: the API's
// own message (which names the field to fix), plus advice for the two
// failures that are not about the call itself.
func (t *tools) explain(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case client.IsUnreachable(err):
		if s := t.settings; s != nil {
			return fmt.Errorf("%w (the hotcell daemon at %s is not reachable: start it with `hotcell serve`, or %s)", err, redact.URL(s.URL), s.URLHint())
		}
		return fmt.Errorf("%w (the hotcell daemon is not reachable: start it with `hotcell serve`, or point HOTCELL_URL at it)", err)
	case errors.Is(err, client.ErrUnauthenticated):
		if s := t.settings; s != nil {
			return fmt.Errorf("%w (the daemon refused the token: check %s)", err, s.TokenHint())
		}
		return fmt.Errorf("%w (the daemon refused the token: set HOTCELL_TOKEN to the content of the daemon's token file)", err)
	}
	return err
}

func ptr[T any](v T) *T { return &v }

func (t *tools) register(s *mcp.Server) {
	t.registerSandboxes(s)
	t.registerExec(s)
	t.registerCode(s)
	t.registerFiles(s)
	t.registerProcesses(s)
}
