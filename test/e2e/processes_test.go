package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// numbered is what `numberedCmd(from, to)` prints.
func numbered(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %04d\n", i)
	}
	return b.String()
}

// numberedCmd prints "line NNNN" for i in [from, to], pausing between lines.
func numberedCmd(from, to int, pause string) string {
	return fmt.Sprintf(`i=%d; while [ $i -le %d ]; do printf 'line %%04d\n' $i; i=$((i+1)); sleep %s; done`, from, to, pause)
}

func waitProcessExit(t *testing.T, d *testdaemon.Daemon, id, pid string) client.Process {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := d.C.GetProcess(t.Context(), id, pid)
		if err != nil {
			t.Fatalf("get process %s: %v", pid, err)
		}
		if p.State == client.ProcessExited {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s still runs: %+v", pid, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readLog reads a process's stdout from offset, without following.
func readLog(t *testing.T, c *client.Client, id, pid string, offset int64) string {
	t.Helper()
	l, err := c.ProcessLogs(t.Context(), id, pid, client.LogOptions{Stream: client.EventStdout, Offset: offset})
	if err != nil {
		t.Fatalf("logs of %s from %d: %v", pid, offset, err)
	}
	defer l.Close()
	b, err := io.ReadAll(l)
	if err != nil {
		t.Fatalf("read logs of %s: %v", pid, err)
	}
	return string(b)
}

func wantAPIStatus(t *testing.T, err error, status int, field string) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != status || !strings.Contains(apiErr.Message, field) {
		t.Errorf("got %v, want HTTP %d naming %q", err, status, field)
	}
}

func TestProcesses(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := sharedDaemon(t)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt})
		ctx := t.Context()

		t.Run("logs whole and from an offset", func(t *testing.T) {
			p, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{
				Command: numberedCmd(1, 40, "0.01") + "; echo oops >&2; exit 4", Name: "numbers",
			})
			if err != nil {
				t.Fatal(err)
			}
			if p.State != client.ProcessRunning || p.Name != "numbers" || p.Cwd != "/workspace" {
				t.Errorf("started %+v", p)
			}
			got := waitProcessExit(t, d, sb.ID, p.ID)
			if got.ExitCode == nil || *got.ExitCode != 4 || got.Signal != "" || got.EndedAt == nil || got.EndedAt.Before(got.StartedAt) {
				t.Errorf("exited %+v, want exit 4 with an end time", got)
			}
			want := numbered(1, 40)
			if got.StdoutBytes != int64(len(want)) || got.StderrBytes != 5 {
				t.Errorf("sizes %d/%d, want %d/5", got.StdoutBytes, got.StderrBytes, len(want))
			}
			if out := readLog(t, d.C, sb.ID, p.ID, 0); out != want {
				t.Errorf("whole log %q, want %q", out, want)
			}
			if out := readLog(t, d.C, sb.ID, p.ID, 100); out != want[100:] {
				t.Errorf("log from 100: %q, want %q", out, want[100:])
			}
			// Both streams as events, with their offsets.
			l, err := d.C.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var out, errs string
			for {
				ev, err := l.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if ev.Type == client.EventStderr {
					errs += string(ev.Data)
				} else {
					out += string(ev.Data)
				}
			}
			if exit, ok := l.Exit(); out != want || errs != "oops\n" || !ok || exit.ExitCode != 4 {
				t.Errorf("events: stdout %q, stderr %q, exit %+v %v", out, errs, exit, ok)
			}

			list, err := d.C.ListProcesses(ctx, sb.ID, client.ProcessListOptions{Name: "numbers", State: client.ProcessExited})
			if err != nil || len(list) != 1 || list[0].ID != p.ID {
				t.Errorf("list: %+v, %v", list, err)
			}
			if err := d.C.RemoveProcess(ctx, sb.ID, p.ID); err != nil {
				t.Fatalf("remove: %v", err)
			}
			_, err = d.C.GetProcess(ctx, sb.ID, p.ID)
			wantAPIStatus(t, err, http.StatusNotFound, p.ID)
		})

		t.Run("follow live and resume after a drop", func(t *testing.T) {
			// Lines come one every 20ms until the gate file appears, then 20 more.
			p, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{
				Command: `i=1; while [ ! -e /tmp/gate ]; do printf 'line %04d\n' $i; i=$((i+1)); sleep 0.02; done; ` +
					`j=0; while [ $j -lt 20 ]; do printf 'line %04d\n' $i; i=$((i+1)); j=$((j+1)); done`,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Follow, see live lines, then drop the connection mid-way.
			l, err := d.C.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{Stream: client.EventStdout, Follow: true, MaxReconnects: -1})
			if err != nil {
				t.Fatal(err)
			}
			var first []byte
			for len(first) < 200 {
				ev, err := l.Next()
				if err != nil {
					t.Fatalf("follow: %v", err)
				}
				first = append(first, ev.Data...)
			}
			resumeAt := l.Offset(client.EventStdout)
			l.Close()
			if resumeAt != int64(len(first)) {
				t.Fatalf("offset %d after %d bytes", resumeAt, len(first))
			}
			// The process went on meanwhile; resume from where the drop was.
			time.Sleep(200 * time.Millisecond)
			l, err = d.C.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{Stream: client.EventStdout, Offset: resumeAt, Follow: true})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var rest []byte
			for len(rest) < 100 {
				ev, err := l.Next()
				if err != nil {
					t.Fatalf("resumed follow: %v", err)
				}
				rest = append(rest, ev.Data...)
			}
			mustOK(t, run(t, d, sb.ID, "touch /tmp/gate"), "open the gate")
			tail, err := io.ReadAll(l)
			if err != nil {
				t.Fatalf("read to the end: %v", err)
			}
			all := string(first) + string(rest) + string(tail)
			n := strings.Count(all, "\n")
			if n < 25 || all != numbered(1, n) {
				t.Fatalf("resumed bytes are not exactly lines 1..%d:\n%q", n, all)
			}
			if exit, ok := l.Exit(); !ok || exit.ExitCode != 0 {
				t.Errorf("exit %+v %v, want 0", exit, ok)
			}
			if whole := readLog(t, d.C, sb.ID, p.ID, 0); whole != all {
				t.Errorf("followed bytes differ from the stored log")
			}
		})

		t.Run("the SDK resumes a dropped follow by itself", func(t *testing.T) {
			p, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: numberedCmd(1, 300, "0.01")})
			if err != nil {
				t.Fatal(err)
			}
			// A transport that cuts every logs response after 1200 bytes (more
			// than any one event here, so each connection makes progress).
			var cuts atomic.Int32
			hc := &http.Client{Transport: cutTransport{rt: http.DefaultTransport, after: 1200, cuts: &cuts}}
			c, err := client.New(d.C.URL(), readToken(t, d), client.WithHTTPClient(hc))
			if err != nil {
				t.Fatal(err)
			}
			l, err := c.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{Stream: client.EventStdout, Follow: true, MaxReconnects: 100})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got, err := io.ReadAll(l)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if string(got) != numbered(1, 300) {
				t.Errorf("got %q, want lines 1..300 exactly once", got)
			}
			if cuts.Load() < 3 {
				t.Errorf("%d cuts, want several", cuts.Load())
			}
		})

		t.Run("signals reach the process group", func(t *testing.T) {
			// A parent shell ignores the signals; its two children record them.
			p, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{
				Command: `for c in a b; do (trap "echo $c-usr1 >> /tmp/sigs" USR1; trap "echo $c-term >> /tmp/sigs; exit 0" TERM; ` +
					`echo $c-up >> /tmp/sigs; while :; do sleep 0.05; done) & done; trap "" USR1 TERM; echo ready; wait; wait`,
			})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, d, sb.ID, `grep -c up /tmp/sigs`, "2\n")
			if err := d.C.SignalProcess(ctx, sb.ID, p.ID, "USR1"); err != nil {
				t.Fatalf("signal USR1: %v", err)
			}
			waitFor(t, d, sb.ID, `grep -c usr1 /tmp/sigs`, "2\n")
			if err := d.C.SignalProcess(ctx, sb.ID, p.ID, "15"); err != nil {
				t.Fatalf("signal 15: %v", err)
			}
			got := waitProcessExit(t, d, sb.ID, p.ID)
			if *got.ExitCode != 0 || got.Signal != "" {
				t.Errorf("parent %+v, want exit 0 once its children ended", got)
			}
			lines := strings.Fields(mustOK(t, run(t, d, sb.ID, "cat /tmp/sigs"), "read signals"))
			sort.Strings(lines)
			if want := "a-term a-up a-usr1 b-term b-up b-usr1"; strings.Join(lines, " ") != want {
				t.Errorf("children recorded %v, want %s", lines, want)
			}

			// Death by signal is recorded with the signal and its end time.
			p, err = d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Argv: []string{"sleep", "600"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.C.SignalProcess(ctx, sb.ID, p.ID, "SIGKILL"); err != nil {
				t.Fatal(err)
			}
			got = waitProcessExit(t, d, sb.ID, p.ID)
			if *got.ExitCode != 137 || got.Signal != "SIGKILL" || got.EndedAt == nil {
				t.Errorf("killed %+v, want 137 SIGKILL with an end time", got)
			}
			err = d.C.SignalProcess(ctx, sb.ID, p.ID, "TERM")
			wantAPIStatus(t, err, http.StatusConflict, "exited")
		})

		t.Run("bad input", func(t *testing.T) {
			p, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Argv: []string{"sleep", "600"}})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = d.C.SignalProcess(ctx, sb.ID, p.ID, "KILL") }()
			_, err = d.C.GetProcess(ctx, sb.ID, "99999")
			wantAPIStatus(t, err, http.StatusNotFound, "99999")
			_, err = d.C.ProcessLogs(ctx, sb.ID, "99999", client.LogOptions{})
			wantAPIStatus(t, err, http.StatusNotFound, "99999")
			err = d.C.SignalProcess(ctx, sb.ID, "99999", "TERM")
			wantAPIStatus(t, err, http.StatusNotFound, "99999")
			err = d.C.SignalProcess(ctx, sb.ID, p.ID, "SIGBOGUS")
			wantAPIStatus(t, err, http.StatusBadRequest, "signal")
			err = d.C.SignalProcess(ctx, sb.ID, p.ID, "0")
			wantAPIStatus(t, err, http.StatusBadRequest, "signal")
			_, err = d.C.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{Stream: client.EventStdout, Offset: -1})
			wantAPIStatus(t, err, http.StatusBadRequest, "offset")
			_, err = d.C.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{Stream: client.EventStdout, Offset: 1 << 40})
			wantAPIStatus(t, err, http.StatusBadRequest, "offset")
			_, err = d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: "true", LogCapBytes: 3})
			wantAPIStatus(t, err, http.StatusBadRequest, "logCapBytes")
			_, err = d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Argv: []string{"no-such-program"}})
			wantAPIStatus(t, err, http.StatusBadRequest, "argv")
			err = d.C.RemoveProcess(ctx, sb.ID, p.ID)
			wantAPIStatus(t, err, http.StatusConflict, "running")
		})

		t.Run("rotation at a small cap", func(t *testing.T) {
			p, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{
				Command: `i=0; while [ $i -lt 3000 ]; do printf '%09d\n' $i; i=$((i+1)); done`, LogCapBytes: 4096,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := waitProcessExit(t, d, sb.ID, p.ID)
			if got.StdoutBytes != 30000 {
				t.Fatalf("stdoutBytes %d, want 30000", got.StdoutBytes)
			}
			l, err := d.C.ProcessLogs(ctx, sb.ID, p.ID, client.LogOptions{Stream: client.EventStdout})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ev, err := l.Next()
			if err != nil || ev.Type != client.EventGap || ev.Offset < 30000-4096 || ev.Offset > 30000-2048 || ev.Dropped != ev.Offset {
				t.Fatalf("first event %+v, %v; want a gap to the kept 2-4 KiB", ev, err)
			}
			kept, err := io.ReadAll(l)
			if err != nil {
				t.Fatal(err)
			}
			var all strings.Builder
			for i := range 3000 {
				fmt.Fprintf(&all, "%09d\n", i)
			}
			if string(kept) != all.String()[ev.Offset:] || l.Dropped() != ev.Offset {
				t.Errorf("kept %d bytes from %d: not the log's tail at its offsets", len(kept), ev.Offset)
			}
			// Reading from inside the kept window needs no gap.
			from := ev.Offset + 100
			if out := readLog(t, d.C, sb.ID, p.ID, from); out != all.String()[from:] {
				t.Errorf("log from %d differs", from)
			}
		})
	})
}

