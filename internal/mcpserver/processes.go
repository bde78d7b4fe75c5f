package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// process_logs returns logDefault bytes of each stream unless asked for
// more, and never more than logMax.
const (
	logDefault = 16 << 10
	logMax     = 256 << 10
)

type processStartIn struct {
	SandboxID string            `json:"sandboxId" jsonschema:"the sandbox to start the process in"`
	Command   string            `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c; give either command or argv"`
	Argv      []string          `json:"argv,omitempty" jsonschema:"a program and its arguments, run directly without a shell; give either command or argv"`
	Name      string            `json:"name,omitempty" jsonschema:"a label to recognise the process by in process_list, e.g. 'web server'"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory, absolute or relative to /workspace; absent means /workspace"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"extra environment variables for the process"`
}

type processOut struct {
	ProcessID   string `json:"processId" jsonschema:"the id to pass to process_logs and process_signal"`
	PID         int    `json:"pid"`
	Name        string `json:"name,omitempty"`
	Command     string `json:"command"`
	State       string `json:"state" jsonschema:"running or exited"`
	ExitCode    *int   `json:"exitCode,omitempty" jsonschema:"set once the process exited: its exit code, or 128+N if signal N killed it"`
	Signal      string `json:"signal,omitempty" jsonschema:"the signal that killed the process, if one did"`
	StartedAt   string `json:"startedAt"`
	EndedAt     string `json:"endedAt,omitempty"`
	StdoutBytes int64  `json:"stdoutBytes" jsonschema:"how many bytes of stdout the process has written so far"`
	StderrBytes int64  `json:"stderrBytes" jsonschema:"how many bytes of stderr the process has written so far"`
}

func processFrom(p client.Process) processOut {
	cmd := p.Command
	if cmd == "" {
		cmd = strings.Join(p.Argv, " ")
	}
	out := processOut{
		ProcessID: p.ID, PID: p.PID, Name: p.Name, Command: cmd, State: p.State, ExitCode: p.ExitCode, Signal: p.Signal,
		StartedAt: p.StartedAt.UTC().Format(time.RFC3339), StdoutBytes: p.StdoutBytes, StderrBytes: p.StderrBytes,
	}
	if p.EndedAt != nil {
		out.EndedAt = p.EndedAt.UTC().Format(time.RFC3339)
	}
	return out
}

type processListIn struct {
	SandboxID string `json:"sandboxId" jsonschema:"the sandbox whose background processes to list"`
	State     string `json:"state,omitempty" jsonschema:"only processes in this state; absent means all"`
}

type processListOut struct {
	Processes []processOut `json:"processes"`
}

type processLogsIn struct {
	SandboxID    string `json:"sandboxId" jsonschema:"the sandbox the process runs in"`
	ProcessID    string `json:"processId" jsonschema:"the processId returned by process_start or process_list"`
	StdoutOffset int64  `json:"stdoutOffset,omitempty" jsonschema:"byte offset in stdout to read from; pass the previous result's stdoutNextOffset to get only new output; absent means the start"`
	StderrOffset int64  `json:"stderrOffset,omitempty" jsonschema:"byte offset in stderr to read from, like stdoutOffset"`
	MaxBytes     int64  `json:"maxBytes,omitempty" jsonschema:"at most this many bytes of each stream; absent means 16384, more than 262144 reads 262144"`
	Tail         bool   `json:"tail,omitempty" jsonschema:"read the last maxBytes of each stream instead, ignoring the offsets"`
}

type processLogsOut struct {
	Process          processOut `json:"process" jsonschema:"the process, with its state and, once it exited, its exit code"`
	Stdout           string     `json:"stdout"`
	Stderr           string     `json:"stderr"`
	StdoutOffset     int64      `json:"stdoutOffset" jsonschema:"where stdout starts in the process's whole stdout"`
	StderrOffset     int64      `json:"stderrOffset" jsonschema:"where stderr starts in the process's whole stderr"`
	StdoutNextOffset int64      `json:"stdoutNextOffset" jsonschema:"pass as stdoutOffset to read on"`
	StderrNextOffset int64      `json:"stderrNextOffset" jsonschema:"pass as stderrOffset to read on"`
	Note             string     `json:"note,omitempty"`
}

