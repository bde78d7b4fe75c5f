package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
)

// Each of stdout and stderr is shown up to outputHead+outputTail bytes:
// enough for a build log's start and its errors, little enough that a few
// calls fit an agent's context.
const (
	outputHead = 8 << 10
	outputTail = 8 << 10
)

const outputHint = `to see all of it, run the command again with its output redirected to a file (cmd > /tmp/out.txt 2>&1) and page through that with file_read`

type execIn struct {
	SandboxID string            `json:"sandboxId" jsonschema:"the sandbox to run the command in"`
	Command   string            `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c, so pipes, redirects, && and globs work; give either command or argv"`
	Argv      []string          `json:"argv,omitempty" jsonschema:"a program and its arguments, run directly without a shell (the program is looked up in PATH); give either command or argv"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory, absolute or relative to /workspace; absent means /workspace"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"extra environment variables for this command"`
	Stdin     string            `json:"stdin,omitempty" jsonschema:"text given to the command on its standard input; absent means empty input"`
	TimeoutMs int64             `json:"timeoutMs,omitempty" jsonschema:"kill the command, and everything it started, after this many milliseconds; absent means the daemon's default (60000 unless configured otherwise). For servers and other programs that do not end, use process_start instead"`
}

type execOut struct {
	ExitCode    int    `json:"exitCode" jsonschema:"the command's exit code (0 is success); 128+N when it was killed by signal N"`
	Signal      string `json:"signal,omitempty" jsonschema:"the signal that killed the command, if one did"`
	TimedOut    bool   `json:"timedOut" jsonschema:"the command was killed because it ran longer than timeoutMs"`
	DurationMs  int64  `json:"durationMs"`
	Stdout      string `json:"stdout" jsonschema:"standard output; a long one keeps its first and last 8 KiB around a note saying how many bytes were omitted"`
	Stderr      string `json:"stderr" jsonschema:"standard error, shortened like stdout"`
	StdoutBytes int64  `json:"stdoutBytes" jsonschema:"the full size of standard output"`
	StderrBytes int64  `json:"stderrBytes" jsonschema:"the full size of standard error"`
	Note        string `json:"note,omitempty"`
}

func (t *tools) registerExec(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "exec",
		Title: "Run a command",
		Description: `Run a command in a sandbox to completion and return its exit code, stdout and stderr.
Give either "command" (a shell line, run with /bin/sh -c) or "argv" (a program and its arguments, no shell). It runs in /workspace unless "cwd" says otherwise, as root.
A non-zero exit code is a normal result, not a tool error. Output longer than 16 KiB per stream keeps its first and last 8 KiB with a note saying how many bytes were omitted.
The command is killed after timeoutMs (default 60 s): start servers and other long-running programs with process_start instead.`,
		InputSchema: inputSchema[execIn](map[string]prop{
			"sandboxId": nonEmpty,
			"timeoutMs": between(0, 24*60*60*1000),
		}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
		out, err := t.exec(ctx, in)
		if err != nil {
			return nil, execOut{}, t.explain(err)
		}
		return nil, out, nil
	})
}

// exec streams the command's output through head/tail buffers, so that
// output of any size costs bounded memory and the tail (where errors
// usually are) is kept, which the buffered API call, cutting at its cap,
// would lose.
func (t *tools) exec(ctx context.Context, in execIn) (execOut, error) {
	st, err := t.c.ExecStream(ctx, in.SandboxID, client.ExecRequest{
		Command: in.Command, Argv: in.Argv, Cwd: in.Cwd, Env: in.Env, Stdin: in.Stdin, TimeoutMs: in.TimeoutMs,
	})
	if err != nil {
		return execOut{}, err
	}
	defer st.Close()
	stdout, stderr := newHeadTail(outputHead, outputTail), newHeadTail(outputHead, outputTail)
	exit, err := st.CopyTo(stdout, stderr)
	if err != nil {
		return execOut{}, err
	}
	out := execOut{
		ExitCode: exit.ExitCode, Signal: exit.Signal, TimedOut: exit.TimedOut, DurationMs: exit.DurationMs,
		Stdout: stdout.String(outputHint), Stderr: stderr.String(outputHint),
		StdoutBytes: stdout.Total(), StderrBytes: stderr.Total(),
	}
	var notes []string
	if exit.TimedOut {
		notes = append(notes, fmt.Sprintf("the command was killed after timeoutMs (%s); give a larger timeoutMs, or run it with process_start", timeoutText(in.TimeoutMs)))
	}
	if stdout.Cut() || stderr.Cut() {
		notes = append(notes, "output was shortened: "+outputHint)
	}
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

func timeoutText(ms int64) string {
	if ms == 0 {
		return "the daemon's default"
	}
	return fmt.Sprintf("%d ms", ms)
}
