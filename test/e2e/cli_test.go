package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// cli runs the hotcell binary as a user would, pointed at a daemon by
// HOTCELL_URL and HOTCELL_TOKEN.
type cli struct {
	t   *testing.T
	bin string
	env []string
}

func newCLI(t *testing.T, d *testdaemon.Daemon) *cli {
	t.Helper()
	return newCLIWith(t, "http://"+d.Addr, daemonToken(t, d))
}

func newCLIWith(t *testing.T, url, token string) *cli {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOTCELL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOTCELL_URL="+url, "HOTCELL_TOKEN="+token, "HOTCELL_DATA_DIR="+t.TempDir())
	return &cli{t: t, bin: testenv.GoBuild(t, "./cmd/hotcell"), env: env}
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

func (c *cli) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	return cmd
}

// runIn runs the CLI with stdin and returns how it ended.
func (c *cli) runIn(stdin string, args ...string) cliResult {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), 3*time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("hotcell %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

func (c *cli) run(args ...string) cliResult {
	c.t.Helper()
	return c.runIn("", args...)
}

// want runs the CLI and fails the test unless it exits with code.
func (c *cli) want(code int, args ...string) cliResult {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code {
		c.t.Fatalf("hotcell %s: got %v, want exit %d", strings.Join(args, " "), r, code)
	}
	return r
}

// TestCLISession drives a whole session with the hotcell binary: create
// with a repo, exec and its exit codes, cp of a directory both ways, a
// background server, port-forward, logs, kill, stats, backup, restore, rm.
func TestCLISession(t *testing.T) {
	d := sharedDaemon(t)
	image := testenv.BaseImage(t)
	c := newCLI(t, d)
	repo := makeRepo(t)

	r := c.want(0, "create", "--image", image, "--repo", repo, "--label", "test="+sanitizeLabel(t.Name()))
	id := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(id, "sb-") || strings.Contains(id, "\n") {
		t.Fatalf("create printed %q, want one sandbox id", r.stdout)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.C.DeleteSandbox(ctx, id) // after rm, a no-op
	})
	var sb client.Sandbox
	if err := json.Unmarshal([]byte(c.want(0, "inspect", "--json", id).stdout), &sb); err != nil || sb.ID != id || sb.Repo == nil || sb.Repo.Commit == "" {
		t.Fatalf("inspect --json: %+v, %v", sb, err)
	}

	t.Run("exec", func(t *testing.T) {
		if r := c.want(0, "exec", id, "--", "cat", "README.md"); r.stdout != "version two\n" {
			t.Errorf("cat README.md of the clone: got %q, want %q", r.stdout, "version two\n")
		}
		if r := c.want(3, "exec", id, "-c", "echo out; echo err >&2; exit 3"); r.stdout != "out\n" || r.stderr != "err\n" {
			t.Errorf("exit 3: got %v, want stdout and stderr apart", r)
		}
		c.want(127, "exec", id, "--", "no-such-command-here")
		if r := c.runIn("piped\n", "shell", id, "--", "cat"); r.code != 0 || r.stdout != "piped\n" {
			t.Errorf("shell with a pipe as stdin: got %v, want cat's echo", r)
		}
		if r := c.runIn("echo from-sh; exit 4\n", "shell", id); r.code != 4 || r.stdout != "from-sh\n" {
			t.Errorf("shell script on stdin: got %v, want from-sh and exit 4", r)
		}
	})

	t.Run("cp", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "tree")
		big := make([]byte, 300<<10)
		rand.Read(big)
		writeTree(t, src, map[string][]byte{
			"a.txt":           []byte("alpha\n"),
			"sub/b.bin":       big,
			"sub/deeper/c.sh": []byte("#!/bin/sh\necho c\n"),
			"sub/empty/":      nil,
		})
		os.Chmod(filepath.Join(src, "sub/deeper/c.sh"), 0o755)
		c.want(0, "cp", src, id+":/workspace/")
		if r := c.want(0, "exec", id, "--", "/workspace/tree/sub/deeper/c.sh"); r.stdout != "c\n" {
			t.Errorf("the copied script: got %q, want %q", r.stdout, "c\n")
		}
		out := t.TempDir()
		c.want(0, "cp", id+":/workspace/tree", out)
		if diff := cmp.Diff(readTree(t, src), readTree(t, filepath.Join(out, "tree"))); diff != "" {
			t.Errorf("tree after a round trip (-sent +received):\n%s", diff)
		}

		// Onto a path of the other type: refused, and nothing changes.
		odd := filepath.Join(t.TempDir(), "tree")
		os.WriteFile(odd, []byte("a file named tree\n"), 0o644)
		if r := c.want(1, "cp", odd, id+":/workspace/"); !strings.Contains(r.stderr, "cannot overwrite directory") {
			t.Errorf("file onto a sandbox directory: got %v, want the refusal", r)
		}
		if r := c.want(0, "exec", id, "--", "cat", "/workspace/tree/a.txt"); r.stdout != "alpha\n" {
			t.Errorf("the sandbox's directory after a refused cp: got %q", r.stdout)
		}
		local := t.TempDir()
		os.WriteFile(filepath.Join(local, "sub"), []byte("keep me\n"), 0o644)
		if r := c.want(1, "cp", id+":/workspace/tree/sub", local); !strings.Contains(r.stderr, "cannot overwrite non-directory") {
			t.Errorf("directory onto a local file: got %v, want the refusal", r)
		}
		if b, _ := os.ReadFile(filepath.Join(local, "sub")); string(b) != "keep me\n" {
			t.Errorf("the local file after a refused cp: got %q, want it untouched", b)
		}
	})

	var pid string
	t.Run("server and port-forward", func(t *testing.T) {
		r := c.want(0, "run", id, "--name", "web", "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1")
		pid = strings.TrimSpace(r.stdout)
		if pid == "" {
			t.Fatalf("run printed nothing")
		}
		if _, err := d.C.WaitPort(t.Context(), id, 8000, 30*time.Second); err != nil {
			t.Fatalf("wait for the server: %v", err)
		}
		ps := c.want(0, "ps", id)
		if !strings.Contains(ps.stdout, "COMMAND") || !strings.Contains(ps.stdout, pid) || !strings.Contains(ps.stdout, "web") || !strings.Contains(ps.stdout, "http.server") {
			t.Errorf("ps: got\n%s\nwant a row for %s named web", ps.stdout, pid)
		}
		var list client.ProcessList
		if err := json.Unmarshal([]byte(c.want(0, "ps", id, "--json").stdout), &list); err != nil || len(list.Processes) != 1 || list.Processes[0].ID != pid || list.Processes[0].State != client.ProcessRunning {
			t.Errorf("ps --json: got %+v, %v", list, err)
		}

		port := freePort(t)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		pf := c.cmd(ctx, "port-forward", id, fmt.Sprintf("%d:8000", port))
		var pfErr bytes.Buffer
		pf.Stderr = &pfErr
		stdout, err := pf.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if want := fmt.Sprintf("forwarding 127.0.0.1:%d -> %s:8000\n", port, id); err != nil || line != want {
			pf.Process.Kill()
			pf.Wait()
			t.Fatalf("port-forward printed %q (%v), want %q; stderr %q", line, err, want, pfErr.String())
		}
		for i := range 3 { // each fetch is a new connection and a new tunnel
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/README.md", port))
			if err != nil {
				t.Fatalf("fetch %d through the forward: %v", i, err)
			}
			if body := readAll(resp); resp.StatusCode != 200 || body != "version two\n" {
				t.Errorf("fetch %d: got %d %q, want 200 and the README", i, resp.StatusCode, body)
			}
		}
		pf.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- pf.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("port-forward after Ctrl-C: %v, want exit 0; stderr %q", err, pfErr.String())
			}
		case <-time.After(15 * time.Second):
			pf.Process.Kill()
			t.Fatalf("port-forward did not stop within 15s of SIGINT")
		}
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			conn.Close()
			t.Errorf("port %d still accepts after port-forward stopped", port)
		}

		// The server's request log is on its stderr; --stdout has none of it.
		if r := c.want(0, "logs", id, pid); !strings.Contains(r.stderr, "GET /README.md") {
			t.Errorf("logs: got %v, want the server's request log on stderr", r)
		}
		if r := c.want(0, "logs", id, pid, "--stdout"); r.stderr != "" {
			t.Errorf("logs --stdout: got %v, want nothing on stderr", r)
		}
		c.want(2, "logs", id, pid, "--from", "5")
		c.want(0, "kill", id, pid, "-s", "TERM")
		// logs -f ends with the process, and exits with its status.
		if r := c.run("logs", "-f", id, pid); r.code != 128+int(syscall.SIGTERM) {
			t.Errorf("logs -f of a process killed by SIGTERM: got %v, want exit %d", r, 128+int(syscall.SIGTERM))
		}
		if r := c.want(0, "ps", id, "--all"); !strings.Contains(r.stdout, "exited") {
			t.Errorf("ps --all: got\n%s\nwant the exited server", r.stdout)
		}
		if r := c.want(1, "kill", id, "no-such-process"); !strings.Contains(r.stderr, "not found") {
			t.Errorf("kill of an unknown process: got %v", r)
		}
	})

	t.Run("port-forward half-close", func(t *testing.T) {
		// A server that answers only after the client's EOF: the forward
		// must pass the local half-close in, and the answer and the
		// server's close back out.
		c.want(0, "exec", id, "-c", `cat > /tmp/upper.py <<'EOF'
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9001))
s.listen()
while True:
    c, _ = s.accept()
    data = b""
    while True:
        b = c.recv(65536)
        if not b:
            break
        data += b
    c.sendall(data.upper())
    c.close()
EOF`)
		c.want(0, "run", id, "--", "python3", "/tmp/upper.py")
		if _, err := d.C.WaitPort(t.Context(), id, 9001, 30*time.Second); err != nil {
			t.Fatalf("wait for the server: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		pf := c.cmd(ctx, "port-forward", id, "0:9001")
		stdout, _ := pf.StdoutPipe()
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { pf.Process.Signal(os.Interrupt); pf.Wait() }()
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		var addr, rest string
		if _, err := fmt.Sscanf(line, "forwarding %s -> %s", &addr, &rest); err != nil || strings.HasSuffix(addr, ":0") {
			t.Fatalf("port-forward 0:9001 printed %q, want the port it chose", line)
		}
		payload := bytes.Repeat([]byte("half-close "), 50000) // bigger than one tunnel message
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute))
		go func() {
			conn.Write(payload)
			conn.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(conn)
		if err != nil || !bytes.Equal(got, bytes.ToUpper(payload)) {
			t.Errorf("answer through the forward: %d bytes, %v; want %d bytes, upper-cased", len(got), err, len(payload))
		}
	})

	t.Run("stats", func(t *testing.T) {
		var s client.SandboxStats
		if err := json.Unmarshal([]byte(c.want(0, "stats", id, "--json").stdout), &s); err != nil || s.ID != id || s.Memory.UsageBytes <= 0 || s.Pids.Current <= 0 {
			t.Errorf("stats --json: got %+v, %v", s, err)
		}
		if r := c.want(0, "stats", id); !strings.Contains(r.stdout, "MEM USAGE / LIMIT") || !strings.Contains(r.stdout, id) {
			t.Errorf("stats: got %q, want a table row for %s", r.stdout, id)
		}
	})

	t.Run("stats stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		st := c.cmd(ctx, "stats", id, "--stream", "--json", "--interval", "200ms")
		out, err := st.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for i := range 3 {
			var s client.SandboxStats
			if !sc.Scan() || json.Unmarshal(sc.Bytes(), &s) != nil || s.ID != id {
				st.Process.Kill()
				st.Wait()
				t.Fatalf("sample %d of stats --stream --json: %q", i, sc.Text())
			}
			if i > 0 && s.CPU.WindowMs == 0 {
				t.Errorf("sample %d has no CPU window", i)
			}
		}
		st.Process.Signal(os.Interrupt)
		go io.Copy(io.Discard, out)
		if err := st.Wait(); err != nil {
			t.Errorf("stats --stream after Ctrl-C: %v, want exit 0", err)
		}
	})

	t.Run("shell re-attach", func(t *testing.T) {
		// A shell whose CLI dies goes on in the sandbox; --attach picks it
		// up, replays what it missed and ends with its exit code.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := c.cmd(ctx, "shell", id, "--", "sh", "-c", "echo early; sleep 2; echo late; exit 6")
		stdin, _ := first.StdinPipe() // held open: the session must not see EOF
		defer stdin.Close()
		out, _ := first.StdoutPipe()
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "early\n" {
			t.Fatalf("first attach: got %q, %v", line, err)
		}
		first.Process.Kill()
		first.Wait()
		terms, err := d.C.ListTerminals(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		var sid string
		for _, ti := range terms {
			if strings.Contains(strings.Join(ti.Argv, " "), "echo late") {
				sid = ti.ID
			}
		}
		if sid == "" {
			t.Fatalf("the session is gone after its CLI was killed: %+v", terms)
		}
		r := c.run("shell", id, "--attach", sid)
		if r.code != 6 || !strings.Contains(r.stdout, "late\n") {
			t.Errorf("shell --attach: got %v, want the rest of the output and exit 6", r)
		}
	})

	t.Run("backup and restore", func(t *testing.T) {
		var bk client.Backup
		if err := json.Unmarshal([]byte(c.want(0, "backup", id, "--json").stdout), &bk); err != nil || bk.ID == "" {
			t.Fatalf("backup --json: got %+v, %v", bk, err)
		}
		if r := c.want(0, "backups", id); !strings.Contains(r.stdout, bk.ID) {
			t.Errorf("backups: got %q, want %s listed", r.stdout, bk.ID)
		}
		c.want(0, "exec", id, "-c", "rm -rf /workspace/tree && echo later > /workspace/later.txt")
		if r := c.want(0, "restore", id, bk.ID); !strings.Contains(r.stdout, "restored "+bk.ID) {
			t.Errorf("restore: got %v", r)
		}
		if r := c.want(0, "exec", id, "-c", "cat /workspace/tree/a.txt; test -e /workspace/later.txt || echo gone"); r.stdout != "alpha\ngone\n" {
			t.Errorf("workspace after restore: got %q, want the backup's files only", r.stdout)
		}
		c.want(1, "restore", id, "bk-000000000000")
	})

	if r := c.want(0, "rm", id); strings.TrimSpace(r.stdout) != id {
		t.Errorf("rm: got %v, want the id", r)
	}
	if r := c.want(1, "inspect", id); !strings.Contains(r.stderr, "not found") {
		t.Errorf("inspect after rm: got %v, want not found", r)
	}
	c.want(0, "rm", id) // already gone: still a success
}

