package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/wire"
)

func (a *app) shellCmd() *cobra.Command {
	var (
		env    []string
		cwd    string
		attach string
		detach int
	)
	cmd := &cobra.Command{
		Use:   "shell ID [flags] [-- COMMAND [ARG...]]",
		Short: "Open an interactive terminal in a sandbox",
		Long: `Open an interactive terminal in a sandbox: a login shell (/bin/bash -l, or
/bin/sh where there is no bash), or the command after --. When stdin is a
terminal it is put in raw mode, so keys such as Ctrl-C and Tab go to the
sandbox, and the remote terminal follows this one's size. Without a terminal
(a pipe or a file as stdin) the command runs with plain pipes instead.

hotcell exits with the remote command's exit code. If the connection drops the
session goes on in the sandbox for --detach-timeout seconds; re-attach with
--attach and the session id hotcell prints.`,
		Example: `  hotcell shell sb-3f9a1c2b7d4e
  hotcell shell sb-3f9a1c2b7d4e --cwd /workspace/app -e DEBUG=1
  hotcell shell sb-3f9a1c2b7d4e -- python3
  hotcell shell sb-3f9a1c2b7d4e --attach pty-1a2b3c4d
  echo 'uname -a' | hotcell shell sb-3f9a1c2b7d4e`,
		Args: requireArgs(1, -1, "a sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			envMap, err := parseKV("env", env)
			if err != nil {
				return err
			}
			if attach != "" && (len(argv) > 0 || cwd != "" || envMap != nil) {
				return usagef("--attach re-attaches to a running session: it takes no command, --cwd or --env")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.shell(cmd.Context(), c, id, attach, client.TerminalOptions{Argv: argv, Env: envMap, Cwd: cwd, DetachTimeoutSec: detach})
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `KEY=VALUE` (repeatable)")
	f.StringVarP(&cwd, "cwd", "w", "", "working directory (default /workspace)")
	f.StringVar(&attach, "attach", "", "re-attach to the detached terminal `SESSION`")
	f.IntVar(&detach, "detach-timeout", 0, "seconds the session outlives a dropped connection (0: the daemon's default, 300)")
	return cmd
}

// ttyFd returns the descriptor of r when it is a terminal.
func ttyFd(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// loginShell picks the default command: a login bash when the image has
// one, so that the user's profile (PATH, prompt) applies, else sh.
func loginShell(ctx context.Context, c *client.Client, id string) ([]string, error) {
	st, err := c.Stat(ctx, id, "/bin/bash")
	switch {
	case err == nil && (st.Type == client.FileTypeFile || st.Type == client.FileTypeSymlink):
		return []string{"/bin/bash", "-l"}, nil
	case err == nil || errors.Is(err, client.ErrNotFound):
		return []string{"/bin/sh"}, nil
	}
	return nil, err
}

func (a *app) shell(ctx context.Context, c *client.Client, id, attach string, opts client.TerminalOptions) (err error) {
	inFd, inTTY := ttyFd(a.stdin)
	// The size comes from whichever end is the terminal; stdout is the
	// usual one, but `hotcell shell ID > log` still has a terminal as stdin.
	sizeFd, sizeOK := ttyFd(a.stdout)
	if !sizeOK {
		sizeFd, sizeOK = inFd, inTTY
	}
	var t *client.Terminal
	if attach != "" {
		t, err = c.AttachTerminal(ctx, id, attach)
	} else {
		if len(opts.Argv) == 0 {
			if opts.Argv, err = loginShell(ctx, c, id); err != nil {
				return err
			}
		}
		opts.TTY = inTTY
		if inTTY {
			if w, h, err := term.GetSize(sizeFd); err == nil && sizeOK {
				opts.Cols, opts.Rows = w, h
			}
			if tt := a.getenv("TERM"); tt != "" {
				if opts.Env == nil {
					opts.Env = map[string]string{}
				}
				if _, set := opts.Env["TERM"]; !set {
					opts.Env["TERM"] = tt
				}
			}
		}
		t, err = c.OpenTerminal(ctx, id, opts)
	}
	if err != nil {
		return err
	}
	defer t.Close()

	if t.TTY() && inTTY {
		old, err := term.MakeRaw(inFd)
		if err != nil {
			return fmt.Errorf("shell: put the terminal in raw mode: %w", err)
		}
		// A panic or an early return must never leave the user's terminal
		// raw: that makes it look dead.
		defer func() {
			_ = term.Restore(inFd, old)
			if p := recover(); p != nil {
				panic(p)
			}
		}()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		resize := func() {
			if w, h, err := term.GetSize(sizeFd); err == nil && sizeOK {
				_ = t.Resize(w, h)
			}
		}
		if attach != "" {
			resize() // the session keeps the size of its last client
		}
		winchDone := make(chan struct{})
		defer close(winchDone)
		go func() {
			for {
				select {
				case <-winch:
					resize()
				case <-winchDone:
					return
				}
			}
		}()
	}

	// stdin is copied for as long as there is any; its goroutine may stay
	// blocked reading a terminal after the exit, which ends the CLI anyway.
	go func() {
		_, _ = io.Copy(t, a.stdin)
		_ = t.CloseStdin()
	}()
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		_, _ = io.Copy(a.stdout, t)
	}()
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		_, _ = io.Copy(a.stderr, t.Stderr())
	}()
	// SIGTERM or SIGHUP of the CLI (run's context) drops the connection; the
	// session then waits in the sandbox to be re-attached.
	stop := context.AfterFunc(ctx, func() { _ = t.Close() })
	defer stop()

	exit, werr := t.Wait()
	<-outDone
	<-errDone
	if werr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w; the session may still run: re-attach with `hotcell shell %s --attach %s`", werr, id, t.SessionID())
	}
	return exitWith(exitStatus(exit))
}

// exitStatus is the status a shell would report for exit: the code, or
// 128 plus the number of the signal that ended the process.
func exitStatus(exit client.ExitInfo) int {
	if exit.Signal != "" && exit.ExitCode <= 0 {
		if n, ok := wire.ParseSignal(exit.Signal); ok {
			return 128 + n
		}
		return exitError
	}
	return exit.ExitCode
}
