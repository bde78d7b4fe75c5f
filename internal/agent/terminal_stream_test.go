package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// procStream is a test client of one process stream.
type procStream struct {
	t              *testing.T
	body           io.ReadCloser
	r              *bufio.Reader
	info           wire.TerminalInfo
	stdout, stderr strings.Builder
	order          []byte // the frame types seen, in order
	exit           *wire.TerminalMessage
}

func (a *testAgent) openStream(ctx context.Context, method, path string, body any) *procStream {
	a.t.Helper()
	resp := a.do(ctx, method, path, nil, body)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.t.Fatalf("%s %s: status %d, want 200: %s", method, path, resp.StatusCode, b)
	}
	ps := &procStream{t: a.t, body: resp.Body, r: bufio.NewReader(resp.Body)}
	a.t.Cleanup(func() { resp.Body.Close() })
	typ, p, err := wire.ReadTerminalFrame(ps.r, 1<<20)
	if err != nil || typ != wire.TerminalFrameReady {
		a.t.Fatalf("first frame %q (%v), want ready", typ, err)
	}
	if err := json.Unmarshal(p, &ps.info); err != nil || ps.info.PID <= 0 {
		a.t.Fatalf("ready frame %s: want a TerminalInfo with a pid", p)
	}
	return ps
}

func (a *testAgent) startStream(req wire.ProcessStreamRequest) *procStream {
	return a.openStream(a.t.Context(), http.MethodPost, "/v1/terminals/stream", req)
}

// until reads frames until cond holds or the stream ends.
func (ps *procStream) until(cond func() bool) {
	ps.t.Helper()
	for !cond() {
		if ps.exit != nil {
			ps.t.Fatalf("stream ended (%+v) first; stdout %q, stderr %q", *ps.exit, ps.stdout.String(), ps.stderr.String())
		}
		typ, p, err := wire.ReadTerminalFrame(ps.r, 1<<20)
		if err != nil {
			ps.t.Fatalf("read frame: %v; stdout so far %q", err, ps.stdout.String())
		}
		ps.order = append(ps.order, typ)
		switch typ {
		case wire.TerminalFrameStdout, wire.TerminalFramePTY:
			ps.stdout.Write(p)
		case wire.TerminalFrameStderr:
			ps.stderr.Write(p)
		case wire.TerminalFrameExit:
			var m wire.TerminalMessage
			if err := json.Unmarshal(p, &m); err != nil || m.ExitCode == nil {
				ps.t.Fatalf("exit frame %s", p)
			}
			ps.exit = &m
		}
	}
}

func (ps *procStream) wait() wire.TerminalMessage {
	ps.t.Helper()
	ps.until(func() bool { return ps.exit != nil })
	if _, _, err := wire.ReadTerminalFrame(ps.r, 1<<20); err != io.EOF {
		ps.t.Errorf("after the exit frame: %v, want EOF", err)
	}
	return *ps.exit
}

func TestProcessStreamRunsToExit(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ps := a.startStream(wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{
		Argv: []string{"/bin/sh", "-c", `echo out; echo err >&2; read x || echo "stdin at eof"; exit 3`},
		Env:  map[string]string{"X": "y"},
	}})
	exit := ps.wait()
	if *exit.ExitCode != 3 {
		t.Errorf("exit code: got %d, want 3", *exit.ExitCode)
	}
	if got, want := ps.stdout.String(), "out\nstdin at eof\n"; got != want {
		t.Errorf("stdout: got %q, want %q", got, want)
	}
	if got := ps.stderr.String(); got != "err\n" {
		t.Errorf("stderr: got %q, want %q", got, "err\n")
	}
	// Delivered: the session is gone.
	a.callErr(http.MethodPost, "/v1/terminals/"+strconv.Itoa(ps.info.PID)+"/input", nil, "x", http.StatusNotFound, "")
}

func TestProcessStreamStdinSignalAndFollowers(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ps := a.startStream(wire.ProcessStreamRequest{
		TerminalRequest: wire.TerminalRequest{Argv: []string{"cat"}},
		Stdin:           true,
	})
	ref := strconv.Itoa(ps.info.PID)
	a.call(http.MethodPost, "/v1/terminals/"+ref+"/input", nil, "hello\n", http.StatusNoContent, nil)
	ps.until(func() bool { return ps.stdout.String() == "hello\n" })

	// A second follower joins by pid without cutting the first.
	ctx, cancel := context.WithCancel(t.Context())
	second := a.openStream(ctx, http.MethodGet, "/v1/terminals/"+ref+"/stream", nil)
	a.call(http.MethodPost, "/v1/terminals/"+ps.info.ID+"/input", nil, "again\n", http.StatusNoContent, nil)
	ps.until(func() bool { return ps.stdout.String() == "hello\nagain\n" })
	second.until(func() bool { return second.stdout.String() == "again\n" })
	// The second goes away; the first still follows.
	cancel()

	a.call(http.MethodPost, "/v1/terminals/"+ref+"/control", nil, wire.TerminalMessage{Type: wire.TerminalStdinEOF}, http.StatusNoContent, nil)
	if exit := ps.wait(); *exit.ExitCode != 0 {
		t.Errorf("cat after stdin closed: exit %+v, want 0", exit)
	}

	// SIGKILL ends a process that ignores TERM; a signal to an ended one
	// is not found.
	ps = a.startStream(wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{Argv: []string{"/bin/sh", "-c", "trap '' TERM; echo up; sleep 60"}}})
	ps.until(func() bool { return ps.stdout.String() == "up\n" })
	ref = strconv.Itoa(ps.info.PID)
	a.call(http.MethodPost, "/v1/terminals/"+ref+"/control", nil, wire.TerminalMessage{Type: wire.TerminalSignal, Signal: "SIGKILL"}, http.StatusNoContent, nil)
	if exit := ps.wait(); exit.Signal != "SIGKILL" {
		t.Errorf("after SIGKILL: exit %+v, want signal SIGKILL", exit)
	}
	a.callErr(http.MethodPost, "/v1/terminals/"+ref+"/control", nil, wire.TerminalMessage{Type: wire.TerminalSignal, Signal: "SIGKILL"}, http.StatusNotFound, "")
}

