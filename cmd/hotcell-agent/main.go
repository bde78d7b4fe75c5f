// Command hotcell-agent is PID 1 of every sandbox: it dials the daemon's
// socket in the read-only run dir and serves the agent API on it, reaps
// zombies, forwards signals, and stops its children on SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	installTo := fs.String("install-to", "", "copy this binary to `PATH` (mode 0755) and exit: how the Kubernetes driver's init container puts the agent into a box")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *installTo != "" {
		return installSelf(*installTo)
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
	// Over TCP with TLS when the driver left a dial file (the socket, on
	// which a daemon on the same host also listens, is the fallback),
	// else the run dir's socket; the file is read again at every dial.
	dial := agent.FileDialer(*dialFile, *socket, logger)
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

// installSelf copies the running binary to dst through a temporary file
// beside it, so a box never sees half an agent.
func installSelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".hotcell-agent-*")
	if err != nil {
		return fmt.Errorf("install agent: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install agent to %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install agent to %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install agent to %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install agent to %s: %w", dst, err)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
