// Package testdaemon runs a real `hotcell serve` process for end-to-end
// tests and benchmarks: built from this tree, on a fresh data dir, against
// the real Docker Engine, with a Go SDK client for it.
package testdaemon

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// daemon is one `hotcell serve` process run by a test.
type Daemon struct {
	t       testing.TB
	bin     string
	agent   string
	Image   string
	DataDir string
	Addr    string
	logPath string
	cmd     *exec.Cmd
	waitErr chan error
	C       *client.Client
}

// Start starts hotcell serve on a fresh data dir. The data dir is
// short and under /tmp because the agent socket's path must fit in 108
// bytes.
func Start(t testing.TB) *Daemon {
	t.Helper()
	testenv.RequireDocker(t)
	dir, err := os.MkdirTemp("/tmp", "hc")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{
		t:       t,
		bin:     testenv.GoBuild(t, "./cmd/hotcell"),
		agent:   testenv.AgentBinary(t),
		Image:   testenv.BusyboxImage(t),
		DataDir: dir,
		Addr:    freeAddr(t),
		logPath: filepath.Join(dir, "daemon.log"),
	}
	d.Restart()
	return d
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Restart (re)starts the daemon process on the same data dir and address.
func (d *Daemon) Restart() {
	t := d.t
	t.Helper()
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(d.bin, "serve",
		"--listen", d.Addr,
		"--data-dir", d.DataDir,
		"--agent-binary", d.agent,
		"--default-image", d.Image,
		"--log-level", "debug",
	)
	d.cmd.Stdout = logf
	d.cmd.Stderr = logf
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start hotcell serve: %v", err)
	}
	logf.Close()
	d.waitErr = make(chan error, 1)
	go func(cmd *exec.Cmd, ch chan error) { ch <- cmd.Wait() }(d.cmd, d.waitErr)

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + d.Addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-d.waitErr:
			t.Fatalf("hotcell serve exited: %v\n%s", err, d.Logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hotcell serve did not answer /healthz in 30s\n%s", d.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatalf("read token: %v", err)
	}
	d.C, err = client.New("http://"+d.Addr, strings.TrimSpace(string(tok)))
	if err != nil {
		t.Fatal(err)
	}
}

// Stop ends the daemon with sig and waits for it.
func (d *Daemon) Stop(sig syscall.Signal) {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.waitErr:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.waitErr
		d.t.Logf("hotcell serve did not exit within 30s of %v; killed it", sig)
	}
	d.cmd = nil
}

// PID returns the pid of the running daemon process, or 0 when it is
// stopped. Benchmarks read its memory from /proc/<pid>/status.
func (d *Daemon) PID() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

func (d *Daemon) Logs() string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > 20000 {
		b = b[len(b)-20000:]
	}
	return string(b)
}

// Close destroys every sandbox the daemon still has, stops it and removes
// its data dir.
func (d *Daemon) Close() {
	if d.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if list, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err == nil {
			for _, sb := range list {
				_ = d.C.DeleteSandbox(ctx, sb.ID)
			}
		}
		cancel()
		d.Stop(syscall.SIGTERM)
	}
	os.RemoveAll(d.DataDir)
}
