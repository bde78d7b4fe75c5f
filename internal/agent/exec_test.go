package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestExecBuffered(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	if err := os.Mkdir(filepath.Join(a.ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.ws, "noexec"), []byte("echo hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  wire.ExecRequest
		want wire.ExecResult
		// stderrHas replaces an exact stderr match when set.
		stderrHas string
	}{
		{"exit 0", wire.ExecRequest{Command: "echo hi"}, wire.ExecResult{Stdout: "hi\n"}, ""},
		{"exit 1", wire.ExecRequest{Command: "exit 1"}, wire.ExecResult{ExitCode: 1}, ""},
		{"stderr apart", wire.ExecRequest{Command: "echo out; echo err >&2"}, wire.ExecResult{Stdout: "out\n", Stderr: "err\n"}, ""},
		{"argv via PATH", wire.ExecRequest{Argv: []string{"echo", "a  b", "$HOME"}}, wire.ExecResult{Stdout: "a  b $HOME\n"}, ""},
		{"stdin", wire.ExecRequest{Command: "cat; echo", Stdin: "hello"}, wire.ExecResult{Stdout: "hello\n"}, ""},
		{"env", wire.ExecRequest{Command: `echo "$FOO"`, Env: map[string]string{"FOO": "bar baz"}}, wire.ExecResult{Stdout: "bar baz\n"}, ""},
		{"cwd relative", wire.ExecRequest{Command: "pwd", Cwd: "sub"}, wire.ExecResult{Stdout: filepath.Join(a.ws, "sub") + "\n"}, ""},
		{"cwd default", wire.ExecRequest{Command: "pwd"}, wire.ExecResult{Stdout: a.ws + "\n"}, ""},
		{"signal death", wire.ExecRequest{Command: "kill -9 $$"}, wire.ExecResult{ExitCode: 137, Signal: "SIGKILL"}, ""},
		{"shell not found", wire.ExecRequest{Command: "nosuchprog-hotcell"}, wire.ExecResult{ExitCode: 127}, "not found"},
		{"argv not in PATH", wire.ExecRequest{Argv: []string{"nosuchprog-hotcell"}}, wire.ExecResult{ExitCode: 127}, "nosuchprog-hotcell: command not found"},
		{"argv missing file", wire.ExecRequest{Argv: []string{"/nonexistent/prog"}}, wire.ExecResult{ExitCode: 127}, "/nonexistent/prog: no such file"},
		{"argv not executable", wire.ExecRequest{Argv: []string{"./noexec"}}, wire.ExecResult{ExitCode: 126}, "permission denied"},
		{"truncated", wire.ExecRequest{Command: "head -c 100000 /dev/zero | tr '\\0' x", MaxOutputBytes: 10}, wire.ExecResult{Stdout: "xxxxxxxxxx", Truncated: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got wire.ExecResult
			a.call("POST", "/v1/exec", nil, tt.req, 200, &got)
			if tt.stderrHas != "" {
				if !strings.Contains(got.Stderr, tt.stderrHas) {
					t.Errorf("stderr %q does not contain %q", got.Stderr, tt.stderrHas)
				}
				got.Stderr = ""
			}
			got.DurationMs = 0
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("result (-want +got):\n%s", d)
			}
		})
	}
}

func TestExecNoShell(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, func(o *Options) { o.Shell = "/nonexistent/sh" })
	var got wire.ExecResult
	a.call("POST", "/v1/exec", nil, wire.ExecRequest{Command: "echo hi"}, 200, &got)
	if got.ExitCode != 127 || !strings.Contains(got.Stderr, "no shell") || !strings.Contains(got.Stderr, "argv") {
		t.Errorf("got %+v, want exit 127 and a message that the image has no shell", got)
	}
}

func TestExecInvalid(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	tests := []struct {
		name  string
		query url.Values
		body  any
		want  string
	}{
		{"both", nil, wire.ExecRequest{Command: "true", Argv: []string{"true"}}, "command: give either command or argv, not both"},
		{"neither", nil, wire.ExecRequest{}, "command: give command"},
		{"empty argv0", nil, wire.ExecRequest{Argv: []string{""}}, "argv"},
		{"negative timeout", nil, wire.ExecRequest{Command: "true", TimeoutMs: -1}, "timeoutMs"},
		{"huge timeout", nil, wire.ExecRequest{Command: "true", TimeoutMs: 1 << 50}, "timeoutMs"},
		{"negative max output", nil, wire.ExecRequest{Command: "true", MaxOutputBytes: -1}, "maxOutputBytes"},
		{"bad env", nil, wire.ExecRequest{Command: "true", Env: map[string]string{"A=B": "c"}}, "env"},
		{"missing cwd", nil, wire.ExecRequest{Command: "true", Cwd: "nope"}, "cwd"},
		{"cwd is a file", nil, wire.ExecRequest{Command: "true", Cwd: "/etc/hostname"}, "cwd"},
		{"unknown field", nil, `{"command":"true","timeout":5}`, "body"},
		{"bad stream", url.Values{"stream": {"maybe"}}, wire.ExecRequest{Command: "true"}, "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			eb := a.callErr("POST", "/v1/exec", tt.query, tt.body, 400, tt.want)
			if eb.Error.Code != "invalid_argument" {
				t.Errorf("code %q, want invalid_argument", eb.Error.Code)
			}
		})
	}
}

