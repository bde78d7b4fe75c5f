package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hotcell/hotcell/internal/agent"
)

func TestMain(m *testing.M) {
	if os.Getenv("HOTCELL_AGENT_TEST_MAIN") == "1" {
		if err := run(context.Background(), []string{"-workspace", os.Getenv("HOTCELL_AGENT_TEST_WS")}); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSIGTERMStopsChildren runs the agent's main in a child process, starts
// a command that ignores SIGTERM through it, and checks that SIGTERM to the
// agent kills the command within the grace period and exits 0.
func TestSIGTERMStopsChildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ws := filepath.Join(dir, "ws")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOTCELL_AGENT_TEST_MAIN=1", "HOTCELL_AGENT_SOCKET="+sock, "HOTCELL_AGENT_TEST_WS="+ws)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Client(conn, agent.YamuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return sess.Open() },
	}}
	go func() {
		resp, err := client.Post("http://agent/v1/exec", "application/json",
			strings.NewReader(`{"command":"trap '' TERM; echo $$ > sh.pid; sleep 100","timeoutMs":60000}`))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); ; {
		data, err := os.ReadFile(filepath.Join(ws, "sh.pid"))
		if err == nil && strings.HasSuffix(string(data), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("agent exited with %v, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit within 10s of SIGTERM")
	}
	// A lower bound only: the command ignores SIGTERM, so the agent must
	// have waited out its grace before killing it. (An upper bound would
	// measure the machine; the 10s above only guards against a hang.)
	if el := time.Since(start); el < 2*time.Second {
		t.Errorf("agent took %v, want at least most of the 3s grace (the command ignores SIGTERM)", el)
	}
	// The shell was the agent's child; with the agent gone it was killed
	// before, and whoever adopted it reaped it.
	for deadline := time.Now().Add(3 * time.Second); ; {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(b), ") Z") {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("command %d survived the agent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInstallTo checks the copy the Kubernetes driver's init container
// makes: the running binary, whole, executable, and nothing else left in
// the directory.
func TestInstallTo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dst := filepath.Join(dir, "hotcell-agent")
	if err := run(t.Context(), []string{"-install-to", dst}); err != nil {
		t.Fatalf("install: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("installed copy: %d bytes differ from the binary's %d", len(got), len(want))
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed copy: mode %v, %v; want 0755", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory after install: %d entries, want only the agent", len(entries))
	}
	if err := run(t.Context(), []string{"-install-to", filepath.Join(dir, "missing", "x")}); err == nil {
		t.Error("install into a missing directory: got no error")
	}
}