type processSignalIn struct {
	SandboxID string `json:"sandboxId" jsonschema:"the sandbox the process runs in"`
	ProcessID string `json:"processId" jsonschema:"the process to signal"`
	Signal    string `json:"signal,omitempty" jsonschema:"signal name or number: TERM (the default) asks the process to stop, KILL forces it, INT is Ctrl-C, HUP often means reload"`
}

type processSignalOut struct {
	ProcessID string `json:"processId"`
	Signal    string `json:"signal"`
	Sent      bool   `json:"sent"`
}

func (t *tools) registerProcesses(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "process_start",
		Title: "Start a background process",
		Description: `Start a long-running program in a sandbox (a dev server, a watcher, a long build) and return at once with its processId.
It keeps running after this call, with no time limit, until it exits or is signalled. Its stdout and stderr are kept (the last 8 MiB of each): read them with process_logs. Stop it with process_signal.`,
		InputSchema: inputSchema[processStartIn](map[string]prop{"sandboxId": nonEmpty}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in processStartIn) (*mcp.CallToolResult, processOut, error) {
		p, err := t.c.StartProcess(ctx, in.SandboxID, client.StartProcessRequest{
			Command: in.Command, Argv: in.Argv, Name: in.Name, Cwd: in.Cwd, Env: in.Env,
		})
		if err != nil {
			return nil, processOut{}, t.explain(err)
		}
		return nil, processFrom(p), nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:  "process_logs",
		Title: "Read a background process's output",
		Description: `Read what a background process wrote to stdout and stderr, up to maxBytes (default 16 KiB) of each, from the given offsets, without waiting.
The result has the process's state and exit code, and the next offsets: pass them back to get only the output written since. Set tail to read the latest output instead.`,
		InputSchema: inputSchema[processLogsIn](map[string]prop{
			"sandboxId": nonEmpty, "processId": nonEmpty,
			"stdoutOffset": atLeast(0), "stderrOffset": atLeast(0),
			"maxBytes": all(atLeast(0), byDefault(logDefault)),
		}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in processLogsIn) (*mcp.CallToolResult, processLogsOut, error) {
		out, err := t.processLogs(ctx, in)
		if err != nil {
			return nil, processLogsOut{}, t.explain(err)
		}
		return nil, out, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "process_list",
		Title:       "List background processes",
		Description: "List a sandbox's background processes started with process_start, oldest first, with their state, exit code and how much output each has written.",
		InputSchema: inputSchema[processListIn](map[string]prop{"sandboxId": nonEmpty, "state": enum(client.ProcessRunning, client.ProcessExited)}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in processListIn) (*mcp.CallToolResult, processListOut, error) {
		ps, err := t.c.ListProcesses(ctx, in.SandboxID, client.ProcessListOptions{State: in.State})
		if err != nil {
			return nil, processListOut{}, t.explain(err)
		}
		out := processListOut{Processes: []processOut{}}
		for _, p := range ps {
			out.Processes = append(out.Processes, processFrom(p))
		}
		return nil, out, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "process_signal",
		Title:       "Signal a background process",
		Description: "Send a signal to a background process and everything it started (its process group): TERM (the default) to stop it, KILL if it does not stop. Check the outcome with process_logs or process_list.",
		InputSchema: inputSchema[processSignalIn](map[string]prop{"sandboxId": nonEmpty, "processId": nonEmpty, "signal": byDefault("TERM")}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in processSignalIn) (*mcp.CallToolResult, processSignalOut, error) {
		if in.Signal == "" {
			in.Signal = "TERM"
		}
		if err := t.c.SignalProcess(ctx, in.SandboxID, in.ProcessID, in.Signal); err != nil {
			return nil, processSignalOut{}, t.explain(err)
		}
		return nil, processSignalOut{ProcessID: in.ProcessID, Signal: in.Signal, Sent: true}, nil
	})
}

func (t *tools) processLogs(ctx context.Context, in processLogsIn) (processLogsOut, error) {
	maxBytes := in.MaxBytes
	var notes []string
	switch {
	case maxBytes <= 0:
		maxBytes = logDefault
	case maxBytes > logMax:
		notes = append(notes, fmt.Sprintf("maxBytes was lowered to the maximum, %d", logMax))
		maxBytes = logMax
	}
	// The process first: its sizes say how much there is to read, so the
	// reads below stop at what exists rather than waiting for more.
	p, err := t.c.GetProcess(ctx, in.SandboxID, in.ProcessID)
	if err != nil {
		return processLogsOut{}, err
	}
	out := processLogsOut{Process: processFrom(p)}
	for _, s := range []struct {
		stream      string
		field       string
		offset      int64
		total       int64
		text        *string
		start, next *int64
	}{
		{client.EventStdout, "stdoutOffset", in.StdoutOffset, p.StdoutBytes, &out.Stdout, &out.StdoutOffset, &out.StdoutNextOffset},
		{client.EventStderr, "stderrOffset", in.StderrOffset, p.StderrBytes, &out.Stderr, &out.StderrOffset, &out.StderrNextOffset},
	} {
		off := s.offset
		if in.Tail {
			off = max(0, s.total-maxBytes)
		}
		if off < 0 || off > s.total {
			return processLogsOut{}, errdefs.Invalid(s.field, "%d is outside the %d bytes of %s written so far", off, s.total, s.stream)
		}
		chunk, err := t.readLog(ctx, in.SandboxID, in.ProcessID, s.stream, off, min(maxBytes, s.total-off))
		if err != nil {
			return processLogsOut{}, err
		}
		data := chunk.data
		if in.Tail {
			// Start on a character, not in the middle of one.
			k := skipContinuation(data)
			data, chunk.start = data[k:], chunk.start+int64(k)
		}
		// Keep a character cut at the end for the next read, unless that
		// is all there is.
		if n := completeUTF8(data); n > 0 {
			data = data[:n]
		}
		*s.text = strings.ToValidUTF8(string(data), "\uFFFD")
		*s.start, *s.next = chunk.start, chunk.start+int64(len(data))
		if chunk.dropped > 0 {
			notes = append(notes, fmt.Sprintf("%d bytes of %s before offset %d were already dropped by log rotation (only the last 8 MiB are kept)", chunk.dropped, s.stream, chunk.start))
		}
		if rest := s.total - *s.next; rest > 0 {
			notes = append(notes, fmt.Sprintf("%d more bytes of %s: read on with %s %d", rest, s.stream, s.field, *s.next))
		}
	}
	if p.State == client.ProcessRunning {
		notes = append(notes, "the process is still running; call again with the next offsets for new output")
	}
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

type logChunk struct {
	data    []byte
	start   int64 // the offset of data[0]
	dropped int64 // bytes rotation dropped between the asked offset and start
}

// readLog reads up to n bytes of one stream from off, and no further: it
// does not follow, so it never waits for output.
func (t *tools) readLog(ctx context.Context, id, pid, stream string, off, n int64) (logChunk, error) {
	c := logChunk{start: off}
	if n <= 0 {
		return c, nil
	}
	l, err := t.c.ProcessLogs(ctx, id, pid, client.LogOptions{Stream: stream, Offset: off})
	if err != nil {
		return c, err
	}
	defer l.Close()
	c.data = make([]byte, 0, n)
	for int64(len(c.data)) < n {
		ev, err := l.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, err
		}
		if ev.Type == client.EventGap {
			if len(c.data) > 0 {
				break // rotation overtook this read: the next call reports the gap
			}
			c.dropped += ev.Offset - c.start
			c.start = ev.Offset
			continue
		}
		take := min(int64(len(ev.Data)), n-int64(len(c.data)))
		c.data = append(c.data, ev.Data[:take]...)
	}
	return c, nil
}
