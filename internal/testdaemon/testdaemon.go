// Package testdaemon runs a real `hotcell serve` process for end-to-end
// tests and benchmarks: built from this tree, on a fresh data dir, against
// the real Docker Engine, with a Go SDK client for it.
package testdaemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wsdisk"
)

// Daemon is one `hotcell serve` process run by a test, or shared by the
// tests of a package (Shared).
type Daemon struct {
	// owner is the test a daemon of Start belongs to, which reports its
	// failures; nil for the shared daemon, which outlives every test and so
	// must not keep the one that happened to start it.
	owner   testing.TB
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
	ownsEgress    bool
	args          []string
	env           []string
}

// Options change how Start runs the daemon.
type Options struct {
	// Listen is the API's address; default a free port on 127.0.0.1.
	Listen string
	// Args are extra `hotcell serve` flags. By default the egress DNS
	// upstream is 127.0.0.1:1, where nothing answers, so that no test
	// daemon forwards a sandbox's DNS query off the host.
	Args []string
	// ShareEgressOf, when set, puts this daemon on that daemon's egress
	// network and subnet instead of a network of its own, which it then
	// leaves in place on Close.
	ShareEgressOf *Daemon
	// Env are extra NAME=value variables of the daemon's environment,
	// after (so overriding) the test process's own.
	Env []string
	// Store is the daemon's --store: a PostgreSQL URL, such as the fresh
	// database testenv.RequirePostgres makes. Empty, the daemon keeps its
	// records in the SQLite file of its data dir.
	Store string
	// EgressSubnetBits, between 16 and 23, gives the daemon's own egress
	// network a larger subnet than the default /24 (which holds ~250
	// sandboxes), taken from 10.215.0.0/16, where the /24s of other test
	// daemons never are.
	EgressSubnetBits int
}

// AgentChannelEnv, set to "tcp", runs every test daemon (that does not
// choose its own) with agent_channel = "tcp": the e2e suite then drives
// every sandbox's agent over the TLS channel instead of its socket.
const AgentChannelEnv = "HOTCELL_TEST_AGENT_CHANNEL"

