package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// termOutput collects a terminal stream in the background so a test can
// wait for text to show up.
type termOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func collect(r io.Reader) *termOutput {
	o := &termOutput{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

func (o *termOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// await waits up to 20s for s to appear in the output.
func (o *termOutput) await(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(o.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal output after 20s; got %q", s, o.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func typeIn(t *testing.T, term *client.Terminal, s string) {
	t.Helper()
	if _, err := term.Write([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

func wantExit(t *testing.T, term *client.Terminal, code int, signal string) {
	t.Helper()
	ex, err := term.Wait()
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if ex.ExitCode != code || ex.Signal != signal {
		t.Errorf("exit %+v, want code %d signal %q", ex, code, signal)
	}
}

// TestTerminals drives terminals through the public API on a real
// sandbox with the base image (bash, stty, ps).
func TestTerminals(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := sharedDaemon(t)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt, Image: testenv.BaseImage(t)})
		c := d.C

		t.Run("PTY resize and exit code", func(t *testing.T) {
			t.Parallel()
			term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Argv: []string{"bash", "--norc", "-i"}, TTY: true, Cols: 80, Rows: 24})
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			if !term.TTY() || term.SessionID() == "" {
				t.Errorf("tty %v session %q", term.TTY(), term.SessionID())
			}
			out := collect(term)
			typeIn(t, term, "stty size; echo TERM=$TERM\r")
			out.await(t, "24 80")
			out.await(t, "TERM=xterm-256color")
			if err := term.Resize(120, 40); err != nil {
				t.Fatal(err)
			}
			typeIn(t, term, "stty size\r")
			out.await(t, "40 120")
			// Type the answer only once read runs: readline would take it.
			typeIn(t, term, "echo rea''dy; read x; echo \"got $x\"; exit 7\r")
			out.await(t, "ready")
			typeIn(t, term, "hello\r")
			out.await(t, "got hello")
			wantExit(t, term, 7, "")
			<-out.done
		})

		t.Run("python REPL", func(t *testing.T) {
			t.Parallel()
			term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Argv: []string{"python3", "-q"}, TTY: true})
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			out := collect(term)
			out.await(t, ">>> ")
			typeIn(t, term, "print(6*7)\r")
			out.await(t, "42")
			typeIn(t, term, "import sys; sys.exit(3)\r")
			wantExit(t, term, 3, "")
		})

		t.Run("re-attach after the client dropped", func(t *testing.T) {
			t.Parallel()
			term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Argv: []string{"bash", "--norc", "-i"}, TTY: true})
			if err != nil {
				t.Fatal(err)
			}
			sid := term.SessionID()
			out := collect(term)
			typeIn(t, term, "echo mark-$((6*7))\r")
			out.await(t, "mark-42")
			_ = term.Close() // the client drops
			if _, err := term.Wait(); err == nil {
				t.Error("Wait after Close returned no error")
			}

			again, err := c.AttachTerminal(t.Context(), sb.ID, sid)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			out2 := collect(again)
			out2.await(t, "mark-42") // replayed
			infos, err := c.ListTerminals(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, ti := range infos {
				found = found || ti.ID == sid && ti.Attached && ti.Running
			}
			if !found {
				t.Errorf("list %+v lacks %s attached and running", infos, sid)
			}
			typeIn(t, again, "echo again-$((1+1))\r")
			out2.await(t, "again-2")
			typeIn(t, again, "exit 3\r")
			wantExit(t, again, 3, "")
			if _, err := c.GetTerminal(t.Context(), sb.ID, sid); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("get after the exit was delivered: %v, want not found", err)
			}
		})

		t.Run("several at once", func(t *testing.T) {
			t.Parallel()
			const n = 4
			terms := make([]*client.Terminal, n)
			outs := make([]*termOutput, n)
			for i := range terms {
				term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Command: `read x; echo "got-$x"; exit $x`})
				if err != nil {
					t.Fatal(err)
				}
				defer term.Close()
				terms[i], outs[i] = term, collect(term)
			}
			// All are open before any gets its input.
			for i := n - 1; i >= 0; i-- {
				typeIn(t, terms[i], fmt.Sprintf("%d\n", i+10))
			}
			for i, term := range terms {
				wantExit(t, term, i+10, "")
				<-outs[i].done
				if got, want := outs[i].String(), fmt.Sprintf("got-%d\n", i+10); got != want {
					t.Errorf("terminal %d: output %q, want %q", i, got, want)
				}
			}
		})

		t.Run("pipes keep stdout and stderr apart", func(t *testing.T) {
			t.Parallel()
			term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Command: "cat; echo err-line >&2; exit 4"})
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			if term.TTY() {
				t.Error("pipe-mode terminal says it has a TTY")
			}
			stdout, stderr := collect(term), collect(term.Stderr())
			typeIn(t, term, "abc\n")
			stdout.await(t, "abc\n")
			typeIn(t, term, "no newline")
			if err := term.CloseStdin(); err != nil {
				t.Fatal(err)
			}
			wantExit(t, term, 4, "")
			<-stdout.done
			<-stderr.done
			if got, want := stdout.String(), "abc\nno newline"; got != want {
				t.Errorf("stdout %q, want %q", got, want)
			}
			if got, want := stderr.String(), "err-line\n"; got != want {
				t.Errorf("stderr %q, want %q", got, want)
			}
		})

		t.Run("SIGINT interrupts sleep", func(t *testing.T) {
			t.Parallel()
			term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Argv: []string{"sleep", "100"}})
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			if err := term.Signal("SIGINT"); err != nil {
				t.Fatal(err)
			}
			wantExit(t, term, 130, "SIGINT")

			// With a PTY the signal reaches the shell's foreground job, and
			// the shell lives on.
			sh, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Argv: []string{"bash", "--norc", "-i"}, TTY: true})
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			out := collect(sh)
			typeIn(t, sh, "sleep 100\r")
			// Wait until sleep runs in the foreground before interrupting it.
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(run(t, d, sb.ID, "ps -eo args").Stdout, "sleep 100") && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if err := sh.Signal("INT"); err != nil {
				t.Fatal(err)
			}
			// The signal went out before these bytes, so bash reads them at
			// its next prompt.
			typeIn(t, sh, "echo status=$?\r")
			out.await(t, "status=130")
			typeIn(t, sh, "exit 0\r")
			wantExit(t, sh, 0, "")
		})

		t.Run("bad input", func(t *testing.T) {
			t.Parallel()
			_, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Command: "true", Cols: -1})
			if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "cols") {
				t.Errorf("cols -1: %v, want invalid naming cols", err)
			}
			_, err = c.CreateTerminal(t.Context(), sb.ID, client.TerminalOptions{Command: "true", Rows: 5000})
			if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "rows") {
				t.Errorf("rows 5000: %v, want invalid naming rows", err)
			}
			// An explicit cols=0 on the exec WebSocket is refused before the upgrade.
			token, err := client.ReadTokenFile(filepath.Join(d.DataDir, "token"))
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequestWithContext(t.Context(), "GET", c.URL()+"/v1/sandboxes/"+sb.ID+"/exec?tty=true&cols=0&command=bash", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if body := readAll(resp); resp.StatusCode != 400 || !strings.Contains(body, "cols") {
				t.Errorf("cols=0: %d %s, want 400 naming cols", resp.StatusCode, body)
			}
			if _, err := c.AttachTerminal(t.Context(), sb.ID, "0123456789abcdef"); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("attach to an unknown session: %v, want not found", err)
			}
			if err := c.KillTerminal(t.Context(), sb.ID, "0123456789abcdef"); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("kill an unknown session: %v, want not found", err)
			}
			if _, err := c.AttachTerminal(t.Context(), sb.ID, "not-a-session"); !errors.Is(err, client.ErrInvalidArgument) {
				t.Errorf("attach to a malformed session id: %v, want invalid", err)
			}
			term, err := c.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Command: "cat"})
			if err != nil {
				t.Fatal(err)
			}
			defer term.Close()
			_ = term.Signal("SIGNOPE")
			if err := term.Resize(0, 10); !errors.Is(err, client.ErrInvalidArgument) {
				t.Errorf("resize 0x10: %v, want invalid", err)
			}
			_ = term.CloseStdin()
			wantExit(t, term, 0, "")
			if errs := term.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "SIGNOPE") {
				t.Errorf("server errors %q, want one naming the bad signal", errs)
			}
		})

		t.Run("a dropped client frees everything after the grace period", func(t *testing.T) {
			t.Parallel()
			info, err := c.CreateTerminal(t.Context(), sb.ID, client.TerminalOptions{Command: "sleep 4242 & sleep 4343", TTY: true, DetachTimeoutSec: 2})
			if err != nil {
				t.Fatal(err)
			}
			term, err := c.AttachTerminal(t.Context(), sb.ID, info.ID)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(run(t, d, sb.ID, "ps -eo args").Stdout, "sleep 4242") {
				if time.Now().After(deadline) {
					t.Fatal("the terminal's processes never showed up in ps")
				}
				time.Sleep(50 * time.Millisecond)
			}
			_ = term.Close()
			if _, err := c.GetTerminal(t.Context(), sb.ID, info.ID); err != nil {
				t.Errorf("right after the drop: %v, want the session kept", err)
			}
			deadline = time.Now().Add(30 * time.Second)
			for {
				_, err := c.GetTerminal(t.Context(), sb.ID, info.ID)
				ps := run(t, d, sb.ID, "ps -eo args").Stdout
				if errors.Is(err, client.ErrNotFound) && !strings.Contains(ps, "sleep 4242") && !strings.Contains(ps, "sleep 4343") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("30s after the drop: get %v, ps:\n%s", err, ps)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	})
}

