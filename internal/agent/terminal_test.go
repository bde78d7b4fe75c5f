package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/internal/wire"
)

// termConn is a test client of one terminal WebSocket.
type termConn struct {
	t      *testing.T
	c      *websocket.Conn
	ready  wire.TerminalMessage
	out    bytes.Buffer // PTY output, or stdout in pipe mode
	errOut bytes.Buffer
	errs   []string
	exit   *wire.TerminalMessage
}

func (a *testAgent) dialTerm(path string, q url.Values) *termConn {
	a.t.Helper()
	u := "http://agent" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx, cancel := context.WithTimeout(a.t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: a.client})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		a.t.Fatalf("dial %s: %v (status %d)", u, err, status)
	}
	tc := &termConn{t: a.t, c: c}
	a.t.Cleanup(func() { _ = c.CloseNow() })
	typ, data, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageText {
		a.t.Fatalf("read ready: %v", err)
	}
	if err := json.Unmarshal(data, &tc.ready); err != nil || tc.ready.Type != wire.TerminalReady || tc.ready.SessionID == "" {
		a.t.Fatalf("first message %s, want ready with a session id", data)
	}
	return tc
}

// until reads messages until cond holds for the output so far, or the
// terminal exits, or 10s pass.
func (tc *termConn) until(cond func() bool) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(tc.t.Context(), 10*time.Second)
	defer cancel()
	for !cond() {
		if tc.exit != nil {
			tc.t.Fatalf("terminal exited (%+v) first; output %q, stderr %q", *tc.exit, tc.out.String(), tc.errOut.String())
		}
		typ, data, err := tc.c.Read(ctx)
		if err != nil {
			tc.t.Fatalf("read: %v; output so far %q", err, tc.out.String())
		}
		tc.handle(typ, data)
	}
}

func (tc *termConn) handle(typ websocket.MessageType, data []byte) {
	if typ == websocket.MessageBinary {
		if !tc.ready.TTY && len(data) > 0 {
			switch data[0] {
			case wire.TerminalStdout:
				tc.out.Write(data[1:])
			case wire.TerminalStderr:
				tc.errOut.Write(data[1:])
			default:
				tc.t.Errorf("pipe frame with channel %d", data[0])
			}
			return
		}
		tc.out.Write(data)
		return
	}
	var m wire.TerminalMessage
	if err := json.Unmarshal(data, &m); err != nil {
		tc.t.Fatalf("control %s: %v", data, err)
	}
	switch m.Type {
	case wire.TerminalExit:
		tc.exit = &m
	case wire.TerminalError:
		tc.errs = append(tc.errs, m.Message)
	default:
		tc.t.Errorf("unexpected message %s", data)
	}
}

func (tc *termConn) waitOutput(s string) {
	tc.t.Helper()
	tc.until(func() bool { return strings.Contains(tc.out.String(), s) })
}

// wait reads to the exit message and the close after it.
func (tc *termConn) wait() wire.TerminalMessage {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(tc.t.Context(), 10*time.Second)
	defer cancel()
	for tc.exit == nil {
		typ, data, err := tc.c.Read(ctx)
		if err != nil {
			tc.t.Fatalf("read before exit: %v; output %q", err, tc.out.String())
		}
		tc.handle(typ, data)
	}
	if _, _, err := tc.c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		tc.t.Errorf("after exit: %v, want a normal close", err)
	}
	return *tc.exit
}

func (tc *termConn) write(s string) {
	tc.t.Helper()
	if err := tc.c.Write(tc.t.Context(), websocket.MessageBinary, []byte(s)); err != nil {
		tc.t.Fatalf("write stdin: %v", err)
	}
}

func (tc *termConn) control(m any) {
	tc.t.Helper()
	data, _ := json.Marshal(m)
	if err := tc.c.Write(tc.t.Context(), websocket.MessageText, data); err != nil {
		tc.t.Fatalf("write control: %v", err)
	}
}

func TestTerminalPTY(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	q := wire.TerminalRequest{
		Argv: []string{"/bin/sh", "-c", `stty size; echo "term=$TERM"; read x; stty size; echo "got $x"; exit 7`},
		TTY:  true, Cols: 80, Rows: 24,
	}.Query()
	tc := a.dialTerm("/v1/exec", q)
	if !tc.ready.TTY {
		t.Errorf("ready %+v, want tty", tc.ready)
	}
	tc.waitOutput("24 80")
	tc.waitOutput("term=xterm-256color")
	tc.control(wire.TerminalMessage{Type: wire.TerminalResize, Cols: 120, Rows: 40})
	tc.write("hello\r")
	tc.waitOutput("got hello")
	if !strings.Contains(tc.out.String(), "40 120") {
		t.Errorf("output %q lacks the resized size 40 120", tc.out.String())
	}
	if ex := tc.wait(); *ex.ExitCode != 7 || ex.Signal != "" {
		t.Errorf("exit %+v, want code 7", ex)
	}
}