// TestCLIErrors: the mistakes people make get one line that says what to do.
func TestCLIErrors(t *testing.T) {
	d := sharedDaemon(t)
	closed := freePort(t)
	tests := []struct {
		name string
		c    *cli
		args []string
		code int
		want []string // in stderr
	}{
		{"unreachable", newCLIWith(t, fmt.Sprintf("http://127.0.0.1:%d", closed), "x"), []string{"ls"}, 1,
			[]string{fmt.Sprintf("cannot reach the hotcell daemon at http://127.0.0.1:%d", closed), "hotcell serve", "HOTCELL_URL"}},
		{"wrong token", newCLIWith(t, "http://"+d.Addr, "hc_wrong"), []string{"ls"}, 1,
			[]string{"the token was refused: check HOTCELL_TOKEN"}},
		{"unknown command", newCLI(t, d), []string{"exce", "x"}, 2, []string{`unknown command "exce"`, "Did you mean this?", "exec"}},
		{"unknown flag", newCLI(t, d), []string{"ps", "sb-000000000000", "--jsno"}, 2, []string{"unknown flag: --jsno", "did you mean --json?"}},
		{"bad port", newCLI(t, d), []string{"port-forward", "sb-000000000000", "80:http"}, 2, []string{`remote port "http"`}},
		{"unknown sandbox", newCLI(t, d), []string{"port-forward", "sb-000000000000", "8000"}, 1, []string{"not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.c.run(tt.args...)
			if r.code != tt.code {
				t.Errorf("got %v, want exit %d", r, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not say %q", r.stderr, w)
				}
			}
			if tt.name == "unreachable" || tt.name == "wrong token" {
				if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
					t.Errorf("stderr has %d lines, want one: %q", n+1, r.stderr)
				}
			}
		})
	}
}

