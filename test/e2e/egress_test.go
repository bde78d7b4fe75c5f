package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testinet"
)

// The egress tests' "internet" is a network namespace the test makes, on a
// veth routed from the host. Its public hosts have documentation addresses
// (a /28 of 203.0.113.0/24 or 198.51.100.0/24, which hotcell lets open
// sandboxes reach); it also holds addresses hotcell blocks in every mode,
// each routed from the host to the namespace by a /32 or /24 route the test
// adds: the metadata addresses 169.254.169.254, 100.100.100.200 and
// 168.63.129.16, and a private (benchmarking range) 198.18.X.10. A TCP
// server in it answers "hello from ADDR" on port 80 of each address and
// logs UDP datagrams to port 53 of the resolver host. Every packet a
// sandbox sends in these tests either is dropped or reaches that namespace.

type internet struct {
	prefix   netip.Prefix // a /28 of documentation addresses
	allowed  netip.Addr   // .2 of it, allowed.test
	other    netip.Addr   // .3, other.test
	resolver netip.Addr   // .4, a foreign "DNS server"
	metadata netip.Addr   // 169.254.169.254
	// metadataOther are the metadata addresses outside link-local.
	metadataOther []netip.Addr
	private       netip.Addr // 198.18.X.10
	udpLog        string
	ns            string // its name, for ip netns exec
}

// metadataRoutes are addresses outside the namespace's /28 that the host
// routes to it; only one test internet at a time can own them (see
// testinet.Lock).
var metadataRoutes = []string{"169.254.169.254", "100.100.100.200", "168.63.129.16"}

// newInternet makes the namespace, its veth and routes, and its server;
// all of it is removed when the test ends.
func newInternet(t *testing.T) *internet {
	t.Helper()
	// The metadata routes are host-wide: test internets of parallel test
	// binaries (several go test runs at once) take turns.
	testinet.Lock(t)
	pfx, x := testinet.DocPrefix()
	hostIP := pfx.Addr().Next()
	in := &internet{prefix: pfx, metadata: netip.MustParseAddr("169.254.169.254"), udpLog: t.TempDir() + "/udp.log"}
	in.allowed = hostIP.Next()
	in.other = in.allowed.Next()
	in.resolver = in.other.Next()
	in.private = netip.AddrFrom4([4]byte{198, 18, x, 10})
	for _, a := range metadataRoutes[1:] {
		in.metadataOther = append(in.metadataOther, netip.MustParseAddr(a))
	}
	n := testinet.New(t, testinet.Config{
		NS: "hce2e", HostVeth: "hce", PeerVeth: "hcp", Prefix: pfx,
		Addrs:  []netip.Addr{in.allowed, in.other, in.resolver},
		Routed: append([]netip.Addr{in.metadata}, append(slices.Clone(in.metadataOther), in.private)...),
	})
	in.ns = n.Name
	var tcp []netip.AddrPort
	for _, a := range append([]netip.Addr{in.allowed, in.other, in.resolver, in.metadata, in.private}, in.metadataOther...) {
		tcp = append(tcp, netip.AddrPortFrom(a, 80))
	}
	n.Serve(t, tcp...)
	n.LogUDP(t, netip.AddrPortFrom(in.resolver, 53), in.udpLog)
	// Every address answers from the namespace before any sandbox is let
	// near it.
	var check []netip.AddrPort
	for _, a := range append([]netip.Addr{in.allowed, in.metadata, in.private}, in.metadataOther...) {
		check = append(check, netip.AddrPortFrom(a, 80))
	}
	testinet.WaitAnswer(t, check...)
	return in
}

// upstream is the DNS server the daemon forwards to, on loopback.
type upstream struct {
	addr    string
	queries atomic.Int64
	names   map[string]netip.Addr
	asked   chan string
}

func newUpstream(t *testing.T, names map[string]netip.Addr) *upstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: pc.LocalAddr().String(), names: names, asked: make(chan string, 1000)}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		u.queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
		select {
		case u.asked <- name:
		default:
		}
		a, ok := u.names[name]
		if !ok {
			m.Rcode = dns.RcodeNameError
		} else if q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

func (u *upstream) wasAsked(name string) bool {
	for {
		select {
		case n := <-u.asked:
			if n == name {
				return true
			}
		default:
			return false
		}
	}
}

