package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/internal/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve hotcell's tools to an AI agent over MCP (stdio)",
		Long: `Run a Model Context Protocol server on stdin/stdout that gives an agent tools to
create sandboxes, run commands, read, write and list files, start background
processes and read their logs, and destroy sandboxes. It talks to the daemon
found like every other command (--url/HOTCELL_URL, --token/HOTCELL_TOKEN or the
token file), so add it to an agent as a stdio MCP server.

The daemon also serves the same tools over streamable HTTP at /v1/mcp, with the
bearer token, for agents that connect to a URL.`,
		Example: `  claude mcp add hotcell -- hotcell mcp
  claude mcp add --env HOTCELL_URL=http://10.0.0.5:8080 --env HOTCELL_TOKEN=... hotcell -- hotcell mcp`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			// stdout is the protocol: logs go to stderr, where MCP hosts
			// collect a server's diagnostics.
			log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			// A daemon that is down now may be up by the first tool call, so
			// this only warns; the tools' errors say the same to the agent.
			hctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			if err := c.Health(hctx); err != nil {
				log.Warn("hotcell daemon not reachable yet", "err", a.describe(err))
			}
			cancel()
			srv := mcpserver.New(c, mcpserver.Options{Settings: &a.settings, Log: log})
			err = srv.Run(cmd.Context(), mcpserver.StdioTransport(a.stdin, a.stdout))
			if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return nil // the client closed stdin, or we were told to stop
			}
			return err
		},
	}
}
