// Command hotcell-agent is PID 1 of every sandbox: it dials the daemon's
// socket in the read-only run dir and serves the agent API on it, reaps
// zombies, forwards signals, and stops its children on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/hotcell/hotcell/internal/agent"
	"github.com/hotcell/hotcell/internal/fspath"
)

// stopGrace is how long children get between SIGTERM and SIGKILL; it must
// fit in the driver's stop timeout.
const stopGrace = 3 * time.Second

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hotcell-agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hotcell-agent", flag.ContinueOnError)
	socket := fs.String("socket", envOr("HOTCELL_AGENT_SOCKET", agent.DefaultSocket), "unix socket of the daemon to dial")
	dialFile := fs.String("dial-file", envOr("HOTCELL_AGENT_DIAL_FILE", agent.DefaultDialFile), "file that, when present, says to dial the daemon over TCP with TLS (then the socket is the fallback)")
	workspace := fs.String("workspace", fspath.Workspace, "directory relative paths resolve against")
	debugLog := fs.Bool("debug", os.Getenv("HOTCELL_AGENT_DEBUG") != "", "log debug messages")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debugLog {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// The agent idles in every sandbox; keep its heap small unless the
	// operator said otherwise.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(32 << 20)
	}

	pid1 := os.Getpid() == 1
	reaper := agent.NewReaper(pid1)
	defer reaper.Close()

	if err := os.MkdirAll(*workspace, 0o755); err != nil {
		logger.Warn("create workspace", "path", *workspace, "err", err)
	}
	h := agent.NewHandler(agent.Options{Workspace: *workspace, Reaper: reaper, Logger: logger})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dial, err := dialer(*dialFile, *socket, logger)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- agent.RunDialer(ctx, dial, h, logger) }()

	sig := agent.WaitForTermination(ctx, reaper, pid1)
	logger.Info("stopping", "signal", fmt.Sprint(sig))
	// Children first, while still serving: cancelling the requests would
	// SIGKILL their execs without the SIGTERM grace.
	reaper.Shutdown(context.Background(), stopGrace)
	cancel()
	return <-served
}

// dialer is how the agent reaches the daemon: over TCP with TLS when the
// driver left a dial file (falling back to the socket, which a daemon on
// the same host also listens on), else the run dir's socket.
func dialer(dialFile, socket string, logger *slog.Logger) (agent.Dialer, error) {
	unix := agent.UnixDialer(socket)
	d, err := agent.LoadDial(dialFile)
	if errors.Is(err, os.ErrNotExist) {
		logger.Debug("dialing the daemon's socket", "socket", socket)
		return unix, nil
	}
	if err != nil {
		return nil, err
	}
	tcp, err := agent.TLSDialer(d)
	if err != nil {
		return nil, fmt.Errorf("agent dial file %s: %w", dialFile, err)
	}
	logger.Debug("dialing the daemon over TCP", "addr", d.Addr)
	return agent.FallbackDialer(tcp, unix), nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
