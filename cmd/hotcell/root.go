package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/buildinfo"
	"github.com/hotcell/hotcell/internal/clientconfig"
	"github.com/hotcell/hotcell/internal/redact"
	"github.com/hotcell/hotcell/internal/termsafe"
)

// Exit codes other than a remote command's own.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// app is one invocation of the CLI: its streams, environment and the
// global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	flagURL, flagToken string

	// Set by client(): what was tried and where it came from, for error
	// messages.
	settings clientconfig.Settings
	// ran is set once a command's RunE is about to run: errors before that
	// are about the command line (exit 2), errors after it are not (exit 1).
	ran bool
}

// usageError marks an error in how the command was invoked.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCodeError ends the CLI with a given status and no message: the
// remote command's exit code, for exec.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// run is the whole CLI; main only exits with what it returns.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default handling so that a second
	// Ctrl-C kills a CLI that is slow to wind down.
	context.AfterFunc(ctx, stop)

	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	return a.exitCode(ctx, cmd, err)
}

func (a *app) exitCode(ctx context.Context, cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var ec exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		fmt.Fprintln(a.stderr, "hotcell: interrupted")
		return exitInterrupted
	}
	var ue usageError
	if !a.ran || errors.As(err, &ue) {
		fmt.Fprintf(a.stderr, "hotcell: %v\n", err)
		name := "hotcell"
		if cmd != nil {
			name = cmd.CommandPath()
		}
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", name)
		return exitUsage
	}
	// An error may quote what a sandbox said (an agent error, a path).
	fmt.Fprintf(a.stderr, "hotcell: %s\n", termsafe.Text(a.describe(err)))
	return exitError
}

// describe turns the two errors users hit most into advice. A command
// that never made the API client (image build, egress-node) did not try
// the daemon: an unreachable address there is its own (the Docker
// Engine's), said as it is.
func (a *app) describe(err error) string {
	if a.settings.URL != "" && client.IsUnreachable(err) {
		cause := err.Error()
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Err != nil {
			cause = opErr.Err.Error()
		}
		return fmt.Sprintf("cannot reach the hotcell daemon at %s (%s): start it with `hotcell serve`, or %s", redact.URL(a.settings.URL), cause, a.settings.URLHint())
	}
	if errors.Is(err, client.ErrUnauthenticated) {
		return fmt.Sprintf("the token was refused: check %s", a.settings.TokenHint())
	}
	return err.Error()
}

// client builds the API client from --url/HOTCELL_URL and
// --token/HOTCELL_TOKEN/the token file.
func (a *app) client() (*client.Client, error) {
	var err error
	a.settings, err = clientconfig.Resolve(clientconfig.Flags{URL: a.flagURL, Token: a.flagToken}, a.getenv)
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --token)", err)
	}
	return client.New(a.settings.URL, a.settings.Token, client.WithUserAgent("hotcell-cli/"+buildinfo.Version()))
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "hotcell",
		Short: "Self-hosted sandboxes for AI agents",
		Long: `hotcell runs sandboxes for AI agents on your own Linux host: each agent gets its
own box with a persistent /workspace, driven over one HTTP API.

Run the daemon with 'hotcell serve'; the other commands are its client. They
find the daemon at --url (or HOTCELL_URL, default ` + client.DefaultURL + `) and
authenticate with --token (or HOTCELL_TOKEN, or the token file the daemon
writes, $HOTCELL_DATA_DIR/token, default ` + clientconfig.DefaultDataDir + `/token).`,
		Example: `  hotcell serve
  id=$(hotcell create --label agent=demo)
  hotcell exec $id -- uname -a
  hotcell cp ./src $id:/workspace/src
  hotcell rm $id`,
		SilenceErrors: true,
		// Runtime errors are not about usage; usage errors get a one-line
		// pointer to --help from exitCode instead of the whole usage text.
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.ran = true
			return nil
		},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{suggestFlag(c, err)} })
	root.PersistentFlags().StringVar(&a.flagURL, "url", "", "daemon URL (default $HOTCELL_URL, else "+client.DefaultURL+")")
	root.PersistentFlags().StringVar(&a.flagToken, "token", "", "API token (default $HOTCELL_TOKEN, else the daemon's token file)")
	root.AddGroup(
		&cobra.Group{ID: "sandbox", Title: "Sandbox commands:"},
		&cobra.Group{ID: "host", Title: "Host commands:"},
	)
	for _, c := range []*cobra.Command{
		a.createCmd(), a.lsCmd(), a.inspectCmd(), a.rmCmd(), a.startCmd(), a.stopCmd(), a.execCmd(), a.codeCmd(), a.cpCmd(),
		a.shellCmd(), a.runCmd(), a.psCmd(), a.logsCmd(), a.killCmd(), a.portForwardCmd(), a.statsCmd(),
		a.pauseCmd(), a.resumeCmd(), a.timeoutsCmd(), a.eventsCmd(),
		a.egressCmd(), a.usageCmd(), a.gatewayCmd(),
		a.backupCmd(), a.backupsCmd(), a.restoreCmd(), a.snapshotCmd(),
	} {
		c.GroupID = "sandbox"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.serveCmd(), a.egressNodeCmd(), a.imageCmd(), a.templateCmd(), a.keysCmd(), a.versionCmd(), a.mcpCmd()} {
		c.GroupID = "host"
		root.AddCommand(c)
	}
	return root
}

// requireArgs is cobra.ExactArgs etc. with our usage error and a message
// that names what is missing.
func requireArgs(min, max int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || (max >= 0 && len(args) > max) {
			return usagef("%s: expected %s, got %d argument(s)", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseKV parses repeated K=V flags.
func parseKV(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, usagef("--%s %q: want KEY=VALUE", flag, v)
		}
		m[k] = val
	}
	return m, nil
}
