package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// The network attacks of issue 11 §4, each from a sandbox of a real daemon
// against the test internet (egress_test.go): every address a sandbox aims
// at is either the test's own namespace or the host's loopback-bound test
// services, so a packet that got through lands with the test, nowhere else.

// putNetprobe copies the static test program netprobe into the sandbox.
func putNetprobe(t *testing.T, d *testdaemon.Daemon, id string) {
	t.Helper()
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/netprobe"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(t.Context(), id, "/workspace/netprobe", bin, 0o755); err != nil {
		t.Fatalf("copy netprobe into %s: %v", id, err)
	}
}

// udpService is a UDP service of the host on 0.0.0.0 that answers every
// datagram, as the one the security review reached by broadcast.
type udpService struct {
	port int
	mu   sync.Mutex
	from []string
}

func newUDPService(t *testing.T) *udpService {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &udpService{port: pc.LocalAddr().(*net.UDPAddr).Port}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.from = append(s.from, fmt.Sprintf("%s: %q", from, buf[:n]))
			s.mu.Unlock()
			_, _ = pc.WriteTo([]byte("host service answers"), from)
		}
	}()
	return s
}

func (s *udpService) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.from...)
}

// checkHealthy: the daemon answers and a neighbour sandbox runs an exec.
func checkHealthy(t *testing.T, d *testdaemon.Daemon, neighbour string) {
	t.Helper()
	if err := d.C.Health(t.Context()); err != nil {
		t.Fatalf("daemon health after the attacks: %v\n%s", err, d.Logs())
	}
	if out := run(t, d, neighbour, "echo still here").Stdout; !strings.Contains(out, "still here") {
		t.Fatalf("neighbour exec after the attacks: %q", out)
	}
}

// TestHostileNetworkOpen: open mode is the public internet. From an open
// sandbox, a public test address answers while the cloud metadata
// addresses (link-local and not), a private-range address (each assigned
// in the test's namespace and routed to it by the test) and a UDP service
// of the host reached by broadcast do not; nor does the host through the
// gateway address or the subnet's broadcast.
func TestHostileNetworkOpen(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t, "egress tests make network namespaces and read iptables")
	in := newInternet(t)
	d := testdaemon.StartWith(t, testdaemon.Options{})
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Egress: &client.EgressPolicy{Mode: client.EgressOpen}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	neighbour, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	putNetprobe(t, d, sb.ID)
	connect := func(addr netip.Addr) string {
		t.Helper()
		return run(t, d, sb.ID, fmt.Sprintf("timeout 5 nc %s 80 </dev/null 2>&1; true", addr)).Stdout
	}

	// The public test address answers: the checks below are not passing
	// because nothing gets out.
	if out := connect(in.allowed); !strings.Contains(out, "hello from") {
		t.Fatalf("the open sandbox does not reach the public test address %s: %q\n%s", in.allowed, out, d.Logs())
	}
	if out := run(t, d, sb.ID, "/workspace/netprobe udp "+netip.AddrPortFrom(in.resolver, 53).String()).Stdout; strings.Contains(out, "error") {
		t.Fatalf("netprobe cannot send UDP to a public test address: %q", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, _ := os.ReadFile(in.udpLog); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a datagram to the public test address did not arrive; the UDP checks would prove nothing")
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, a := range append([]netip.Addr{in.metadata, in.private}, in.metadataOther...) {
		if out := connect(a); strings.Contains(out, "hello") {
			t.Errorf("the open sandbox reached %s: %q", a, out)
		}
	}

	svc := newUDPService(t)
	gateway := d.EgressSubnet.Addr().Next()
	bcast := lastAddr(d.EgressSubnet)
	for _, to := range []netip.Addr{netip.MustParseAddr("255.255.255.255"), bcast, gateway, netip.MustParseAddr("224.0.0.1")} {
		out := run(t, d, sb.ID, fmt.Sprintf("/workspace/netprobe udp %s", netip.AddrPortFrom(to, uint16(svc.port)))).Stdout
		if strings.Contains(out, "reply") && !strings.Contains(out, "no reply") {
			t.Errorf("a host UDP service answered a datagram to %s: %q", to, out)
		}
	}
	if got := svc.received(); len(got) > 0 {
		t.Errorf("the host UDP service on 0.0.0.0 received datagrams from the sandbox: %q", got)
	}

	// Each drop is in the denial log under its reason (read
	// asynchronously: wait a little).
	want := []string{"link-local", "metadata", "private", "broadcast", "host"}
	deadline = time.Now().Add(10 * time.Second)
	for {
		st, err := d.C.Egress(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]bool{}
		for _, dn := range st.Denied {
			reasons[dn.Reason] = true
		}
		var missing []string
		for _, r := range want {
			if !reasons[r] {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 || !st.DenialLogAvailable {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no denials with reasons %v in %+v", missing, st.Denied)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkHealthy(t, d, neighbour.ID)
}

// lastAddr is the broadcast address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	bits := p.Bits()
	for i := range 4 {
		for b := range 8 {
			if i*8+b >= bits {
				a[i] |= 0x80 >> b
			}
		}
	}
	return netip.AddrFrom4(a)
}
