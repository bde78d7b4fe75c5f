package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
)

func TestExec(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := sharedDaemon(t)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt, Env: map[string]string{"SANDBOX_VAR": "from-create"}})

		cases := []struct {
			name                 string
			req                  client.ExecRequest
			wantExit             int
			wantStdout, wantErr  string
			wantSignal           string
			wantStderrSubstrings []string
		}{
			{name: "exit 0", req: client.ExecRequest{Command: "true"}, wantExit: 0},
			{name: "exit 1", req: client.ExecRequest{Command: "false"}, wantExit: 1},
			{name: "exit 127", req: client.ExecRequest{Command: "no-such-command-here"}, wantExit: 127, wantStderrSubstrings: []string{"no-such-command-here"}},
			{name: "argv not found", req: client.ExecRequest{Argv: []string{"/no/such/program"}}, wantExit: 127, wantStderrSubstrings: []string{"/no/such/program"}},
			{name: "signal death", req: client.ExecRequest{Command: "kill -KILL $$"}, wantExit: 137, wantSignal: "SIGKILL"},
			{name: "stderr apart", req: client.ExecRequest{Command: "echo out; echo err >&2"}, wantStdout: "out\n", wantErr: "err\n"},
			{name: "stdin", req: client.ExecRequest{Argv: []string{"cat"}, Stdin: "piped\x01in"}, wantStdout: "piped\x01in"},
			{name: "env", req: client.ExecRequest{Command: `echo "$SANDBOX_VAR $EXEC_VAR"`, Env: map[string]string{"EXEC_VAR": "from-exec"}}, wantStdout: "from-create from-exec\n"},
			{name: "cwd", req: client.ExecRequest{Command: "pwd", Cwd: "/tmp"}, wantStdout: "/tmp\n"},
			{name: "relative cwd", req: client.ExecRequest{Command: "mkdir -p sub && cd sub && pwd"}, wantStdout: "/workspace/sub\n"},
			{name: "argv", req: client.ExecRequest{Argv: []string{"/bin/echo", "a b", "$HOME"}}, wantStdout: "a b $HOME\n"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res, err := d.C.Exec(t.Context(), sb.ID, tc.req)
				if err != nil {
					t.Fatalf("exec: %v", err)
				}
				if res.ExitCode != tc.wantExit {
					t.Errorf("exit code: got %d, want %d (stderr %q)", res.ExitCode, tc.wantExit, res.Stderr)
				}
				if tc.wantSignal != res.Signal {
					t.Errorf("signal: got %q, want %q", res.Signal, tc.wantSignal)
				}
				if tc.wantStdout != "" && res.Stdout != tc.wantStdout {
					t.Errorf("stdout: got %q, want %q", res.Stdout, tc.wantStdout)
				}
				if tc.wantErr != "" && res.Stderr != tc.wantErr {
					t.Errorf("stderr: got %q, want %q", res.Stderr, tc.wantErr)
				}
				for _, s := range tc.wantStderrSubstrings {
					if !strings.Contains(res.Stderr, s) {
						t.Errorf("stderr %q does not mention %q", res.Stderr, s)
					}
				}
			})
		}

		t.Run("timeout kills a tree that ignores SIGTERM", func(t *testing.T) {
			// Only the timeout can end this command before its sleeps do.
			res, err := d.C.Exec(t.Context(), sb.ID, client.ExecRequest{
				Command:   `trap "" TERM; (trap "" TERM; sleep 300) & (sleep 301 &) ; echo started; sleep 302`,
				TimeoutMs: 1000,
			})
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if !res.TimedOut || res.Stdout != "started\n" {
				t.Fatalf("got %+v, want timedOut with stdout started", res)
			}
			// Nothing of the tree is left.
			ps := mustOK(t, run(t, d, sb.ID, "ps -o args | grep 'sleep 30[012]' | grep -v grep || true"), "ps")
			if strings.TrimSpace(ps) != "" {
				t.Fatalf("processes survived the timeout:\n%s", ps)
			}
		})

		t.Run("output cap", func(t *testing.T) {
			res, err := d.C.Exec(t.Context(), sb.ID, client.ExecRequest{Command: "head -c 100000 /dev/zero", MaxOutputBytes: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Truncated || len(res.Stdout) != 1000 || res.ExitCode != 0 {
				t.Fatalf("got truncated=%v len=%d exit=%d, want truncated 1000 bytes exit 0", res.Truncated, len(res.Stdout), res.ExitCode)
			}
		})

		t.Run("stream", func(t *testing.T) {
			s, err := d.C.ExecStream(t.Context(), sb.ID, client.ExecRequest{
				Command: `for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done; printf '\000\377'; exit 3`,
			})
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			var order []string
			for ev, err := range s.Events() {
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				switch ev.Type {
				case client.EventStdout:
					stdout.Write(ev.Data)
					order = append(order, "o:"+string(ev.Data))
				case client.EventStderr:
					stderr.Write(ev.Data)
					order = append(order, "e:"+string(ev.Data))
				}
			}
			exit, err := s.Wait()
			if err != nil {
				t.Fatalf("wait: %v", err)
			}
			if got, want := stdout.String(), "out1\nout2\nout3\n\x00\xff"; got != want {
				t.Errorf("stdout: got %q, want %q (binary-safe)", got, want)
			}
			if got, want := stderr.String(), "err1\nerr2\nerr3\n"; got != want {
				t.Errorf("stderr: got %q, want %q", got, want)
			}
			if exit.ExitCode != 3 {
				t.Errorf("exit event: got %+v, want exit code 3", exit)
			}
			// Chunks arrive as they are written, not all at the end.
			if len(order) < 4 {
				t.Errorf("got %d output events %q, want the output as it came", len(order), order)
			}
		})

		t.Run("client gone kills the command", func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			s, err := d.C.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "echo ready; exec sleep 303"})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := s.Next()
			if err != nil || ev.Type != client.EventStdout {
				t.Fatalf("first event: %+v, %v", ev, err)
			}
			cancel()
			s.Close()
			deadline := time.Now().Add(10 * time.Second)
			for {
				ps := mustOK(t, run(t, d, sb.ID, "ps -o args | grep 'sleep 303' | grep -v grep || true"), "ps")
				if strings.TrimSpace(ps) == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("command still running 10s after its client went away:\n%s", ps)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	})
}