// TestCLIShellDefault: without a command, shell runs a login bash where
// the image has one and sh where it does not.
func TestCLIShellDefault(t *testing.T) {
	d := sharedDaemon(t)
	c := newCLI(t, d)
	for _, tt := range []struct {
		image, want string
	}{
		{testenv.BaseImage(t), "bash login\n"},
		{testenv.BusyboxImage(t), "sh\n"},
	} {
		sb := newSandbox(t, d, client.CreateSandboxRequest{Image: tt.image})
		r := c.runIn(`if [ -n "$BASH_VERSION" ]; then shopt -q login_shell && echo bash login || echo bash; else echo sh; fi`+"\n", "shell", sb.ID)
		if r.code != 0 || r.stdout != tt.want {
			t.Errorf("shell in %s: got %v, want %q", tt.image, r, tt.want)
		}
	}
}

// TestCLIShellTmux drives `hotcell shell` in a real terminal (tmux): it
// runs commands interactively, follows a resize of the window, and exits
// with the shell's exit code.
func TestCLIShellTmux(t *testing.T) {
	d := sharedDaemon(t)
	tmux := testenv.RequireTool(t, "tmux")
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	c := newCLI(t, d)

	dir := t.TempDir()
	exitFile := filepath.Join(dir, "exit")
	script := filepath.Join(dir, "shell.sh")
	var sh strings.Builder
	for _, kv := range c.env {
		if strings.HasPrefix(kv, "HOTCELL_") {
			fmt.Fprintf(&sh, "export %q\n", kv)
		}
	}
	// stty -g before and after: the CLI must hand the terminal back as it
	// found it (not raw).
	fmt.Fprintf(&sh, "stty -g > %q\n%q shell %s\ncode=$?\nstty -g > %q\necho EXIT=$code > %q\n",
		filepath.Join(dir, "stty.before"), c.bin, sb.ID, filepath.Join(dir, "stty.after"), exitFile)
	if err := os.WriteFile(script, []byte(sh.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	// A server of its own (-L) so that no other tmux is touched.
	sock := "hc-" + filepath.Base(dir)
	tm := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tmux, append([]string{"-L", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	tm("new-session", "-d", "-s", "hc", "-x", "100", "-y", "30", "/bin/sh "+script)
	t.Cleanup(func() { exec.Command(tmux, "-L", sock, "kill-server").Run() })
	tm("set-option", "-t", "hc", "remain-on-exit", "on")

	waitPane := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var screen string
		for time.Now().Before(deadline) {
			screen = tm("capture-pane", "-p", "-t", "hc")
			if strings.Contains(screen, want) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: the pane never showed %q; it shows:\n%s\ndaemon log:\n%s", what, want, screen, d.Logs())
	}
	send := func(line string) { tm("send-keys", "-t", "hc", "-l", line); tm("send-keys", "-t", "hc", "Enter") }

	// The arithmetic shows the command ran: the typed line does not
	// contain its result.
	send("echo MARK-$((6*7))")
	waitPane("interactive command", "MARK-42")
	send("echo SIZE=$(stty size)")
	waitPane("initial size", "SIZE=30 100")
	send("echo TERM=$TERM tty=$(tty)")
	waitPane("a real terminal", "tty=/dev/pts/")

	tm("resize-window", "-t", "hc", "-x", "120", "-y", "40")
	// SIGWINCH reaches the CLI asynchronously: ask until the size shows.
	deadline := time.Now().Add(30 * time.Second)
	for {
		send("clear; echo SIZE=$(stty size)")
		time.Sleep(300 * time.Millisecond)
		if strings.Contains(tm("capture-pane", "-p", "-t", "hc"), "SIZE=40 120") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remote terminal never followed the resize to 120x40:\n%s", tm("capture-pane", "-p", "-t", "hc"))
		}
	}

	send("exit 5")
	deadline = time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(exitFile)
		if strings.TrimSpace(string(b)) == "EXIT=5" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exit status file: got %q, want EXIT=5; pane:\n%s", b, tm("capture-pane", "-p", "-t", "hc"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if screen := tm("capture-pane", "-p", "-t", "hc"); strings.Contains(screen, "hotcell:") {
		t.Errorf("the CLI reported an error:\n%s", screen)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "stty.before"))
	after, _ := os.ReadFile(filepath.Join(dir, "stty.after"))
	if len(before) == 0 || string(before) != string(after) {
		t.Errorf("terminal settings after the shell: got %q, want them restored to %q", after, before)
	}
}

// writeTree makes files (a trailing slash: a directory) under root.
func writeTree(t *testing.T, root string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree maps each path under root to its type, permissions and content.
func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := de.Info()
		if err != nil {
			return err
		}
		if de.IsDir() {
			out[rel] = fmt.Sprintf("dir %v", fi.Mode().Perm())
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("file %v %d %x", fi.Mode().Perm(), fi.Size(), h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
