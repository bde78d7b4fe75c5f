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
