// Package testinet makes a test's own "internet": a network namespace on a
// veth from the host, owning the addresses a test gives it (documentation
// ranges, metadata addresses, a private address), routed from the host by
// routes the test adds, with TCP servers in it answering
// "hello from ADDR:PORT". No packet of the test goes anywhere else.
// test/e2e, internal/testk8s and bench build their test internets on it.
//
// The servers run in the test process, on sockets opened inside the
// namespace (see InNetns): the package has no init and re-executes nothing.
package testinet

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Sh runs a command and fails t if it fails.
func Sh(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// RandHex returns n random bytes in hex.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Lock holds a host-wide lock until t ends, for test internets that take
// host-wide routes or the same ranges: flock, so that a killed test binary
// releases it.
func Lock(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "hotcell-e2e-internet.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("lock the test internet: %v", err)
	}
	t.Cleanup(func() { f.Close() })
}

// DocPrefix returns a random /28 of 203.0.113.0/24 or 198.51.100.0/24, and
// a random byte for anything else the caller numbers.
func DocPrefix() (netip.Prefix, byte) {
	var x [3]byte
	_, _ = rand.Read(x[:])
	bases := [][3]byte{{203, 0, 113}, {198, 51, 100}}
	b := bases[x[0]%2]
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], b[2], x[1] & 0xf0}), 28), x[2]
}

// Config says what New makes.
type Config struct {
	// Names: the namespace is NS+"-"+id, the veth ends HostVeth+id (on
	// the host) and PeerVeth+id (in the namespace); id is 6 hex digits,
	// so the prefixes are at most 9 characters.
	NS, HostVeth, PeerVeth string
	// Prefix is the veth's subnet; the host end takes its first address.
	Prefix netip.Prefix
	// Addrs are the namespace's addresses in Prefix.
	Addrs []netip.Addr
	// Routed are further addresses of the namespace (as /32s), each
	// routed from the host to it by a route the test adds and removes.
	Routed []netip.Addr
}

// Netns is a namespace New made.
type Netns struct {
	Name     string     // for ip netns exec
	HostVeth string     // the veth's host end
	HostIP   netip.Addr // its address, the namespace's default gateway
}

// New makes the namespace, its veth, addresses and routes; all of it is
// removed when the test ends.
func New(t testing.TB, c Config) *Netns {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("a test internet needs ip (iproute2)")
	}
	id := RandHex(3)
	n := &Netns{Name: c.NS + "-" + id, HostVeth: c.HostVeth + id, HostIP: c.Prefix.Masked().Addr().Next()}
	ns, vh, vp := n.Name, n.HostVeth, c.PeerVeth+id
	Sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	Sh(t, "ip", "link", "add", vh, "type", "veth", "peer", "name", vp)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", vh).Run() })
	Sh(t, "ip", "link", "set", vp, "netns", ns)
	Sh(t, "ip", "addr", "add", netip.PrefixFrom(n.HostIP, c.Prefix.Bits()).String(), "dev", vh)
	Sh(t, "ip", "link", "set", vh, "up")
	for _, a := range c.Addrs {
		Sh(t, "ip", "netns", "exec", ns, "ip", "addr", "add", netip.PrefixFrom(a, c.Prefix.Bits()).String(), "dev", vp)
	}
	for _, a := range c.Routed {
		Sh(t, "ip", "netns", "exec", ns, "ip", "addr", "add", a.String()+"/32", "dev", vp)
	}
	Sh(t, "ip", "netns", "exec", ns, "ip", "link", "set", vp, "up")
	Sh(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	// Back to the sandboxes and pods via the host.
	Sh(t, "ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", n.HostIP.String())
	// The test owns these addresses: a packet that got past the rules
	// would reach this namespace, not a real metadata service or LAN host.
	// replace, not add: a route a killed run left behind is taken over.
	for _, a := range c.Routed {
		Sh(t, "ip", "route", "replace", a.String()+"/32", "dev", vh)
		t.Cleanup(func() { _ = exec.Command("ip", "route", "del", a.String()+"/32", "dev", vh).Run() })
	}
	return n
}

// InNetns runs fn on a thread in network namespace ns: the sockets it
// opens stay there, whatever thread uses them later.
func InNetns(ns string, fn func() error) error {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", ns, err)
	}
	ferr := fn()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: it stays locked, so it
		// ends with this goroutine rather than run anything else.
		panic(fmt.Sprintf("leave netns %s: %v", ns, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Serve starts a TCP server in the namespace on each address, answering
// "hello from ADDR:PORT" and closing; they stop when the test ends.
func (n *Netns) Serve(t testing.TB, addrs ...netip.AddrPort) {
	t.Helper()
	err := InNetns(n.Name, func() error {
		for _, a := range addrs {
			ln, err := net.Listen("tcp", a.String())
			if err != nil {
				return err
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					fmt.Fprintf(c, "hello from %s\n", c.LocalAddr())
					c.Close()
				}
			}()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// LogUDP logs each datagram to addr in the namespace to file, as a line
// "FROM N bytes"; it stops when the test ends.
func (n *Netns) LogUDP(t testing.TB, addr netip.AddrPort, file string) {
	t.Helper()
	var pc net.PacketConn
	err := InNetns(n.Name, func() (err error) {
		pc, err = net.ListenPacket("udp", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			f, _ := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			fmt.Fprintf(f, "%s %d bytes\n", from, n)
			f.Close()
		}
	}()
}

// WaitAnswer fails t unless each address answers from the host, within
// 10 s, with its "hello from": a route that went wrong fails here, before
// any sandbox is let near it, not out on a network.
func WaitAnswer(t testing.TB, addrs ...netip.AddrPort) {
	t.Helper()
	for _, a := range addrs {
		deadline := time.Now().Add(10 * time.Second)
		want := "hello from " + a.String()
		for {
			if got, err := Dial(a.String()); err == nil && strings.Contains(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the test internet does not answer on %s", a.Addr())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Dial connects to addr from the host and returns what it says until it
// closes (3 s at most).
func Dial(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}