// TestProcessesSurviveDaemonRestart: a process's logs and exit status are
// the agent's, so a daemon killed and restarted finds them, and a process
// that was running keeps running and logging.
func TestProcessesSurviveDaemonRestart(t *testing.T) {
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	ctx := t.Context()

	done, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: numberedCmd(1, 20, "0") + "; exit 9"})
	if err != nil {
		t.Fatal(err)
	}
	before := waitProcessExit(t, d, sb.ID, done.ID)
	running, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: numberedCmd(1, 100000, "0.05"), KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	d.Stop(syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond) // the process writes on with no daemon
	d.Restart()

	var after client.Process
	deadline := time.Now().Add(30 * time.Second)
	for {
		after, err = d.C.GetProcess(ctx, sb.ID, done.ID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("get process after restart: %v\n%s", err, d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after.ExitCode == nil || *after.ExitCode != 9 || !after.EndedAt.Equal(*before.EndedAt) || after.StdoutBytes != before.StdoutBytes {
		t.Errorf("after restart %+v, want as before: %+v", after, before)
	}
	if out := readLog(t, d.C, sb.ID, done.ID, 0); out != numbered(1, 20) {
		t.Errorf("log after restart %q", out)
	}

	r1, err := d.C.GetProcess(ctx, sb.ID, running.ID)
	if err != nil || r1.State != client.ProcessRunning || !r1.KeepAlive {
		t.Fatalf("running process after restart: %+v, %v", r1, err)
	}
	for grew := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r2, err := d.C.GetProcess(ctx, sb.ID, running.ID)
		if err == nil && r2.StdoutBytes > r1.StdoutBytes {
			break
		}
		if time.Now().After(grew) {
			t.Fatalf("log did not grow in 30s after the restart: %d then %d (%v)", r1.StdoutBytes, r2.StdoutBytes, err)
		}
	}
	out := readLog(t, d.C, sb.ID, running.ID, 0)
	n := strings.Count(out, "\n")
	if n < 10 || out != numbered(1, n) {
		t.Errorf("log of the running process is not lines 1..%d: %q", n, out)
	}
	if err := d.C.SignalProcess(ctx, sb.ID, running.ID, "TERM"); err != nil {
		t.Fatal(err)
	}
	if got := waitProcessExit(t, d, sb.ID, running.ID); got.Signal != "SIGTERM" || *got.ExitCode != 143 {
		t.Errorf("after TERM: %+v", got)
	}
}

// waitFor runs command until its stdout is want.
func waitFor(t *testing.T, d *testdaemon.Daemon, id, command, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := run(t, d, id, command)
		if res.Stdout == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q: got %q, want %q", command, res.Stdout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readToken(t *testing.T, d *testdaemon.Daemon) string {
	t.Helper()
	tok, err := client.ReadTokenFile(d.DataDir + "/token")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// cutTransport breaks every process logs response after some bytes, as a
// flaky network would.
type cutTransport struct {
	rt    http.RoundTripper
	after int
	cuts  *atomic.Int32
}

func (c cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/logs") {
		return resp, err
	}
	resp.Body = &cutBody{rc: resp.Body, left: c.after, cuts: c.cuts}
	return resp, nil
}

type cutBody struct {
	rc   io.ReadCloser
	left int
	cuts *atomic.Int32
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.cuts.Add(1)
		return 0, io.ErrUnexpectedEOF
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= n
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }
