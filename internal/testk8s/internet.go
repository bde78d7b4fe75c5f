package testk8s

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// Internet is a test's own internet: a network namespace that owns a few
// addresses of a documentation range (203.0.113.0/24 or 198.51.100.0/24),
// routed from the node by a route the test adds. No packet of the test
// goes anywhere else.
type Internet struct {
	ns string
	// Prefix holds the addresses; routes to it go to the namespace.
	Prefix netip.Prefix
	// Allowed and Other answer TCP port 80 with "hello from ADDR:80";
	// Other also answers DNS (port 53) for any name with RogueAnswer, a
	// resolver a sandbox might try instead of hotcell's.
	Allowed, Other netip.Addr
	RogueAnswer    netip.Addr
	RogueQueries   atomic.Int64
}

// Sh runs a command and fails t if it fails.
func Sh(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func randHexN(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewInternet makes the namespace, its veth, the route and its servers;
// all of it is removed when the test ends.
func NewInternet(t testing.TB) *Internet {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("needs ip (iproute2)")
	}
	// test/e2e's test internets take the same ranges: take turns.
	lockInternet(t)
	var x [2]byte
	_, _ = rand.Read(x[:])
	bases := [][3]byte{{203, 0, 113}, {198, 51, 100}}
	b := bases[x[0]%2]
	pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], b[2], x[1] & 0xf0}), 28)
	hostIP := pfx.Addr().Next()
	in := &Internet{Allowed: hostIP.Next(), Prefix: pfx}
	in.Other = in.Allowed.Next()
	in.RogueAnswer = in.Other.Next()
	id := randHexN(3)
	ns, vh, vp := "hcke-"+id, "hck"+id, "hcq"+id
	in.ns = ns
	Sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	Sh(t, "ip", "link", "add", vh, "type", "veth", "peer", "name", vp)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", vh).Run() })
	Sh(t, "ip", "link", "set", vp, "netns", ns)
	Sh(t, "ip", "addr", "add", netip.PrefixFrom(hostIP, pfx.Bits()).String(), "dev", vh)
	Sh(t, "ip", "link", "set", vh, "up")
	for _, a := range []netip.Addr{in.Allowed, in.Other} {
		Sh(t, "ip", "netns", "exec", ns, "ip", "addr", "add", netip.PrefixFrom(a, pfx.Bits()).String(), "dev", vp)
	}
	Sh(t, "ip", "netns", "exec", ns, "ip", "link", "set", vp, "up")
	Sh(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	// Back to the pods (the bridge CNI does not masquerade) via the host.
	Sh(t, "ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", hostIP.String())

	inNetns(t, ns, func() {
		for _, a := range []netip.Addr{in.Allowed, in.Other} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 80).String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					fmt.Fprintf(c, "hello from %s\n", ln.Addr())
					c.Close()
				}
			}()
		}
		pc, err := net.ListenPacket("udp", netip.AddrPortFrom(in.Other, 53).String())
		if err != nil {
			t.Fatal(err)
		}
		srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
			in.RogueQueries.Add(1)
			m := new(dns.Msg)
			m.SetReply(q)
			if q.Question[0].Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: in.RogueAnswer.AsSlice()})
			}
			_ = w.WriteMsg(m)
		})}
		go func() { _ = srv.ActivateAndServe() }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	})
	// The addresses answer from the host before any pod is let near them:
	// a route that went wrong fails here, not out on a network.
	for _, a := range []netip.Addr{in.Allowed, in.Other} {
		want := "hello from " + netip.AddrPortFrom(a, 80).String()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got, err := dialRead(netip.AddrPortFrom(a, 80).String()); err == nil && strings.Contains(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the test internet does not answer on %s", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return in
}

// inNetns runs fn on a thread in network namespace ns: the sockets it
// opens stay there.
func inNetns(t testing.TB, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread is in the wrong namespace: it must not run
			// anything else (LockOSThread without Unlock ends it).
			runtime.LockOSThread()
			panic(err)
		}
	}()
	fn()
}

func lockInternet(t testing.TB) {
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

func dialRead(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	var b [256]byte
	n, _ := c.Read(b[:])
	return string(b[:n]), nil
}

// NewUpstream is a DNS server on loopback that answers names with their
// addresses (NXDOMAIN for others), for a resolver to forward to; it
// returns its address.
func NewUpstream(t testing.TB, names map[string]netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
		if a, ok := names[name]; ok && q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// RouteInPod adds a route to prefix via the node address via in pod's
// network namespace, from the host: the test cluster's CNI gives pods no
// default route (one would send what leaves a pod to the host's real
// network), and a test internet needs a way in.
func (e *Env) RouteInPod(t testing.TB, pod *corev1.Pod, prefix netip.Prefix, via string) {
	t.Helper()
	var cid string
	for _, cs := range pod.Status.ContainerStatuses {
		if id, ok := strings.CutPrefix(cs.ContainerID, "containerd://"); ok && cs.State.Running != nil {
			cid = id
		}
	}
	if cid == "" {
		t.Fatalf("pod %s has no running container", pod.Name)
	}
	out, err := exec.Command("ctr", "--address", e.Containerd, "-n", "k8s.io", "task", "ls").Output()
	if err != nil {
		t.Fatalf("ctr task ls: %v", err)
	}
	var pid string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == cid {
			pid = f[1]
		}
	}
	if pid == "" {
		t.Fatalf("no task of container %s", cid)
	}
	Sh(t, "nsenter", "-t", pid, "-n", "ip", "route", "replace", prefix.String(), "via", via)
}
