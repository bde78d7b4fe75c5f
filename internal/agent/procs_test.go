package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestStreamLogRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rotations := 0
	l, err := newStreamLog(filepath.Join(dir, "out.log"), 100, func() { rotations++ })
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for i := range 40 {
		line := fmt.Appendf(nil, "line %03d\n", i) // 9 bytes
		all.Write(line)
		l.write(line, func() {})
	}
	l.closeWriter()
	oldest, total, _, _ := l.bounds()
	if total != int64(all.Len()) {
		t.Fatalf("total %d, want %d", total, all.Len())
	}
	if kept := total - oldest; kept < 50 || kept > 100 {
		t.Errorf("kept %d bytes, want between half of and all of the 100 byte cap", kept)
	}
	if rotations == 0 {
		t.Error("no rotation at a 100 byte cap after 360 bytes")
	}
	// Every kept offset reads the byte written there, across the two files.
	for off := oldest; off < total; off++ {
		buf := make([]byte, 7)
		n, at, err := l.readAt(off, buf)
		if err != nil || at != off || n == 0 {
			t.Fatalf("readAt(%d) = %d, %d, %v", off, n, at, err)
		}
		if want := all.Bytes()[off : off+int64(n)]; !bytes.Equal(buf[:n], want) {
			t.Fatalf("readAt(%d) = %q, want %q", off, buf[:n], want)
		}
	}
	// An offset that rotation dropped reads from the oldest kept byte.
	if n, at, err := l.readAt(0, make([]byte, 4)); err != nil || at != oldest || n == 0 {
		t.Errorf("readAt(0) = %d, %d, %v; want bytes from %d", n, at, err, oldest)
	}
	// At the end there is nothing yet.
	if n, at, err := l.readAt(total, make([]byte, 4)); err != nil || at != total || n != 0 {
		t.Errorf("readAt(total) = %d, %d, %v; want 0 bytes", n, at, err)
	}
}