func TestTerminalPipes(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	tc := a.dialTerm("/v1/exec", wire.TerminalRequest{Command: "cat; echo oops >&2; exit 3"}.Query())
	if tc.ready.TTY {
		t.Errorf("ready %+v, want no tty", tc.ready)
	}
	tc.write("line one\n")
	tc.waitOutput("line one\n")
	tc.write("two")
	tc.control(wire.TerminalMessage{Type: wire.TerminalStdinEOF})
	ex := tc.wait()
	if got, want := tc.out.String(), "line one\ntwo"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := tc.errOut.String(), "oops\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if *ex.ExitCode != 3 {
		t.Errorf("exit %+v, want 3", ex)
	}
}

func TestTerminalSignal(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprint("tty=", tty), func(t *testing.T) {
			t.Parallel()
			// In TTY mode the signal goes to the foreground group, which
			// an interactive shell's job would have to itself.
			tc := a.dialTerm("/v1/exec", wire.TerminalRequest{Argv: []string{"sleep", "100"}, TTY: tty}.Query())
			tc.control(wire.TerminalMessage{Type: wire.TerminalSignal, Signal: "nope"})
			tc.control(wire.TerminalMessage{Type: wire.TerminalSignal, Signal: "SIGINT"})
			ex := tc.wait()
			if ex.Signal != "SIGINT" || *ex.ExitCode != 130 {
				t.Errorf("exit %+v, want SIGINT 130", ex)
			}
			if len(tc.errs) != 1 || !strings.Contains(tc.errs[0], "signal") {
				t.Errorf("errors %q, want one naming the bad signal", tc.errs)
			}
		})
	}
}

func TestTerminalReattach(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var info wire.TerminalInfo
	a.call("POST", "/v1/terminals", nil, wire.TerminalRequest{Argv: []string{"/bin/sh"}, TTY: true}, 201, &info)
	if !info.Running || info.Attached || !info.TTY || info.Cols != 80 || info.Rows != 24 || info.DetachTimeoutSec != 300 {
		t.Errorf("created %+v", info)
	}
	path := "/v1/terminals/" + info.ID + "/attach"
	tc := a.dialTerm(path, nil)
	tc.write("echo mark$((20+1))\r")
	tc.waitOutput("mark21")
	_ = tc.c.CloseNow() // the client drops

	tc2 := a.dialTerm(path, nil)
	tc2.waitOutput("mark21") // replayed
	// A third client takes over; the second is told so.
	tc3 := a.dialTerm(path, nil)
	tc2.until(func() bool { return len(tc2.errs) > 0 })
	if !strings.Contains(tc2.errs[0], "another client") {
		t.Errorf("replaced client got %q", tc2.errs)
	}
	var list wire.TerminalList
	a.call("GET", "/v1/terminals", nil, nil, 200, &list)
	if len(list.Terminals) != 1 || !list.Terminals[0].Attached {
		t.Errorf("list %+v, want the one attached session", list)
	}
	tc3.write("exit 5\r")
	if ex := tc3.wait(); *ex.ExitCode != 5 {
		t.Errorf("exit %+v, want 5", ex)
	}
	// Exit delivered: the session is gone.
	a.callErr("GET", "/v1/terminals/"+info.ID, nil, nil, 404, "not found")
}

func TestTerminalExitedWhileDetached(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var info wire.TerminalInfo
	a.call("POST", "/v1/terminals", nil, wire.TerminalRequest{Command: "echo done; exit 4"}, 201, &info)
	deadline := time.Now().Add(10 * time.Second)
	for info.Running && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		a.call("GET", "/v1/terminals/"+info.ID, nil, nil, 200, &info)
	}
	if info.Running || info.ExitCode == nil || *info.ExitCode != 4 {
		t.Fatalf("info %+v, want exited with 4", info)
	}
	tc := a.dialTerm("/v1/terminals/"+info.ID+"/attach", nil)
	if ex := tc.wait(); *ex.ExitCode != 4 || tc.out.String() != "done\n" {
		t.Errorf("exit %+v output %q, want 4 and the replayed output", ex, tc.out.String())
	}
}

func TestTerminalGracePeriod(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var info wire.TerminalInfo
	a.call("POST", "/v1/terminals", nil, wire.TerminalRequest{Command: "sleep 100 & sleep 100", TTY: true, DetachTimeoutSec: 1}, 201, &info)
	tc := a.dialTerm("/v1/terminals/"+info.ID+"/attach", nil)
	_ = tc.c.CloseNow()
	time.Sleep(500 * time.Millisecond)
	a.call("GET", "/v1/terminals/"+info.ID, nil, nil, 200, &info) // still in its grace period
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := a.do(t.Context(), "GET", "/v1/terminals/"+info.ID, nil, nil)
		resp.Body.Close()
		gone := resp.StatusCode == 404 && syscall.Kill(-info.PID, 0) == syscall.ESRCH
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s (group %d) still there 10s after its grace period", info.ID, info.PID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTerminalKill(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var info wire.TerminalInfo
	a.call("POST", "/v1/terminals", nil, wire.TerminalRequest{Command: "sleep 100"}, 201, &info)
	tc := a.dialTerm("/v1/terminals/"+info.ID+"/attach", nil)
	a.call("DELETE", "/v1/terminals/"+info.ID, nil, nil, 204, nil)
	if ex := tc.wait(); ex.Signal != "SIGKILL" {
		t.Errorf("exit %+v, want SIGKILL", ex)
	}
	a.callErr("DELETE", "/v1/terminals/"+info.ID, nil, nil, 404, "not found")
}

