package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
)

func (a *app) execCmd() *cobra.Command {
	var (
		env     []string
		cwd     string
		shell   string
		timeout time.Duration
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox, streaming its output as it is produced: the
command's stdout to stdout and its stderr to stderr, byte for byte. hotcell
exits with the command's exit code.

The words after -- are the command and its arguments, run directly (no shell).
To run a shell command line, pass it to -c; it runs with /bin/sh -c.`,
		Example: `  hotcell exec sb-3f9a1c2b7d4e -- ls -la /workspace
  hotcell exec sb-3f9a1c2b7d4e --cwd /workspace --env CI=1 -- make test
  hotcell exec sb-3f9a1c2b7d4e -c 'cat /etc/os-release | head -1'
  hotcell exec sb-3f9a1c2b7d4e --json -c 'echo hi'`,
		Args: requireArgs(1, -1, "a sandbox ID and a command"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			req := client.ExecRequest{Cwd: cwd, TimeoutMs: timeout.Milliseconds()}
			var err error
			if req.Command, req.Argv, err = commandArgs(shell, argv); err != nil {
				return err
			}
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if asJSON {
				res, err := c.Exec(cmd.Context(), id, req)
				if err != nil {
					return err
				}
				if err := a.printJSON(res); err != nil {
					return err
				}
				return exitWith(res.ExitCode)
			}
			s, err := c.ExecStream(cmd.Context(), id, req)
			if err != nil {
				return err
			}
			defer s.Close()
			exit, err := s.CopyTo(a.stdout, a.stderr)
			if err != nil {
				return err
			}
			if exit.TimedOut {
				fmt.Fprintf(a.stderr, "hotcell: command timed out after %s and was killed\n", time.Duration(exit.DurationMs)*time.Millisecond)
			}
			return exitWith(exit.ExitCode)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `KEY=VALUE` (repeatable)")
	f.StringVarP(&cwd, "cwd", "w", "", "working directory (default /workspace)")
	f.StringVarP(&shell, "command", "c", "", "run this shell command line with /bin/sh -c")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (0: the daemon's default)")
	f.BoolVar(&asJSON, "json", false, "wait for the end and print stdout, stderr and exit code as JSON")
	return cmd
}

// exitWith ends the CLI with a remote command's exit code.
func exitWith(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		// Not a code a process can have; still report a failure.
		return exitCodeError{code: exitError}
	}
	return exitCodeError{code: code}
}

// commandArgs takes the command of exec and run: a shell line from -c, or
// the words after --, never both and never neither.
func commandArgs(shell string, argv []string) (command string, args []string, err error) {
	switch {
	case shell != "" && len(argv) > 0:
		return "", nil, usagef("give either -c COMMAND or a command after --, not both")
	case shell != "":
		return shell, nil, nil
	case len(argv) > 0:
		return "", argv, nil
	}
	return "", nil, usagef("no command: give one after -- or with -c")
}
