package testk8s

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/hotcell/hotcell/internal/testinet"
)

// Internet is a test's own internet (see internal/testinet): a network
// namespace that owns a few addresses of a documentation range (203.0.113.0/24 or 198.51.100.0/24),
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

// NewInternet makes the namespace, its veth, the route and its servers;
// all of it is removed when the test ends.
func NewInternet(t testing.TB) *Internet {
	t.Helper()
	// test/e2e's test internets take the same ranges: take turns.
	testinet.Lock(t)
	pfx, _ := testinet.DocPrefix()
	hostIP := pfx.Addr().Next()
	in := &Internet{Allowed: hostIP.Next(), Prefix: pfx}
	in.Other = in.Allowed.Next()
	in.RogueAnswer = in.Other.Next()
	n := testinet.New(t, testinet.Config{NS: "hcke", HostVeth: "hck", PeerVeth: "hcq", Prefix: pfx, Addrs: []netip.Addr{in.Allowed, in.Other}})
	in.ns = n.Name
	n.Serve(t, netip.AddrPortFrom(in.Allowed, 80), netip.AddrPortFrom(in.Other, 80))
	var pc net.PacketConn
	if err := testinet.InNetns(n.Name, func() (err error) {
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(in.Other, 53).String())
		return err
	}); err != nil {
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
	// The addresses answer from the host before any pod is let near them.
	testinet.WaitAnswer(t, netip.AddrPortFrom(in.Allowed, 80), netip.AddrPortFrom(in.Other, 80))
	return in
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
	testinet.Sh(t, "nsenter", "-t", pid, "-n", "ip", "route", "replace", prefix.String(), "via", via)
}
