package wire

import (
	"strconv"
	"strings"
	"time"
)

// StartProcessRequest starts a background process. Exactly one of Command
// (run by /bin/sh -c) and Argv is set. Its stdin is empty; stdout and stderr
// go to logs the agent keeps.
type StartProcessRequest struct {
	Command string            `json:"command,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	// Name is a free label to find the process by; it need not be unique.
	Name string `json:"name,omitempty"`
	// KeepAlive marks a process that keeps its sandbox busy (idle timeouts
	// count it as activity).
	KeepAlive bool `json:"keepAlive,omitempty"`
	// LogCapBytes bounds what is kept of each of stdout and stderr; older
	// bytes are dropped by rotation. 0 means the default (8 MiB).
	LogCapBytes int64 `json:"logCapBytes,omitempty"`
}

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// Process is a background process and how it ended.
type Process struct {
	// ID names the process in the API; it is its pid, made unique if the
	// pid was used before.
	ID      string   `json:"id"`
	PID     int      `json:"pid"`
	Name    string   `json:"name,omitempty"`
	Command string   `json:"command,omitempty"`
	Argv    []string `json:"argv,omitempty"`
	Cwd     string   `json:"cwd"`
	State   string   `json:"state"`
	// ExitCode is set once the process exited: its code, or 128+signal.
	ExitCode *int `json:"exitCode,omitempty"`
	// Signal names the signal that killed it, e.g. "SIGTERM".
	Signal      string     `json:"signal,omitempty"`
	StartedAt   time.Time  `json:"startedAt"`
	EndedAt     *time.Time `json:"endedAt,omitempty"`
	KeepAlive   bool       `json:"keepAlive,omitempty"`
	LogCapBytes int64      `json:"logCapBytes"`
	// StdoutBytes and StderrBytes are how many bytes each stream has
	// produced so far: the offset the next byte will have.
	StdoutBytes int64 `json:"stdoutBytes"`
	StderrBytes int64 `json:"stderrBytes"`
	// Error says why the process record is incomplete (its agent restarted).
	Error string `json:"error,omitempty"`
}

// ProcessList is the body of GET .../processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// SignalRequest is the body of POST .../processes/{pid}/signal. Signal is a
// name ("TERM", "SIGTERM", "kill") or a number ("9").
type SignalRequest struct {
	Signal string `json:"signal"`
}

// Log stream event types, besides EventStdout, EventStderr, EventKeepalive
// and EventExit (a failed stream ends with a StreamError line).
const (
	// EventGap says bytes were dropped by rotation before they could be
	// read: Stream resumes at Offset, Dropped bytes after the asked offset.
	EventGap = "gap"
	// EventEnd ends a log read that does not follow: everything there was
	// has been sent.
	EventEnd = "end"
)

// LogEvent is one line of a process log stream (application/x-ndjson).
// Data is base64 in JSON. Offset is the absolute position of Data's first
// byte in its stream since the process started, so a reader that lost its
// connection asks again from Offset+len(Data) and gets no byte twice.
type LogEvent struct {
	Type     string `json:"type"`
	Stream   string `json:"stream,omitempty"`
	Offset   int64  `json:"offset,omitempty"`
	Data     []byte `json:"data,omitempty"`
	Dropped  int64  `json:"dropped,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Message, on exit, says why the exit status is unknown (the agent
	// restarted while the process ran).
	Message string `json:"message,omitempty"`
	// StdoutBytes and StderrBytes, on end and exit, are the streams' sizes.
	StdoutBytes int64 `json:"stdoutBytes,omitempty"`
	StderrBytes int64 `json:"stderrBytes,omitempty"`
}

// linuxSignals are the Linux signal numbers by name (without SIG), as on
// x86-64 and arm64; realtime signals are RTMIN+n.
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "IOT": 6, "BUS": 7,
	"FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14,
	"TERM": 15, "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20,
	"TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26,
	"PROF": 27, "WINCH": 28, "IO": 29, "POLL": 29, "PWR": 30, "SYS": 31,
}

const (
	sigRTMin = 34
	sigRTMax = 64
)

// ParseSignal reads a signal as a name ("TERM", "SIGTERM", "sigterm",
// "RTMIN+2") or a number (1-64). It reports false for anything that is not
// a real signal; 0 is not one.
func ParseSignal(s string) (int, bool) {
	if s == "" || len(s) > 16 {
		return 0, false
	}
	if s[0] >= '0' && s[0] <= '9' {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > sigRTMax || n == 32 || n == 33 {
			// 32 and 33 are glibc's internal realtime signals.
			return 0, false
		}
		return n, true
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if n, ok := linuxSignals[name]; ok {
		return n, true
	}
	for _, rt := range []struct {
		prefix string
		base   int
		sign   int
	}{{"RTMIN", sigRTMin, 1}, {"RTMAX", sigRTMax, -1}} {
		rest, ok := strings.CutPrefix(name, rt.prefix)
		if !ok {
			continue
		}
		if rest == "" {
			return rt.base, true
		}
		want := "+"
		if rt.sign < 0 {
			want = "-"
		}
		digits, ok := strings.CutPrefix(rest, want)
		if !ok || digits == "" || digits[0] < '0' || digits[0] > '9' {
			return 0, false
		}
		k, err := strconv.Atoi(digits)
		if err != nil || k > sigRTMax-sigRTMin {
			return 0, false
		}
		return rt.base + rt.sign*k, true
	}
	return 0, false
}