// procAgent is a test agent with its own process dir.
func procAgent(t *testing.T) (*testAgent, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "procs")
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: a process killed by a cleanup has its record written
	// a moment later, which would fail TempDir's one-shot removal. Once the
	// dir is gone nothing recreates it, so retrying is enough.
	t.Cleanup(func() {
		for i := 0; i < 50 && os.RemoveAll(dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	a := newTestAgent(t, func(o *Options) { o.ProcDir = dir; o.Keepalive = 100 * time.Millisecond })
	return a, dir
}

func (a *testAgent) startProc(req wire.StartProcessRequest) wire.Process {
	a.t.Helper()
	var p wire.Process
	a.call("POST", "/v1/processes", nil, req, 201, &p)
	if p.ID == "" || p.PID <= 0 || p.State == "" {
		a.t.Fatalf("started %+v", p)
	}
	return p
}

func (a *testAgent) waitExited(id string) wire.Process {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var p wire.Process
		a.call("GET", "/v1/processes/"+id, nil, nil, 200, &p)
		if p.State == wire.ProcessExited {
			return p
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("process %s still runs: %+v", id, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readLogs reads a whole logs response into its events.
func (a *testAgent) readLogs(id string, q url.Values) []wire.LogEvent {
	a.t.Helper()
	resp := a.do(a.t.Context(), "GET", "/v1/processes/"+id+"/logs", q, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		a.t.Fatalf("logs: status %d", resp.StatusCode)
	}
	var evs []wire.LogEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev wire.LogEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			a.t.Fatalf("decode %q: %v", sc.Bytes(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// collect joins the data of stream's events, checking their offsets run on.
func collect(t *testing.T, evs []wire.LogEvent, stream string, from int64) string {
	t.Helper()
	var b strings.Builder
	off := from
	for _, ev := range evs {
		if ev.Type == wire.EventGap && ev.Stream == stream {
			off = ev.Offset
		}
		if ev.Type != stream {
			continue
		}
		if ev.Offset != off {
			t.Fatalf("%s event at offset %d, want %d", stream, ev.Offset, off)
		}
		b.Write(ev.Data)
		off += int64(len(ev.Data))
	}
	return b.String()
}

func TestProcessLifecycle(t *testing.T) {
	t.Parallel()
	a, _ := procAgent(t)
	p := a.startProc(wire.StartProcessRequest{
		Command: `for i in 1 2 3; do echo "out $i"; echo "err $i" >&2; done; exit 3`,
		Name:    "lines", Env: map[string]string{"X": "y"}, KeepAlive: true,
	})
	if p.Name != "lines" || !p.KeepAlive || p.LogCapBytes != defaultLogCap || p.Cwd != a.ws {
		t.Errorf("started %+v", p)
	}
	got := a.waitExited(p.ID)
	if got.ExitCode == nil || *got.ExitCode != 3 || got.Signal != "" || got.EndedAt == nil || got.EndedAt.Before(got.StartedAt) {
		t.Errorf("exited %+v, want exit 3 with an end time", got)
	}

	evs := a.readLogs(p.ID, nil)
	if out := collect(t, evs, "stdout", 0); out != "out 1\nout 2\nout 3\n" {
		t.Errorf("stdout %q", out)
	}
	if errs := collect(t, evs, "stderr", 0); errs != "err 1\nerr 2\nerr 3\n" {
		t.Errorf("stderr %q", errs)
	}
	last := evs[len(evs)-1]
	if last.Type != wire.EventExit || last.ExitCode != 3 || last.StdoutBytes != 18 || last.StderrBytes != 18 {
		t.Errorf("last event %+v, want exit 3 with 18 bytes each", last)
	}

	// From an offset, one stream.
	evs = a.readLogs(p.ID, url.Values{"stream": {"stdout"}, "offset": {"6"}})
	if out := collect(t, evs, "stdout", 6); out != "out 2\nout 3\n" {
		t.Errorf("stdout from 6: %q", out)
	}
	for _, ev := range evs {
		if ev.Type == wire.EventStderr {
			t.Errorf("stderr event in a stdout read: %+v", ev)
		}
	}

	// List and filters.
	var list wire.ProcessList
	a.call("GET", "/v1/processes", url.Values{"state": {"exited"}, "name": {"lines"}}, nil, 200, &list)
	if len(list.Processes) != 1 || list.Processes[0].ID != p.ID {
		t.Errorf("exited named lines: %+v", list)
	}
	a.call("GET", "/v1/processes", url.Values{"state": {"running"}}, nil, 200, &list)
	if len(list.Processes) != 0 {
		t.Errorf("running: %+v", list)
	}

	// Remove deletes the record and its logs.
	a.call("DELETE", "/v1/processes/"+p.ID, nil, nil, 204, nil)
	a.callErr("GET", "/v1/processes/"+p.ID, nil, nil, 404, "not found")
}

func TestProcessFollow(t *testing.T) {
	t.Parallel()
	a, _ := procAgent(t)
	gate := filepath.Join(a.ws, "gate")
	p := a.startProc(wire.StartProcessRequest{
		Command: `echo first; while [ ! -e gate ]; do sleep 0.02; done; echo second; exit 0`,
	})
	resp := a.do(a.t.Context(), "GET", "/v1/processes/"+p.ID+"/logs", url.Values{"follow": {"true"}, "stream": {"stdout"}}, nil)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() wire.LogEvent {
		t.Helper()
		for sc.Scan() {
			var ev wire.LogEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Type != wire.EventKeepalive {
				return ev
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return wire.LogEvent{}
	}
	if ev := next(); ev.Type != "stdout" || string(ev.Data) != "first\n" || ev.Offset != 0 {
		t.Fatalf("got %+v, want first", ev)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != "stdout" || string(ev.Data) != "second\n" || ev.Offset != 6 {
		t.Fatalf("got %+v, want second at 6", ev)
	}
	if ev := next(); ev.Type != wire.EventExit || ev.StdoutBytes != 13 {
		t.Fatalf("got %+v, want exit", ev)
	}
}

func TestProcessFollowKeepalive(t *testing.T) {
	t.Parallel()
	a, _ := procAgent(t)
	p := a.startProc(wire.StartProcessRequest{Command: "sleep 0.5"})
	evs := a.readLogs(p.ID, url.Values{"follow": {"true"}})
	keepalives := 0
	for _, ev := range evs {
		if ev.Type == wire.EventKeepalive {
			keepalives++
		}
	}
	if keepalives == 0 || evs[len(evs)-1].Type != wire.EventExit {
		t.Errorf("events %+v, want keepalives then exit", evs)
	}
}

func TestProcessSignalGroup(t *testing.T) {
	t.Parallel()
	a, _ := procAgent(t)
	// A parent shell with two children that each record the signal.
	p := a.startProc(wire.StartProcessRequest{
		Command: `for c in a b; do (trap "echo $c >> got; exit 0" USR1; while :; do sleep 0.02; done) & done; trap "" USR1; echo ready; wait`,
	})
	deadline := time.Now().Add(5 * time.Second)
	for collect(t, a.readLogs(p.ID, url.Values{"stream": {"stdout"}}), "stdout", 0) != "ready\n" {
		if time.Now().After(deadline) {
			t.Fatal("not ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the children set their traps
	a.call("POST", "/v1/processes/"+p.ID+"/signal", nil, wire.SignalRequest{Signal: "usr1"}, 204, nil)
	got := a.waitExited(p.ID)
	if *got.ExitCode != 0 {
		t.Errorf("exited %+v, want 0 after its children ended", got)
	}
	data, _ := os.ReadFile(filepath.Join(a.ws, "got"))
	if s := string(data); s != "a\nb\n" && s != "b\na\n" {
		t.Errorf("children recorded %q, want a and b", s)
	}

	// By number, killing it.
	p = a.startProc(wire.StartProcessRequest{Argv: []string{"sleep", "60"}})
	a.call("POST", "/v1/processes/"+p.ID+"/signal", nil, wire.SignalRequest{Signal: "9"}, 204, nil)
	got = a.waitExited(p.ID)
	if *got.ExitCode != 137 || got.Signal != "SIGKILL" {
		t.Errorf("exited %+v, want SIGKILL", got)
	}
	a.callErr("POST", "/v1/processes/"+p.ID+"/signal", nil, wire.SignalRequest{Signal: "TERM"}, 409, "exited")
}

func TestProcessInvalid(t *testing.T) {
	t.Parallel()
	a, _ := procAgent(t)
	p := a.startProc(wire.StartProcessRequest{Argv: []string{"sleep", "60"}})
	t.Cleanup(func() { _ = syscall.Kill(-p.PID, syscall.SIGKILL) })
	tests := []struct {
		name, method, path string
		query              url.Values
		body               any
		status             int
		want               string
	}{
		{"unknown pid", "GET", "/v1/processes/999999999", nil, nil, 404, "not found"},
		{"unknown pid logs", "GET", "/v1/processes/nope/logs", nil, nil, 404, "not found"},
		{"unknown pid signal", "POST", "/v1/processes/nope/signal", nil, wire.SignalRequest{Signal: "TERM"}, 404, "not found"},
		{"bad signal", "POST", "/v1/processes/" + p.ID + "/signal", nil, wire.SignalRequest{Signal: "SIGNOPE"}, 400, "signal"},
		{"signal 0", "POST", "/v1/processes/" + p.ID + "/signal", nil, wire.SignalRequest{Signal: "0"}, 400, "signal"},
		{"signal 65", "POST", "/v1/processes/" + p.ID + "/signal", nil, wire.SignalRequest{Signal: "65"}, 400, "signal"},
		{"negative offset", "GET", "/v1/processes/" + p.ID + "/logs", url.Values{"stream": {"stdout"}, "offset": {"-1"}}, nil, 400, "offset"},
		{"negative stderrOffset", "GET", "/v1/processes/" + p.ID + "/logs", url.Values{"stderrOffset": {"-5"}}, nil, 400, "stderrOffset"},
		{"offset past end", "GET", "/v1/processes/" + p.ID + "/logs", url.Values{"stream": {"stdout"}, "offset": {"10"}}, nil, 400, "offset"},
		{"offset with both", "GET", "/v1/processes/" + p.ID + "/logs", url.Values{"offset": {"0"}}, nil, 400, "offset"},
		{"bad stream", "GET", "/v1/processes/" + p.ID + "/logs", url.Values{"stream": {"stdin"}}, nil, 400, "stream"},
		{"bad follow", "GET", "/v1/processes/" + p.ID + "/logs", url.Values{"follow": {"maybe"}}, nil, 400, "follow"},
		{"bad state", "GET", "/v1/processes", url.Values{"state": {"zombie"}}, nil, 400, "state"},
		{"no command", "POST", "/v1/processes", nil, wire.StartProcessRequest{}, 400, "command"},
		{"argv not found", "POST", "/v1/processes", nil, wire.StartProcessRequest{Argv: []string{"no-such-prog-hotcell"}}, 400, "argv"},
		{"small log cap", "POST", "/v1/processes", nil, wire.StartProcessRequest{Command: "true", LogCapBytes: 10}, 400, "logCapBytes"},
		{"missing cwd", "POST", "/v1/processes", nil, wire.StartProcessRequest{Command: "true", Cwd: "nope"}, 400, "cwd"},
		{"remove running", "DELETE", "/v1/processes/" + p.ID, nil, nil, 409, "running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a.callErr(tt.method, tt.path, tt.query, tt.body, tt.status, tt.want)
		})
	}
}

func TestProcessLogRotation(t *testing.T) {
	t.Parallel()
	a, _ := procAgent(t)
	// 2000 lines of 10 bytes at a 4 KiB cap.
	p := a.startProc(wire.StartProcessRequest{Command: `i=0; while [ $i -lt 2000 ]; do printf '%09d\n' $i; i=$((i+1)); done`, LogCapBytes: 4096})
	a.waitExited(p.ID)
	evs := a.readLogs(p.ID, url.Values{"stream": {"stdout"}})
	if evs[0].Type != wire.EventGap || evs[0].Dropped != evs[0].Offset || evs[0].Offset < 20000-4096 {
		t.Fatalf("first event %+v, want a gap up to the kept window", evs[0])
	}
	out := collect(t, evs, "stdout", 0)
	if len(out) < 2048 || len(out) > 4096 {
		t.Errorf("kept %d bytes, want 2-4 KiB", len(out))
	}
	// The kept bytes are exactly the tail of what was written.
	var want strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&want, "%09d\n", i)
	}
	if !strings.HasSuffix(want.String(), out) || evs[0].Offset != int64(want.Len()-len(out)) {
		t.Errorf("kept bytes are not the tail at their offsets")
	}
}

func TestProcessRecordsSurviveAgentRestart(t *testing.T) {
	t.Parallel()
	a, dir := procAgent(t)
	done := a.startProc(wire.StartProcessRequest{Command: "echo bye; exit 7"})
	a.waitExited(done.ID)
	running := a.startProc(wire.StartProcessRequest{Argv: []string{"sleep", "60"}})
	t.Cleanup(func() { _ = syscall.Kill(-running.PID, syscall.SIGKILL) })

	// A second agent on the same dir stands for the agent after a restart.
	b := newTestAgent(t, func(o *Options) { o.ProcDir = dir })
	var got wire.Process
	b.call("GET", "/v1/processes/"+done.ID, nil, nil, 200, &got)
	if got.ExitCode == nil || *got.ExitCode != 7 || got.StdoutBytes != 4 {
		t.Errorf("reloaded %+v, want exit 7 and 4 bytes", got)
	}
	if out := collect(t, b.readLogs(done.ID, nil), "stdout", 0); out != "bye\n" {
		t.Errorf("reloaded log %q", out)
	}
	got = wire.Process{}
	b.call("GET", "/v1/processes/"+running.ID, nil, nil, 200, &got)
	if got.State != wire.ProcessExited || got.Error == "" || got.ExitCode != nil {
		t.Errorf("reloaded running record %+v, want exited with an unknown status", got)
	}
}

func FuzzParseLogQuery(f *testing.F) {
	for _, s := range []string{"", "stream=stdout&offset=5", "follow=1&stdoutOffset=3&stderrOffset=2", "offset=-1", "stream=both&offset=1", "stream=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		lq, err := parseLogQuery(q)
		if err != nil {
			return
		}
		if len(lq.streams) == 0 {
			t.Fatalf("%q: no streams", raw)
		}
		for _, st := range lq.streams {
			if lq.offsets[st] < 0 {
				t.Fatalf("%q: negative offset %d", raw, lq.offsets[st])
			}
		}
	})
}

// TestProcessExitWaitsForUnreadOutput: a process shows exited only when
// what it wrote is in the log, however late its copier runs. With a fixed
// grace after the exit, a loaded host showed the exit first
// (TestProcessLogRotation failed so in a full CI run).
func TestProcessExitWaitsForUnreadOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p := &bgProc{pipes: []*os.File{r}}
	if p.stdout, err = newStreamLog(filepath.Join(dir, "out"), 4096, nil); err != nil {
		t.Fatal(err)
	}
	if p.stderr, err = newStreamLog(filepath.Join(dir, "err"), 4096, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("not yet copied\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { waitCollected(p, make(chan struct{})); close(done) }()
	select {
	case <-done:
		t.Fatal("the exit was recorded while output sat unread in the pipe")
	case <-time.After(3 * procExitDrainGrace):
	}
	// The copier catches up; a child still holds the write end, so the
	// pipe never reaches EOF, yet the exit is now recorded.
	buf := make([]byte, 64)
	n, err := r.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	p.stdout.write(buf[:n], func() {})
	<-done
}