func TestTerminalBadInput(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, tt := range []struct {
		req   wire.TerminalRequest
		field string
	}{
		{wire.TerminalRequest{Command: "true", Cols: 1001}, "cols"},
		{wire.TerminalRequest{Command: "true", Rows: -1}, "rows"},
		{wire.TerminalRequest{Command: "true", DetachTimeoutSec: -1}, "detachTimeoutSec"},
		{wire.TerminalRequest{Command: "true", Argv: []string{"x"}}, "command"},
		{wire.TerminalRequest{Command: "true", Cwd: "nonexistent-dir"}, "cwd"},
	} {
		a.callErr("POST", "/v1/terminals", nil, tt.req, 400, tt.field)
	}
	a.callErr("GET", "/v1/exec", url.Values{"cols": {"x"}}, nil, 400, "cols")
	a.callErr("GET", "/v1/exec", url.Values{"command": {"true"}}, nil, 400, "Upgrade")
	a.callErr("GET", "/v1/terminals/0123456789abcdef", nil, nil, 404, "not found")
	a.callErr("GET", "/v1/terminals/0123456789abcdef/attach", nil, nil, 404, "not found")
	a.callErr("GET", "/v1/terminals/..%2Fetc/attach", nil, nil, 400, "sid")

	tc := a.dialTerm("/v1/exec", wire.TerminalRequest{Command: "cat"}.Query())
	for _, m := range []string{`{"type":"resize","cols":0,"rows":5}`, `{"type":"resize","cols":80,"rows":24}`, `{"type":"nope"}`, `not json`} {
		if err := tc.c.Write(t.Context(), websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	tc.until(func() bool { return len(tc.errs) == 4 })
	for i, want := range []string{"cols", "no PTY", "unknown type", "not JSON"} {
		if !strings.Contains(tc.errs[i], want) {
			t.Errorf("error %d %q does not contain %q", i, tc.errs[i], want)
		}
	}
	tc.control(wire.TerminalMessage{Type: wire.TerminalStdinEOF})
	if ex := tc.wait(); *ex.ExitCode != 0 {
		t.Errorf("exit %+v, want 0", ex)
	}
}

func TestTerminalCommandNotFound(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	tc := a.dialTerm("/v1/exec", wire.TerminalRequest{Argv: []string{"nosuchprog-hotcell"}}.Query())
	if ex := tc.wait(); *ex.ExitCode != 127 || !strings.Contains(tc.errOut.String(), "command not found") {
		t.Errorf("exit %+v stderr %q, want 127 and a message", ex, tc.errOut.String())
	}
}

func TestTermRing(t *testing.T) {
	t.Parallel()
	r := termRing{max: 10}
	for _, s := range []string{"aaaa", "bbbb", "cccc", "dd"} {
		r.add([]byte(s))
	}
	if got := string(bytes.Join(r.snapshot(), nil)); got != "bbbbccccdd" || r.size != 10 {
		t.Errorf("ring %q size %d, want the newest 10 bytes", got, r.size)
	}
	r.add(bytes.Repeat([]byte("x"), 50)) // one frame larger than the ring stays
	if got := r.snapshot(); len(got) != 1 || len(got[0]) != 50 {
		t.Errorf("ring after a big frame: %d frames", len(got))
	}
}

func FuzzTermControl(f *testing.F) {
	for _, s := range []string{`{"type":"resize","cols":80,"rows":24}`, `{"type":"signal","signal":"SIGINT"}`, `{"type":"signal","signal":"9"}`, `{"type":"stdin_eof"}`, `{"type":"x"}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseTermControl(data)
		if err != nil {
			return
		}
		switch m.Type {
		case wire.TerminalResize:
			if m.Cols < 1 || m.Cols > maxTermSize || m.Rows < 1 || m.Rows > maxTermSize {
				t.Errorf("accepted size %dx%d", m.Cols, m.Rows)
			}
		case wire.TerminalSignal:
			if sig, err := parseTermSignal(m.Signal); err != nil || sig < 1 || sig > 64 {
				t.Errorf("accepted signal %q", m.Signal)
			}
		case wire.TerminalStdinEOF:
		default:
			t.Errorf("accepted type %q", m.Type)
		}
	})
}

func FuzzTerminalQuery(f *testing.F) {
	f.Add("cols=80&rows=24&tty=true&argv=sh&argv=-c&env=A=b")
	f.Add("command=echo+hi&detachTimeoutSec=5&tty")
	f.Add("cols=x")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		req, err := wire.TerminalRequestFromQuery(q)
		if err != nil {
			return
		}
		// What parses encodes back to the same request.
		again, err := wire.TerminalRequestFromQuery(req.Query())
		if err != nil {
			t.Fatalf("re-parse %v: %v", req.Query(), err)
		}
		if fmt.Sprint(again) != fmt.Sprint(req) {
			t.Errorf("round trip %+v, got %+v", req, again)
		}
	})
}