// Start starts hotcell serve on a fresh data dir, for t alone: t's
// cleanup should Close it. The data dir is short and under /tmp because the
// agent socket's path must fit in 108 bytes.
func Start(t testing.TB) *Daemon { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Daemon {
	t.Helper()
	d, err := launch(prepare(t), opts, t)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// StartFailing runs hotcell serve as StartWith does and waits for it to
// exit, which it must within two minutes; it returns how it exited and its
// log. Tests of what the daemon refuses at start use it.
func StartFailing(t testing.TB, opts Options) (exitErr error, log string) {
	t.Helper()
	d, err := newDaemon(prepare(t), opts, t)
	if err != nil {
		t.Fatal(err)
	}
	// A daemon may fail after it made its egress network: it goes, as
	// after Close.
	defer d.removeLeftovers()
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := d.command(logf)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hotcell serve: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case exitErr = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("hotcell serve was expected to fail at start but ran for two minutes\n%s", d.Logs())
	}
	return exitErr, d.Logs()
}

// sharedOptions are the options of the shared daemon; see SetSharedOptions.
var sharedOptions Options

// SetSharedOptions sets the options the shared daemon will start with; call
// it from TestMain before m.Run. ShareEgressOf is ignored.
func SetSharedOptions(opts Options) {
	opts.ShareEgressOf = nil
	sharedOptions = opts
}

var shared struct {
	once sync.Once
	d    *Daemon
	err  error
}

// Shared returns the daemon the tests of a package share, starting it on
// the first call. It belongs to the test binary, not to the test that
// happens to call first: t only decides whether this test can have it
// (skipped or failed without Docker) and fails if it did not start. Call
// CloseShared from TestMain after m.Run. Do not Stop or Restart it.
func Shared(t testing.TB) *Daemon {
	t.Helper()
	env := prepare(t)
	shared.once.Do(func() { shared.d, shared.err = launch(env, sharedOptions, nil) })
	if shared.err != nil {
		t.Fatalf("the shared daemon did not start: %v", shared.err)
	}
	return shared.d
}

// CloseShared closes the shared daemon if one was started.
func CloseShared() {
	if shared.d != nil {
		shared.d.Close()
	}
}

// env is what every daemon of the test process runs: binaries built from
// this tree and the default image.
type env struct{ bin, agent, image string }

// prepare gets env with t, so that a missing engine skips or fails the
// calling test; everything in it is built once per process.
func prepare(t testing.TB) env {
	t.Helper()
	testenv.RequireDocker(t)
	return env{
		bin:   testenv.GoBuild(t, "./cmd/hotcell"),
		agent: testenv.AgentBinary(t),
		image: testenv.BusyboxImage(t),
	}
}

func launch(e env, opts Options, owner testing.TB) (*Daemon, error) {
	for attempt := 1; ; attempt++ {
		d, err := newDaemon(e, opts, owner)
		if err != nil {
			return nil, err
		}
		err = d.start()
		if err == nil {
			return d, nil
		}
		d.Close()
		// Test processes that start daemons at the same moment can pick the
		// same free subnet (freeEgressSubnet sees only bridges that exist
		// already); the later daemon refuses it. Pick another.
		if !d.ownsEgress || attempt == 3 || !strings.Contains(err.Error(), egress.ErrNetworkInUse.Error()) {
			return nil, err
		}
		d.logf("egress subnet %s was taken by another daemon while this one started; trying another", d.EgressSubnet)
	}
}

// newDaemon makes a daemon's data dir and flags; start runs it.
func newDaemon(e env, opts Options, owner testing.TB) (*Daemon, error) {
	dir, err := os.MkdirTemp("/tmp", "hc")
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		owner:   owner,
		bin:     e.bin,
		agent:   e.agent,
		Image:   e.image,
		DataDir: dir,
		Addr:    opts.Listen,
		logPath: filepath.Join(dir, "daemon.log"),
	}
	fail := func(err error) (*Daemon, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if d.Addr == "" {
		if d.Addr, err = freeAddr(); err != nil {
			return fail(err)
		}
	}
	if o := opts.ShareEgressOf; o != nil {
		d.EgressNetwork, d.EgressSubnet = o.EgressNetwork, o.EgressSubnet
	} else {
		if d.EgressSubnet, err = freeEgressSubnet(opts.EgressSubnetBits); err != nil {
			return fail(err)
		}
		d.EgressNetwork = "hc-t-" + filepath.Base(dir)
		d.ownsEgress = true
	}
	d.args = append([]string{
		"--egress-network", d.EgressNetwork,
		"--egress-subnet", d.EgressSubnet.String(),
		"--egress-dns-upstream", "127.0.0.1:1",
	}, opts.Args...)
	if os.Getenv(AgentChannelEnv) == "tcp" && !slices.Contains(opts.Args, "--agent-channel") {
		// The port is fixed for the daemon's life: after a Restart it
		// listens where its boxes were told to dial.
		addr, err := freeAddr()
		if err != nil {
			return fail(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		d.args = append(d.args, "--agent-channel", "tcp", "--agent-listen", ":"+port)
	}
	if opts.Store != "" {
		d.args = append(d.args, "--store", opts.Store)
	}
	d.env = opts.Env
	return d, nil
}

// command is the `hotcell serve` command of d, logging to logf.
func (d *Daemon) command(logf *os.File) *exec.Cmd {
	cmd := exec.Command(d.bin, "serve",
		"--listen", d.Addr,
		"--data-dir", d.DataDir,
		"--agent-binary", d.agent,
		"--default-image", d.Image,
		"--log-level", "debug",
	)
	cmd.Args = append(cmd.Args, d.args...)
	if len(d.env) > 0 {
		cmd.Env = append(os.Environ(), d.env...)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	return cmd
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fatalf reports a failure to the daemon's own test. The shared daemon has
// none: what fails on it after its start is a misuse (Stop, Restart).
func (d *Daemon) fatalf(format string, args ...any) {
	if d.owner == nil {
		panic("testdaemon: shared daemon: " + fmt.Sprintf(format, args...))
	}
	d.owner.Helper()
	d.owner.Fatalf(format, args...)
}

// logf logs to the daemon's own test, or to stderr for the shared daemon.
func (d *Daemon) logf(format string, args ...any) {
	if d.owner == nil {
		fmt.Fprintf(os.Stderr, "testdaemon: "+format+"\n", args...)
		return
	}
	d.owner.Helper()
	d.owner.Logf(format, args...)
}

// Restart (re)starts the daemon process on the same data dir and address:
// a running one is stopped first (SIGTERM), so that the new process is the
// one that answers. The shared daemon refuses, as for Stop.
func (d *Daemon) Restart() {
	if d.owner == nil {
		d.fatalf("Restart: other tests use this daemon; start one of your own with Start")
	}
	d.owner.Helper()
	// Starting beside a running daemon would fail to listen while the
	// old one kept answering: the "restart" tested nothing and the old
	// process outlived the test.
	d.stop(syscall.SIGTERM)
	if err := d.start(); err != nil {
		d.fatalf("%v", err)
	}
}

// RestartWith is Restart with extra flags from now on, after (so
// overriding) the ones it had: a test changes a setting across a restart.
func (d *Daemon) RestartWith(args ...string) {
	if d.owner == nil {
		d.fatalf("RestartWith: other tests use this daemon; start one of your own with Start")
	}
	d.owner.Helper()
	d.args = append(d.args, args...)
	d.Restart()
}

func (d *Daemon) start() error {
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	d.cmd = d.command(logf)
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		d.cmd = nil
		return fmt.Errorf("start hotcell serve: %w", err)
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
			d.cmd = nil
			return fmt.Errorf("hotcell serve exited: %v\n%s", err, d.Logs())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hotcell serve did not answer /healthz in 30s\n%s", d.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	d.C, err = client.New("http://"+d.Addr, strings.TrimSpace(string(tok)))
	return err
}

// Stop ends the daemon with sig and waits for it.
// The shared daemon refuses: other tests are using it.
func (d *Daemon) Stop(sig syscall.Signal) {
	if d.owner == nil {
		d.fatalf("Stop: other tests use this daemon; start one of your own with Start")
	}
	d.owner.Helper()
	d.stop(sig)
}

func (d *Daemon) stop(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	select {
	case <-d.waitErr:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.waitErr
		d.logf("hotcell serve did not exit within 30s of %v; killed it", sig)
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

// LogSize is how many bytes the daemon's log (all its runs) has so far;
// LogsSince(LogSize()) taken before a Restart is what the new run logs.
func (d *Daemon) LogSize() int64 {
	fi, err := os.Stat(d.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// LogsSince returns the whole daemon log from byte off on.
func (d *Daemon) LogsSince(off int64) string {
	b, _ := os.ReadFile(d.logPath)
	if off > int64(len(b)) {
		return ""
	}
	return string(b[off:])
}

// Logs returns the tail of the daemon's log.
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
		if d.C != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if list, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err == nil {
				for _, sb := range list {
					_ = d.C.DeleteSandbox(ctx, sb.ID)
				}
			}
			cancel()
		}
		d.stop(syscall.SIGTERM)
	}
	d.removeLeftovers()
}

// removeLeftovers removes what a daemon that is not running leaves on the
// host: its boxes, its egress network (when it owns one) and its data dir.
func (d *Daemon) removeLeftovers() {
	// What the API does not list (the boxes of warm pools, which outlive
	// a daemon as sandboxes do) goes by the instance label of the data dir.
	removeInstance(d.DataDir)
	if d.ownsEgress {
		// Sandboxes outlive a daemon, so it leaves its network; a test's
		// daemon is the last user of its own.
		if err := egress.Teardown(d.EgressNetwork, d.EgressSubnet); err != nil {
			d.logf("remove the egress rules of %s: %v", d.EgressNetwork, err)
		}
		_ = exec.Command("docker", "network", "rm", d.EgressNetwork).Run()
	}
	unmountUnder(d.DataDir)
	os.RemoveAll(d.DataDir)
}

// removeInstance removes the containers, volumes and images labelled
// with the instance id of dataDir.
func removeInstance(dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, "instance"))
	id := strings.TrimSpace(string(b))
	if err != nil || id == "" {
		return
	}
	filter := "label=" + driver.LabelInstance + "=" + id
	if out, err := exec.Command("docker", "ps", "-aq", "--filter", filter).Output(); err == nil && len(strings.Fields(string(out))) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f", "-v"}, strings.Fields(string(out))...)...).Run()
	}
	if out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", filter).Output(); err == nil && len(strings.Fields(string(out))) > 0 {
		_ = exec.Command("docker", append([]string{"volume", "rm", "-f"}, strings.Fields(string(out))...)...).Run()
	}
	// Its snapshots' images (a test that deleted its snapshot while a
	// sandbox made from it still ran left the image), now that no box
	// uses them.
	if out, err := exec.Command("docker", "image", "ls", "-q", "--filter", filter).Output(); err == nil && len(strings.Fields(string(out))) > 0 {
		_ = exec.Command("docker", append([]string{"image", "rm", "-f"}, strings.Fields(string(out))...)...).Run()
	}
}

// unmountUnder detaches what is still mounted under dir (the workspace disk
// of a sandbox whose destroy failed), so that removing dir neither empties a
// mounted disk nor leaves its loop device behind.
func unmountUnder(dir string) {
	mps, err := wsdisk.MountPoints()
	if err != nil {
		return
	}
	for _, mp := range mps {
		if strings.HasPrefix(mp, filepath.Clean(dir)+"/") {
			_ = exec.Command("umount", "-l", mp).Run()
		}
	}
}

// freeEgressSubnet picks a /24 in 10.214.0.0/16 that no interface of the
// host uses yet (every Docker bridge holds its gateway address), or with
// bits set (16-23), a subnet that large in 10.215.0.0/16 none of whose /24s
// is used.
func freeEgressSubnet(bits int) (netip.Prefix, error) {
	if bits != 0 {
		return freeLargeSubnet(bits)
	}
	used := map[netip.Prefix]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list the host's addresses: %w", err)
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
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("no free /24 in 10.214.0.0/16 for the egress network")
}

func freeLargeSubnet(bits int) (netip.Prefix, error) {
	if bits < 16 || bits > 23 {
		return netip.Prefix{}, fmt.Errorf("egress subnet /%d: want 16 to 23", bits)
	}
	used := map[netip.Prefix]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			used[netip.PrefixFrom(p.Addr(), 24).Masked()] = true
		}
	}
	span := 1 << (24 - bits) // /24s in the subnet
next:
	for base := 0; base+span <= 256; base += span {
		for i := range span {
			if used[netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 215, byte(base + i), 0}), 24)] {
				continue next
			}
		}
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 215, byte(base), 0}), bits), nil
	}
	return netip.Prefix{}, fmt.Errorf("no free /%d in 10.215.0.0/16 for the egress network", bits)
}