// gone reports whether pid no longer runs (it may linger as a zombie of
// whatever adopted it).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(file)
		if err == nil && strings.HasSuffix(string(data), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatalf("pid file %q: %v", data, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	pidFile := filepath.Join(a.ws, "bg.pid")
	// Only the timeout can end this before the sleeps do.
	var got wire.ExecResult
	a.call("POST", "/v1/exec", nil, wire.ExecRequest{
		Command:   `trap "" TERM; sleep 100 & echo $! > bg.pid; sleep 100`,
		TimeoutMs: 300,
	}, 200, &got)
	if !got.TimedOut || got.Signal != "SIGKILL" || got.ExitCode != 137 {
		t.Errorf("got %+v, want timedOut, SIGKILL, 137", got)
	}
	waitGone(t, readPid(t, pidFile))
}

func TestExecBackgroundChildDoesNotHang(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var got wire.ExecResult
	a.call("POST", "/v1/exec", nil, wire.ExecRequest{Command: "sleep 100 & echo $! > bg.pid; echo done"}, 200, &got)
	if got.Stdout != "done\n" || got.ExitCode != 0 {
		t.Errorf("got %+v, want done and exit 0", got)
	}
	// The order is the point: the answer came while the background sleep,
	// which holds the output pipes, still ran.
	bg := readPid(t, filepath.Join(a.ws, "bg.pid"))
	if err := syscall.Kill(bg, 0); err != nil {
		t.Errorf("the background sleep %d is gone (%v): the exec waited for it", bg, err)
	}
	_ = syscall.Kill(bg, syscall.SIGKILL)
}

// readEvents reads a whole exec stream.
func readEvents(t *testing.T, sc *bufio.Scanner) []wire.ExecEvent {
	t.Helper()
	var evs []wire.ExecEvent
	for sc.Scan() {
		var ev wire.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Bytes(), err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return evs
}

func newScanner(r interface{ Read([]byte) (int, error) }) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	return sc
}

func TestExecStreamOrder(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, func(o *Options) { o.Keepalive = 50 * time.Millisecond })
	resp := a.do(t.Context(), "POST", "/v1/exec", url.Values{"stream": {"true"}}, wire.ExecRequest{
		Command: "printf a; sleep 0.1; printf b >&2; sleep 0.1; printf c; sleep 0.2; exit 3",
	})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("content type %q, want application/x-ndjson", ct)
	}
	evs := readEvents(t, newScanner(resp.Body))
	var got []wire.ExecEvent
	keepalives := 0
	for _, ev := range evs {
		if ev.Type == wire.EventKeepalive {
			keepalives++
			continue
		}
		ev.DurationMs = 0
		got = append(got, ev)
	}
	want := []wire.ExecEvent{
		{Type: "stdout", Data: []byte("a")},
		{Type: "stderr", Data: []byte("b")},
		{Type: "stdout", Data: []byte("c")},
		{Type: "exit", ExitCode: 3},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if keepalives == 0 {
		t.Errorf("got no keepalive in 400ms at a 50ms interval")
	}
}

func TestExecStreamBinary(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(filepath.Join(a.ws, "blob"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	resp := a.do(t.Context(), "POST", "/v1/exec", url.Values{"stream": {"1"}}, wire.ExecRequest{Argv: []string{"cat", "blob"}})
	defer resp.Body.Close()
	var got []byte
	var exits int
	for _, ev := range readEvents(t, newScanner(resp.Body)) {
		switch ev.Type {
		case wire.EventStdout:
			got = append(got, ev.Data...)
		case wire.EventExit:
			exits++
			if ev.ExitCode != 0 {
				t.Errorf("exit %d, want 0", ev.ExitCode)
			}
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	if exits != 1 {
		t.Errorf("got %d exit events, want 1", exits)
	}
	if !bytesEqual(got, data) {
		t.Errorf("streamed %d bytes differing from the %d-byte file", len(got), len(data))
	}
}

func TestExecStreamNotFound(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	resp := a.do(t.Context(), "POST", "/v1/exec", url.Values{"stream": {"true"}}, wire.ExecRequest{Argv: []string{"nosuchprog-hotcell"}})
	defer resp.Body.Close()
	evs := readEvents(t, newScanner(resp.Body))
	if len(evs) != 2 || evs[0].Type != wire.EventStderr || evs[1].Type != wire.EventExit || evs[1].ExitCode != 127 {
		t.Errorf("got %+v, want a stderr message and exit 127", evs)
	}
}

func TestExecClientGoneKillsProcess(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			t.Parallel()
			a := newTestAgent(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			q := url.Values{"stream": {strconv.FormatBool(stream)}}
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := a.client.Do(mustRequest(t, ctx, "POST", "http://agent/v1/exec?"+q.Encode(),
					`{"command":"echo $$ > sh.pid; echo started; sleep 100"}`))
				if err == nil {
					_, _ = bufio.NewReader(resp.Body).ReadString('\n')
					resp.Body.Close()
				}
			}()
			pid := readPid(t, filepath.Join(a.ws, "sh.pid"))
			time.Sleep(50 * time.Millisecond)
			cancel()
			<-done
			waitGone(t, pid)
		})
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