// TestTerminalSurvivesDaemonRestart: a session belongs to the agent, so a
// daemon restart only drops the client, which re-attaches afterwards.
func TestTerminalSurvivesDaemonRestart(t *testing.T) {
	d := testdaemon.Start(t)
	t.Cleanup(d.Close) // after the sandbox's cleanup, which needs the daemon
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	term, err := d.C.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{Argv: []string{"bash", "--norc", "-i"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(term)
	typeIn(t, term, "echo before-$((2*21))\r")
	out.await(t, "before-42")
	d.Stop(syscall.SIGTERM)
	waited := make(chan error, 1)
	go func() { _, err := term.Wait(); waited <- err }()
	select {
	case err := <-waited:
		if err == nil {
			t.Error("the old connection reported an exit across the restart")
		}
	case <-time.After(30 * time.Second):
		t.Error("Wait did not return 30s after the daemon stopped")
	}
	_ = term.Close()
	d.Restart()

	var again *client.Terminal
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The agent redials the new daemon with backoff.
		again, err = d.C.AttachTerminal(t.Context(), sb.ID, term.SessionID())
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("re-attach after the restart: %v\n%s", err, d.Logs())
	}
	defer again.Close()
	out2 := collect(again)
	out2.await(t, "before-42")
	typeIn(t, again, "exit 9\r")
	wantExit(t, again, 9, "")
}