// rules returns the host's filter rules of one egress network (its chain,
// its jumps and its sandboxes' chains), without counters, sorted.
func rules(t *testing.T, network string, subnet netip.Prefix) []string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	h := sha256.Sum256([]byte(network + "|" + subnet.String()))
	base := "HCN-" + hex.EncodeToString(h[:4])
	// Sandbox chains are the targets of the base chain's gotos.
	sbChains := map[string]bool{}
	re := regexp.MustCompile(`-A ` + base + ` .*-g (HCE-[0-9a-f]+)-`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		sbChains[m[1]] = true
		sbChains["HCD"+strings.TrimPrefix(m[1], "HCE")] = true
	}
	var keep []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		l := sc.Text()
		mine := strings.Contains(l, base)
		for c := range sbChains {
			mine = mine || strings.Contains(l, c+"-")
		}
		if mine {
			keep = append(keep, regexp.MustCompile(`\[\d+:\d+\]`).ReplaceAllString(l, ""))
		}
	}
	return keep
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestEgress drives the three modes end to end on real Docker and a test
// internet, through the public API.
func TestEgress(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		testenv.RequireDocker(t)
		testenv.RequireRoot(t, "egress tests make network namespaces and read iptables")
		in := newInternet(t)
		up := newUpstream(t, map[string]netip.Addr{
			"allowed.test":  in.allowed,
			"other.test":    in.other,
			"www.pkg.test":  in.allowed,
			"resolver.test": in.resolver,
		})
		// The API listens on every interface, so a sandbox could reach it
		// through the gateway address if the rules let it.
		apiPort := freePort(t)
		d := testdaemon.StartWith(t, testdaemon.Options{
			Listen: fmt.Sprintf("0.0.0.0:%d", apiPort),
			Args:   []string{"--egress-dns-upstream", up.addr},
		})
		t.Cleanup(d.Close)
		ctx := t.Context()
		gateway := d.EgressSubnet.Addr().Next()
		before := rules(t, d.EgressNetwork, d.EgressSubnet)
		if len(before) == 0 {
			t.Fatalf("no base rules for %s after daemon start\n%s", d.EgressNetwork, d.Logs())
		}

		mk := func(p *client.EgressPolicy) client.Sandbox {
			t.Helper()
			sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Runtime: rt, Egress: p})
			if err != nil {
				t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
			}
			return sb
		}
		a := mk(&client.EgressPolicy{Allow: []string{"allowed.test", "*.pkg.test:80"}})
		b := mk(&client.EgressPolicy{Mode: client.EgressOpen})
		n := mk(&client.EgressPolicy{Mode: client.EgressNone})
		if a.Egress == nil || a.Egress.Mode != client.EgressAllowlist || b.Egress.Mode != client.EgressOpen || n.Egress.Mode != client.EgressNone {
			t.Fatalf("policies on create: %+v %+v %+v", a.Egress, b.Egress, n.Egress)
		}
		if got, err := d.C.GetSandbox(ctx, a.ID); err != nil || got.Egress == nil || len(got.Egress.Allow) != 2 {
			t.Fatalf("get shows policy: %+v, %v", got.Egress, err)
		}

		connect := func(id, host string, port int) string {
			t.Helper()
			return run(t, d, id, fmt.Sprintf("timeout 5 nc %s %d </dev/null 2>&1; true", host, port)).Stdout
		}
		reaches := func(id, host string, port int) bool {
			t.Helper()
			return strings.Contains(connect(id, host, port), "hello from")
		}
		resolves := func(id, name string) string {
			t.Helper()
			return run(t, d, id, "timeout 5 nslookup "+name+" 2>&1; true").Stdout
		}

		// An allowlisted name resolves and connects; the wildcard too.
		if out := resolves(a.ID, "allowed.test"); !strings.Contains(out, in.allowed.String()) {
			t.Fatalf("allowlisted name does not resolve: %s", out)
		}
		if !reaches(a.ID, "allowed.test", 80) {
			t.Fatalf("allowlisted name does not connect: %s", connect(a.ID, "allowed.test", 80))
		}
		if !reaches(a.ID, "www.pkg.test", 80) {
			t.Fatalf("wildcard name does not connect")
		}
		// A name not on the list does not resolve and is never forwarded.
		for len(up.asked) > 0 {
			<-up.asked
		}
		if out := resolves(a.ID, "other.test"); strings.Contains(out, in.other.String()) {
			t.Fatalf("non-listed name resolved: %s", out)
		}
		if up.wasAsked("other.test") {
			t.Error("the resolver forwarded a name not on the allowlist")
		}
		// A direct connect to an address not allowed fails, and at once:
		// the firewall rejects it (ICMP administratively prohibited), so
		// nc gives up by itself with "No route to host" instead of waiting
		// for timeout(1) to kill it (exit 143), as a DROP made a git clone
		// hang until its own timeout. Allowing it at runtime lets it through.
		if out := run(t, d, a.ID, fmt.Sprintf("timeout 5 nc %s 80 </dev/null 2>&1; echo rc=$?", in.other)).Stdout; strings.Contains(out, "hello from") {
			t.Fatal("connect to a non-allowed address succeeded")
		} else if !strings.Contains(out, "No route to host") || strings.Contains(out, "rc=143") {
			t.Errorf("connect to a non-allowed address: got %q, want nc's own failure with No route to host (a reject), not timeout's kill", out)
		}
		st, err := d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Allow: []string{"allowed.test", "*.pkg.test:80", in.other.String()}})
		if err != nil || !st.Enforced {
			t.Fatalf("set egress: %+v, %v", st, err)
		}
		if !reaches(a.ID, in.other.String(), 80) {
			t.Fatal("connect to a newly allowed address failed")
		}

		// Another sandbox: b listens on 8080, reachable from the host, not from a.
		if _, err := d.C.StartProcess(ctx, b.ID, client.StartProcessRequest{Command: "nc -ll -p 8080 -e /bin/echo hello from b"}); err != nil {
			t.Fatalf("start listener in b: %v", err)
		}
		bst, err := d.C.Egress(ctx, b.ID)
		if err != nil || bst.Address == "" {
			t.Fatalf("egress of b: %+v, %v", bst, err)
		}
		var hostSeesB bool
		for i := 0; i < 50 && !hostSeesB; i++ {
			got, _ := testinet.Dial(net.JoinHostPort(bst.Address, "8080"))
			hostSeesB = strings.Contains(got, "hello from b")
			time.Sleep(100 * time.Millisecond)
		}
		if !hostSeesB {
			t.Fatal("the host cannot reach sandbox b's listener; the next check would prove nothing")
		}
		if out := connect(a.ID, bst.Address, 8080); strings.Contains(out, "hello") {
			t.Error("sandbox a reached sandbox b")
		}
		// The daemon's API port on the host, through the gateway address.
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(gateway.String(), fmt.Sprint(apiPort)), 3*time.Second); err != nil {
			t.Fatalf("the host cannot reach the API on the gateway address (%v); the next check would prove nothing", err)
		} else {
			c.Close()
		}
		for _, id := range []string{a.ID, b.ID} {
			out := run(t, d, id, fmt.Sprintf("timeout 5 wget -q -O- http://%s:%d/healthz 2>&1; echo rc=$?", gateway, apiPort)).Stdout
			if strings.Contains(out, "ok") && strings.Contains(out, "true") {
				t.Errorf("sandbox %s reached the daemon API: %s", id, out)
			}
		}
		// The metadata address (owned by the test internet) from allowlist and open.
		for _, id := range []string{a.ID, b.ID} {
			if reaches(id, in.metadata.String(), 80) {
				t.Errorf("sandbox %s reached the metadata address", id)
			}
		}
		// DNS to another resolver is dropped: nothing arrives there.
		run(t, d, a.ID, "timeout 5 nslookup allowed.test "+in.resolver.String()+" >/dev/null 2>&1; true")
		if b, _ := os.ReadFile(in.udpLog); len(b) > 0 {
			t.Errorf("a DNS query reached another resolver: %s", b)
		}

		// Open reaches the test hosts and resolves any name; none has no route.
		if !reaches(b.ID, in.other.String(), 80) || !reaches(b.ID, "other.test", 80) {
			t.Error("the open sandbox does not reach the test internet")
		}
		if out := run(t, d, n.ID, "ip -4 route | grep -v ' dev lo '; ip -4 addr | grep -c inet").Stdout; strings.TrimSpace(out) != "1" {
			// Routes through lo are loopback's own (gVisor lists the local table too).
			t.Errorf("mode none: routes and addresses %q, want loopback only", out)
		}
		if reaches(n.ID, in.allowed.String(), 80) {
			t.Error("the none sandbox connected out")
		}

		// The denied attempts appear in the counters.
		st, err = d.C.Egress(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.DroppedPackets == 0 || st.RefusedQueries == 0 {
			t.Errorf("counters: dropped %d, refused %d; want both > 0", st.DroppedPackets, st.RefusedQueries)
		}
		var sawName bool
		for _, dn := range st.Denied {
			sawName = sawName || (dn.Kind == client.EgressDenialDNS && dn.Name == "other.test")
		}
		if !sawName {
			t.Errorf("denied log %+v lacks the refused name other.test", st.Denied)
		}
		if len(st.Resolved) == 0 {
			t.Errorf("no resolved addresses recorded: %+v", st)
		}

		// Bad input and wrong states.
		_, err = d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Allow: []string{"ok.test", "a.*.com"}})
		wantEgressErr(t, err, http.StatusBadRequest, "egress.allow[1]")
		_, err = d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Mode: "closed"})
		wantEgressErr(t, err, http.StatusBadRequest, "egress.mode")
		_, err = d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Allow: []string{"10.0.0.0/40"}})
		wantEgressErr(t, err, http.StatusBadRequest, "egress.allow[0]")
		_, err = d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Allow: []string{"api.test:70000"}})
		wantEgressErr(t, err, http.StatusBadRequest, "egress.allow[0]")
		_, err = d.C.SetEgress(ctx, "sb-000000000000", client.EgressPolicy{Mode: "open"})
		wantEgressErr(t, err, http.StatusNotFound, "")
		_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Runtime: rt, Egress: &client.EgressPolicy{Allow: []string{"*"}}})
		wantEgressErr(t, err, http.StatusBadRequest, "egress.allow[0]")
		// The bad requests changed nothing.
		if !reaches(a.ID, in.other.String(), 80) {
			t.Error("a rejected policy change altered the rules in force")
		}

		// Rules survive the daemon's death and its restart.
		d.Stop(syscall.SIGKILL)
		if reaches := strings.Contains(runDocker(t, a.ID, in.resolver), "hello"); reaches {
			t.Error("with the daemon dead, sandbox a reached a non-allowed address")
		}
		d.Restart()
		if !reaches(a.ID, "allowed.test", 80) {
			t.Errorf("after restart, the allowlisted name does not connect\n%s", d.Logs())
		}
		if reaches(a.ID, in.resolver.String(), 80) {
			t.Error("after restart, sandbox a reached a non-allowed address")
		}

		// Stopped: 409; running again: the policy is back.
		if _, err := d.C.StopSandbox(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		_, err = d.C.SetEgress(ctx, b.ID, client.EgressPolicy{Mode: client.EgressNone})
		wantEgressErr(t, err, http.StatusConflict, "")

		// Mode changes on a running sandbox: none cuts it off, open restores.
		if _, err := d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Mode: client.EgressNone}); err != nil {
			t.Fatal(err)
		}
		if reaches(a.ID, "allowed.test", 80) || reaches(a.ID, in.allowed.String(), 80) {
			t.Error("after switching to none, the sandbox connected out")
		}
		if _, err := d.C.SetEgress(ctx, a.ID, client.EgressPolicy{Mode: client.EgressOpen}); err != nil {
			t.Fatal(err)
		}
		if !reaches(a.ID, in.resolver.String(), 80) {
			t.Error("after switching to open, the sandbox does not connect out")
		}

		// Destroy removes every rule the sandboxes had.
		for _, id := range []string{a.ID, b.ID, n.ID} {
			if err := d.C.DeleteSandbox(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		after := rules(t, d.EgressNetwork, d.EgressSubnet)
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Errorf("rules after destroy differ from before:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
		}
	})
}

// runDocker connects from the sandbox's box with docker exec, for when the
// daemon is down.
func runDocker(t *testing.T, id string, to netip.Addr) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "docker", "exec", "hotcell-"+id, "/bin/sh", "-c", fmt.Sprintf("timeout 5 nc %s 80 </dev/null 2>&1", to)).CombinedOutput()
	return string(out)
}

func wantEgressErr(t *testing.T, err error, status int, field string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Errorf("got %v, want status %d", err, status)
		return
	}
	if field != "" && !strings.Contains(err.Error(), field) {
		t.Errorf("got %v, want it to name %s", err, field)
	}
}