func TestProcessStreamOutlivesItsFollower(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ctx, cancel := context.WithCancel(t.Context())
	ps := a.openStream(ctx, http.MethodPost, "/v1/terminals/stream", wire.ProcessStreamRequest{
		TerminalRequest: wire.TerminalRequest{Argv: []string{"cat"}, DetachTimeoutSec: 60},
		Stdin:           true,
	})
	cancel() // the daemon went away
	ref := strconv.Itoa(ps.info.PID)
	// Input written while nobody follows is still read by the process.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := a.do(t.Context(), http.MethodPost, "/v1/terminals/"+ref+"/input", nil, "while away\n")
		resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("input after the follower left: status %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	again := a.openStream(t.Context(), http.MethodGet, "/v1/terminals/"+ref+"/stream", nil)
	a.call(http.MethodPost, "/v1/terminals/"+ref+"/input", nil, "back\n", http.StatusNoContent, nil)
	again.until(func() bool { return strings.HasSuffix(again.stdout.String(), "back\n") })
	a.call(http.MethodPost, "/v1/terminals/"+ref+"/control", nil, wire.TerminalMessage{Type: wire.TerminalStdinEOF}, http.StatusNoContent, nil)
	if exit := again.wait(); *exit.ExitCode != 0 {
		t.Errorf("exit %+v, want 0", exit)
	}
}

func TestProcessStreamPTYResizeAndLifetime(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ps := a.startStream(wire.ProcessStreamRequest{
		TerminalRequest: wire.TerminalRequest{Argv: []string{"/bin/sh"}, TTY: true, Cols: 80, Rows: 24},
		TimeoutMs:       60_000,
	})
	ref := strconv.Itoa(ps.info.PID)
	a.call(http.MethodPost, "/v1/terminals/"+ref+"/control", nil, wire.TerminalMessage{Type: wire.TerminalResize, Cols: 100, Rows: 30}, http.StatusNoContent, nil)
	a.call(http.MethodPost, "/v1/terminals/"+ref+"/input", nil, "stty size; exit 5\n", http.StatusNoContent, nil)
	exit := ps.wait()
	if !strings.Contains(ps.stdout.String(), "30 100") {
		t.Errorf("pty output %q: want the new size 30 100", ps.stdout.String())
	}
	if *exit.ExitCode != 5 {
		t.Errorf("exit %+v, want 5", exit)
	}

	// The lifetime kills what runs longer.
	ps = a.startStream(wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{Argv: []string{"sleep", "60"}}, TimeoutMs: 200})
	if exit := ps.wait(); exit.Signal != "SIGKILL" {
		t.Errorf("past its lifetime: exit %+v, want SIGKILL", exit)
	}
}

func TestProcessStreamBadRequests(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.callErr(http.MethodPost, "/v1/terminals/stream", nil, wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{Argv: []string{"true"}}, User: "no-such-user-here"}, http.StatusBadRequest, "user")
	a.callErr(http.MethodPost, "/v1/terminals/stream", nil, wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{Argv: []string{"true"}}, TimeoutMs: -1}, http.StatusBadRequest, "timeoutMs")
	a.callErr(http.MethodPost, "/v1/terminals/stream", nil, wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{Argv: []string{"true"}, Cwd: "/no/such/dir"}}, http.StatusBadRequest, "cwd")
	a.callErr(http.MethodGet, "/v1/terminals/99999999/stream", nil, nil, http.StatusNotFound, "")
	a.callErr(http.MethodPost, "/v1/terminals/x;y/input", nil, "", http.StatusBadRequest, "ref")
	// An optional user that does not exist runs as the agent's.
	ps := a.startStream(wire.ProcessStreamRequest{TerminalRequest: wire.TerminalRequest{Argv: []string{"true"}}, User: "no-such-user-here", UserOptional: true})
	if exit := ps.wait(); *exit.ExitCode != 0 {
		t.Errorf("exit %+v, want 0", exit)
	}
}

func TestProcessStreamAsUser(t *testing.T) {
	testenv.RequireRoot(t, "running a process as another user needs CAP_SETUID")
	t.Parallel()
	a := newTestAgent(t)
	u, err := (&handler{opts: Options{EtcDir: "/etc"}}).runAs("nobody")
	if err != nil {
		testenv.SkipOrFail(t, "this machine has no user nobody: %v", err)
	}
	// nobody's home (/nonexistent) is missing, and the test's workspace is
	// closed to it: the cwd is given.
	ps := a.startStream(wire.ProcessStreamRequest{
		TerminalRequest: wire.TerminalRequest{Argv: []string{"/bin/sh", "-c", `echo "$(id -u):$(id -g) $HOME $USER $(pwd)"`}, Cwd: "/"},
		User:            "nobody",
	})
	ps.wait()
	want := fmt.Sprintf("%d:%d %s nobody /\n", u.uid, u.gid, u.home)
	if got := ps.stdout.String(); got != want {
		t.Errorf("as nobody: got %q, want %q (stderr %q)", got, want, ps.stderr.String())
	}
}
