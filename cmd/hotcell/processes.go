package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
	"github.com/hotcell/hotcell/internal/wire"
)

func (a *app) psCmd() *cobra.Command {
	var all, asJSON, quiet bool
	var name string
	cmd := &cobra.Command{
		Use:   "ps ID [flags]",
		Short: "List a sandbox's background processes",
		Long: `List the background processes of a sandbox (those started with 'hotcell run'
or the API), running ones only unless --all also shows those that exited and
whose logs are still kept.`,
		Example: `  hotcell ps sb-3f9a1c2b7d4e
  hotcell ps sb-3f9a1c2b7d4e --all --name server
  hotcell ps sb-3f9a1c2b7d4e --json | jq '.processes[].id'`,
		Args: requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			opts := client.ProcessListOptions{Name: name, State: client.ProcessRunning}
			if all {
				opts.State = ""
			}
			list, err := c.ListProcesses(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			switch {
			case asJSON:
				if list == nil {
					list = []client.Process{}
				}
				return a.printJSON(client.ProcessList{Processes: list})
			case quiet:
				for _, p := range list {
					fmt.Fprintln(a.stdout, termsafe.String(p.ID))
				}
				return nil
			}
			return writeProcessTable(a.stdout, list, time.Now())
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&all, "all", "a", false, "also show processes that exited")
	f.StringVar(&name, "name", "", "only processes with this name")
	f.BoolVar(&asJSON, "json", false, "print the list as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the process ids")
	return cmd
}

func writeProcessTable(w io.Writer, list []client.Process, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tEXIT\tSTARTED\tCOMMAND")
	for _, p := range list {
		name, exit := p.Name, "-"
		if name == "" {
			name = "-"
		}
		if p.ExitCode != nil {
			exit = strconv.Itoa(*p.ExitCode)
			if p.Signal != "" {
				exit += " (" + p.Signal + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.String(p.ID), termsafe.String(name), termsafe.String(string(p.State)), termsafe.String(exit), ago(now, p.StartedAt), termsafe.String(truncate(processCommand(p), 60)))
	}
	return tw.Flush()
}

// processCommand renders a process's command line for a table cell.
func processCommand(p client.Process) string {
	if p.Command != "" {
		return p.Command
	}
	parts := make([]string, len(p.Argv))
	for i, s := range p.Argv {
		if s == "" || strings.ContainsAny(s, " \t\n'\"\\$`") {
			s = strconv.Quote(s)
		}
		parts[i] = s
	}
	return strings.Join(parts, " ")
}

// truncate shortens s to n runes for a table cell, and keeps it on one line.
func truncate(s string, n int) string {
	s = strings.NewReplacer("\n", `\n`, "\t", " ").Replace(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func (a *app) runCmd() *cobra.Command {
	var (
		env       []string
		cwd, name string
		shell     string
		keepAlive bool
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:     "run ID [flags] -- COMMAND [ARG...]",
		Aliases: []string{"start-process"},
		Short:   "Start a background process in a sandbox and print its id",
		Long: `Start a background process in a sandbox and print its id at once. The
sandbox's agent owns it: it keeps running after hotcell exits, and its output
is kept (the newest 8 MiB of each stream). Follow it with 'hotcell logs',
list it with 'hotcell ps', stop it with 'hotcell kill'.

--keep-alive marks the process as activity, so that an idle timeout does not
stop the sandbox while it runs (a server, a watcher).`,
		Example: `  hotcell run sb-3f9a1c2b7d4e -- python3 -m http.server 8000
  hotcell run sb-3f9a1c2b7d4e --name dev --keep-alive -c 'npm run dev'
  pid=$(hotcell run sb-3f9a1c2b7d4e -- make test) && hotcell logs -f sb-3f9a1c2b7d4e $pid`,
		Args: requireArgs(1, -1, "a sandbox ID and a command"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			req := client.StartProcessRequest{Cwd: cwd, Name: name, KeepAlive: keepAlive}
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
			p, err := c.StartProcess(cmd.Context(), id, req)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(p)
			}
			fmt.Fprintln(a.stdout, p.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `KEY=VALUE` (repeatable)")
	f.StringVarP(&cwd, "cwd", "w", "", "working directory (default /workspace)")
	f.StringVarP(&shell, "command", "c", "", "run this shell command line with /bin/sh -c")
	f.StringVar(&name, "name", "", "a name to find the process by (ps --name)")
	f.BoolVar(&keepAlive, "keep-alive", false, "count the running process as sandbox activity")
	f.BoolVar(&asJSON, "json", false, "print the process as JSON")
	return cmd
}

func (a *app) logsCmd() *cobra.Command {
	var (
		follow, stdoutOnly, stderrOnly, asJSON, raw bool
		from                                        int64
	)
	cmd := &cobra.Command{
		Use:   "logs ID PID [flags]",
		Short: "Print a background process's output",
		Long: `Print what a background process wrote: stdout to stdout and stderr to stderr,
byte for byte. With -f, keep printing new output until the process exits, and
then exit with its exit code. A dropped connection is resumed where it stopped:
no byte is lost or printed twice.

On a terminal, control characters other than tab and newline (ESC and the
sequences it starts, carriage return, C1 codes) are shown escaped, as \x1b:
the output comes from the sandbox, and raw sequences could rewrite the
screen. --raw prints them as they are; output to a file or pipe is always
byte for byte.

--from starts at a byte offset of the stream (with --stdout or --stderr), for
example the size already read in an earlier run. --json prints the log events
(base64 data with their offsets) one per line.`,
		Example: `  hotcell logs sb-3f9a1c2b7d4e 42
  hotcell logs -f sb-3f9a1c2b7d4e 42
  hotcell logs sb-3f9a1c2b7d4e 42 --stderr --from 1024`,
		Args: requireArgs(2, 2, "a sandbox ID and a process ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := client.LogOptions{Follow: follow}
			switch {
			case stdoutOnly && stderrOnly:
				return usagef("give --stdout or --stderr, not both (neither means both)")
			case stdoutOnly:
				opts.Stream = client.EventStdout
			case stderrOnly:
				opts.Stream = client.EventStderr
			case from != 0:
				return usagef("--from needs --stdout or --stderr: offsets are per stream")
			}
			if from < 0 {
				return usagef("--from %d: want a byte offset, 0 or more", from)
			}
			opts.Offset = from
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ProcessLogs(cmd.Context(), args[0], args[1], opts)
			if err != nil {
				return err
			}
			defer l.Close()
			stdout, stderr := a.stdout, a.stderr
			if !raw {
				if isTTY(stdout) {
					tw := termsafe.NewWriter(stdout)
					defer tw.Flush()
					stdout = tw
				}
				if isTTY(stderr) {
					tw := termsafe.NewWriter(stderr)
					defer tw.Flush()
					stderr = tw
				}
			}
			for {
				ev, err := l.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				if asJSON {
					if err := a.printJSONLine(ev); err != nil {
						return err
					}
					continue
				}
				switch ev.Type {
				case client.EventStdout:
					_, err = stdout.Write(ev.Data)
				case client.EventStderr:
					_, err = stderr.Write(ev.Data)
				case client.EventGap:
					fmt.Fprintf(a.stderr, "hotcell: [%d bytes of %s were rotated out before they were read]\n", ev.Dropped, ev.Stream)
				}
				if err != nil {
					return err
				}
			}
			exit, ok := l.Exit()
			if asJSON && ok {
				code := exitStatus(exit)
				return a.printJSONLine(client.LogEvent{Type: client.EventExit, ExitCode: code, Signal: exit.Signal})
			}
			if follow && ok {
				return exitWith(exitStatus(exit))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new output until the process exits")
	f.BoolVar(&stdoutOnly, "stdout", false, "only stdout")
	f.BoolVar(&stderrOnly, "stderr", false, "only stderr")
	f.Int64Var(&from, "from", 0, "start at this byte `OFFSET` of the stream (with --stdout or --stderr)")
	f.BoolVar(&asJSON, "json", false, "print the log events as JSON lines")
	f.BoolVar(&raw, "raw", false, "on a terminal too, print control characters as they are")
	return cmd
}

func (a *app) printJSONLine(v any) error {
	return json.NewEncoder(a.stdout).Encode(v)
}

func (a *app) killCmd() *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   "kill ID PID [flags]",
		Short: "Send a signal to a background process",
		Long: `Send a signal (default SIGTERM) to a background process and its whole process
group. The signal is a name (TERM, SIGKILL, int) or a number (9).`,
		Example: `  hotcell kill sb-3f9a1c2b7d4e 42
  hotcell kill sb-3f9a1c2b7d4e 42 -s KILL`,
		Args: requireArgs(2, 2, "a sandbox ID and a process ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, ok := wire.ParseSignal(sig); !ok {
				return usagef("--signal %q: want a signal name such as TERM, KILL, INT, HUP, or a number 1-64", sig)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.SignalProcess(cmd.Context(), args[0], args[1], sig)
		},
	}
	cmd.Flags().StringVarP(&sig, "signal", "s", "TERM", "the `SIGNAL` to send")
	return cmd
}
