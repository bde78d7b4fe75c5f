// Package testdaemon runs a real `hotcell serve` process for end-to-end
// tests and benchmarks: built from this tree, on a fresh data dir, against
// the real Docker Engine, with a Go SDK client for it.
package testdaemon

import (
	"context"
	"crypto/rand"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/egress"
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
	// EgressNetwork and EgressSubnet are this daemon's own egress network,
	// so that daemons of parallel tests do not share a resolver address.
	EgressNetwork string
	EgressSubnet  netip.Prefix
	args          []string
}

// Options change how Start runs the daemon.
type Options struct {
	// Listen is the API's address; default a free port on 127.0.0.1.
	Listen string
	// Args are extra `hotcell serve` flags. By default the egress DNS
	// upstream is 127.0.0.1:1, where nothing answers, so that no test
	// daemon forwards a sandbox's DNS query off the host.
	Args []string
}

// Start starts hotcell serve on a fresh data dir. The data dir is
// short and under /tmp because the agent socket's path must fit in 108
// bytes.
func Start(t testing.TB) *Daemon { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Daemon {
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
		Addr:    opts.Listen,
		logPath: filepath.Join(dir, "daemon.log"),
	}
	if d.Addr == "" {
		d.Addr = freeAddr(t)
	}
	d.EgressSubnet = freeEgressSubnet(t)
	d.EgressNetwork = "hc-t-" + filepath.Base(dir)
	d.args = append([]string{
		"--egress-network", d.EgressNetwork,
		"--egress-subnet", d.EgressSubnet.String(),
		"--egress-dns-upstream", "127.0.0.1:1",
	}, opts.Args...)
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
	d.cmd.Args = append(d.cmd.Args, d.args...)
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
	if d.EgressNetwork != "" {
		// Sandboxes outlive a daemon, so it leaves its network; a test's
		// daemon is the last user of its own.
		if err := egress.Teardown(d.EgressNetwork, d.EgressSubnet); err != nil {
			d.t.Logf("remove the egress rules of %s: %v", d.EgressNetwork, err)
		}
		_ = exec.Command("docker", "network", "rm", d.EgressNetwork).Run()
	}
	os.RemoveAll(d.DataDir)
}

// freeEgressSubnet picks a /24 in 10.214.0.0/16 that no interface of the
// host uses yet (every Docker bridge holds its gateway address).
func freeEgressSubnet(t testing.TB) netip.Prefix {
	used := map[netip.Prefix]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			used[netip.PrefixFrom(p.Addr(), 24).Masked()] = true
		}
	}
	for range 1000 {
		var b [1]byte
		_, _ = rand.Read(b[:])
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 214, b[0], 0}), 24)
		if !used[p] {
			return p
		}
	}
	t.Fatal("no free /24 in 10.214.0.0/16 for the egress network")
	return netip.Prefix{}
}
