package wire

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TerminalRequest starts an interactive session: a process with a PTY
// (TTY true) or with plain pipes (TTY false: stdin, and stdout and stderr
// kept apart). Command (run by the shell) and Argv are as in ExecRequest;
// with neither the session runs an interactive shell.
type TerminalRequest struct {
	Command string            `json:"command,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	TTY     bool              `json:"tty,omitempty"`
	// Cols and Rows size the PTY; 0 means 80x24.
	Cols int `json:"cols,omitempty"`
	Rows int `json:"rows,omitempty"`
	// DetachTimeoutSec is how long the session outlives its last client
	// (and keeps its exit status once exited); 0 means 300.
	DetachTimeoutSec int `json:"detachTimeoutSec,omitempty"`
}

// TerminalInfo describes a session.
type TerminalInfo struct {
	ID               string    `json:"id"`
	PID              int       `json:"pid"`
	Argv             []string  `json:"argv"`
	Cwd              string    `json:"cwd"`
	TTY              bool      `json:"tty"`
	Cols             int       `json:"cols,omitempty"`
	Rows             int       `json:"rows,omitempty"`
	DetachTimeoutSec int       `json:"detachTimeoutSec"`
	StartedAt        time.Time `json:"startedAt"`
	Attached         bool      `json:"attached"`
	Running          bool      `json:"running"`
	// ExitCode and Signal are set once the process has exited.
	ExitCode *int       `json:"exitCode,omitempty"`
	Signal   string     `json:"signal,omitempty"`
	ExitedAt *time.Time `json:"exitedAt,omitempty"`
}

// TerminalList is the answer of GET /v1/terminals.
type TerminalList struct {
	Terminals []TerminalInfo `json:"terminals"`
}

// Terminal control message types: JSON text frames on a terminal's
// WebSocket. Binary frames carry the bytes: client to server, stdin; server
// to client, the PTY's output or, in pipe mode, a channel byte
// (TerminalStdout or TerminalStderr) followed by the data.
const (
	// Client to server.
	TerminalResize   = "resize"    // cols, rows
	TerminalSignal   = "signal"    // signal: "SIGINT" or "2"
	TerminalStdinEOF = "stdin_eof" // closes stdin (pipe mode) or sends ^D (PTY)
	// Server to client.
	TerminalReady = "ready" // sessionId, tty: first message; replayed output follows
	TerminalExit  = "exit"  // exitCode, signal: the last message
	TerminalError = "error" // message
)

// Channel bytes that open each server-to-client binary frame in pipe mode.
const (
	TerminalStdout byte = 1
	TerminalStderr byte = 2
)

// TerminalMessage is one control message.
type TerminalMessage struct {
	Type      string `json:"type"`
	SessionID string `json:"sessionId,omitempty"`
	TTY       bool   `json:"tty,omitempty"`
	Cols      int    `json:"cols,omitempty"`
	Rows      int    `json:"rows,omitempty"`
	Signal    string `json:"signal,omitempty"`
	ExitCode  *int   `json:"exitCode,omitempty"`
	Message   string `json:"message,omitempty"`
}

// QueryError is a query parameter that does not parse; Field names it.
type QueryError struct {
	Field string
	Msg   string
}

func (e *QueryError) Error() string { return e.Field + ": " + e.Msg }

// Query encodes r as the query of the exec WebSocket (GET /v1/exec): argv
// and env ("NAME=value") repeat.
func (r TerminalRequest) Query() url.Values {
	q := url.Values{}
	if r.Command != "" {
		q.Set("command", r.Command)
	}
	for _, a := range r.Argv {
		q.Add("argv", a)
	}
	names := make([]string, 0, len(r.Env))
	for k := range r.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		q.Add("env", k+"="+r.Env[k])
	}
	if r.Cwd != "" {
		q.Set("cwd", r.Cwd)
	}
	if r.TTY {
		q.Set("tty", "true")
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"cols", r.Cols}, {"rows", r.Rows}, {"detachTimeoutSec", r.DetachTimeoutSec}} {
		if p.v != 0 {
			q.Set(p.name, strconv.Itoa(p.v))
		}
	}
	return q
}

// TerminalRequestFromQuery decodes what Query encodes. It checks syntax
// only; the ranges are the caller's to check. An error is a *QueryError.
func TerminalRequestFromQuery(q url.Values) (TerminalRequest, error) {
	r := TerminalRequest{Command: q.Get("command"), Argv: q["argv"], Cwd: q.Get("cwd")}
	for _, kv := range q["env"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return r, &QueryError{"env", fmt.Sprintf("%.64q is not NAME=value", kv)}
		}
		if r.Env == nil {
			r.Env = map[string]string{}
		}
		r.Env[k] = v
	}
	if q.Has("tty") {
		s := q.Get("tty")
		if s == "" {
			r.TTY = true
		} else if b, err := strconv.ParseBool(s); err == nil {
			r.TTY = b
		} else {
			return r, &QueryError{"tty", fmt.Sprintf("%.64q is not true or false", s)}
		}
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"cols", &r.Cols}, {"rows", &r.Rows}, {"detachTimeoutSec", &r.DetachTimeoutSec}} {
		s := q.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return r, &QueryError{p.name, fmt.Sprintf("%.64q is not an integer", s)}
		}
		*p.v = int(n)
	}
	return r, nil
}
