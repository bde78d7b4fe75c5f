package egress

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/hotcell/hotcell/internal/wire"
)

// fakeUpstream is the resolver's upstream: a DNS server on loopback that
// knows a few names and counts what it was asked.
type fakeUpstream struct {
	addr string
	mu   sync.Mutex
	asks map[string]int // "name TYPE" → queries
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &fakeUpstream{addr: pc.LocalAddr().String(), asks: map[string]int{}}
	records := map[string][]string{
		"pkg.test.":         {"pkg.test. 5 IN A 203.0.113.10"},
		"www.example.test.": {"www.example.test. 600 IN A 203.0.113.33", "www.example.test. 600 IN AAAA 2001:db8::3"},
		"other.test.":       {"other.test. 60 IN A 203.0.113.99"},
		// An allowed name that points into the host's networks.
		"rebind.pkg.test.": {"rebind.pkg.test. 60 IN A 10.1.2.3", "rebind.pkg.test. 60 IN A 100.100.100.200", "rebind.pkg.test. 60 IN A 203.0.113.44"},
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		qq := q.Question[0]
		u.mu.Lock()
		u.asks[strings.TrimSuffix(qq.Name, ".")+" "+dns.TypeToString[qq.Qtype]]++
		u.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(q)
		rrs, ok := records[strings.ToLower(qq.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, s := range rrs {
			rr, err := dns.NewRR(s)
			if err != nil {
				panic(err)
			}
			if rr.Header().Rrtype == qq.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

func (u *fakeUpstream) asked(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.asks[key]
}

// serveResolver serves the controller's resolver on a loopback UDP port.
func serveResolver(t *testing.T, c *Controller) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: c.dns}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// ask sends one query from source (a loopback address standing in for a
// sandbox's address on the egress network).
func ask(t *testing.T, server, source, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: 10 * time.Second, Dialer: &net.Dialer{
		LocalAddr: &net.UDPAddr{IP: net.ParseIP(source)},
	}}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := c.ExchangeContext(t.Context(), q, server)
	if err != nil {
		t.Fatalf("ask %s %s from %s: %v", name, dns.TypeToString[qtype], source, err)
	}
	if resp.Id != q.Id {
		t.Errorf("answer id %d, want the query's %d", resp.Id, q.Id)
	}
	return resp
}

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		default:
			out = append(out, rr.String())
		}
	}
	return out
}

// hasRule reports whether a set of learned addresses lets dst through.
func hasRule(ipt *fakeIPT, dst string) bool {
	return len(learnedMembers(ipt, dst)) > 0
}

// learnedMembers are the members of the learned sets that allow dst.
func learnedMembers(ipt *fakeIPT, dst string) []string {
	ipt.mu.Lock()
	defer ipt.mu.Unlock()
	var out []string
	for name, ms := range ipt.sets {
		if !strings.HasSuffix(name, "-l") && !strings.HasPrefix(name, "HCS-") {
			continue
		}
		for _, m := range ms {
			if m == dst || strings.HasSuffix(m, ","+dst) {
				out = append(out, name+" "+m)
			}
		}
	}
	return out
}

// TestResolver drives ServeDNS over real UDP on loopback, with the real
// controller's decisions and a fake firewall and upstream. Sandbox A
// (127.0.0.1) has an allowlist, B (127.0.0.2) is open, 127.0.0.3 is no
// sandbox.
func TestResolver(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	c, ipt := testController(t, 0)
	c.dns.upstreams = []string{up.addr}
	n := c.drv.(*fakeNet)
	n.addrs[idA] = netip.MustParseAddr("127.0.0.1")
	n.addrs[idB] = netip.MustParseAddr("127.0.0.2")
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test", "*.example.test:443", "rebind.pkg.test"}})
	mustApply(t, c, idB, wire.EgressPolicy{Mode: wire.EgressOpen})
	srv := serveResolver(t, c)
	const a, b, stranger = "127.0.0.1", "127.0.0.2", "127.0.0.3"

	t.Run("allowlisted name is answered and its address allowed first", func(t *testing.T) {
		resp := ask(t, srv, a, "PKG.test", dns.TypeA)
		if resp.Rcode != dns.RcodeSuccess || !slices.Equal(answers(resp), []string{"203.0.113.10"}) {
			t.Fatalf("got %s %v, want 203.0.113.10", dns.RcodeToString[resp.Rcode], answers(resp))
		}
		// The rule is in before the answer is out: no wait here.
		if !hasRule(ipt, "203.0.113.10") {
			t.Error("the answered address is not allowed in the sandbox's chain")
		}
		st := c.Status(idA, wire.EgressPolicy{})
		i := slices.IndexFunc(st.Resolved, func(r wire.EgressResolved) bool { return r.Address == "203.0.113.10" })
		if i < 0 || st.Resolved[i].Name != "pkg.test" {
			t.Fatalf("resolved %+v, want pkg.test → 203.0.113.10", st.Resolved)
		}
		// The upstream's 5s TTL is raised to the minimum of 30s.
		if left := time.Until(st.Resolved[i].ExpiresAt); left < 20*time.Second {
			t.Errorf("allowed for %v more, want about the 30s minimum", left)
		}
	})
	t.Run("wildcard name with a port", func(t *testing.T) {
		resp := ask(t, srv, a, "www.example.test", dns.TypeA)
		if !slices.Equal(answers(resp), []string{"203.0.113.33"}) {
			t.Fatalf("got %v, want 203.0.113.33", answers(resp))
		}
		got := learnedMembers(ipt, "203.0.113.33")
		want := []string{"HCN-2f27e8f4-l 127.0.0.1,tcp:443,203.0.113.33", "HCN-2f27e8f4-l 127.0.0.1,udp:443,203.0.113.33"}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("got set members %q, want %q (port 443 only)", got, want)
		}
	})
	t.Run("an allowed name's private and metadata addresses are neither learned nor answered", func(t *testing.T) {
		resp := ask(t, srv, a, "rebind.pkg.test", dns.TypeA)
		if !slices.Equal(answers(resp), []string{"203.0.113.44"}) {
			t.Errorf("got %v, want only the public 203.0.113.44", answers(resp))
		}
		if hasRule(ipt, "10.1.2.3") || hasRule(ipt, "100.100.100.200") {
			t.Error("a blocked address was learned")
		}
		if !hasRule(ipt, "203.0.113.44") {
			t.Error("the public address was not learned")
		}
	})
	t.Run("AAAA of an allowlisted name is empty and not forwarded", func(t *testing.T) {
		resp := ask(t, srv, a, "www.example.test", dns.TypeAAAA)
		if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 0 {
			t.Errorf("got %s %v, want an empty NOERROR", dns.RcodeToString[resp.Rcode], answers(resp))
		}
		if n := up.asked("www.example.test AAAA"); n != 0 {
			t.Errorf("the upstream was asked %d times", n)
		}
	})
	t.Run("other names are refused and not forwarded", func(t *testing.T) {
		for _, name := range []string{"other.test", "example.test", "pkg.test.evil.test", "xpkg.test"} {
			resp := ask(t, srv, a, name, dns.TypeA)
			if resp.Rcode != dns.RcodeRefused || len(resp.Answer) != 0 {
				t.Errorf("%s: got %s %v, want REFUSED", name, dns.RcodeToString[resp.Rcode], answers(resp))
			}
			if n := up.asked(name + " A"); n != 0 {
				t.Errorf("%s: the upstream was asked %d times", name, n)
			}
		}
		if hasRule(ipt, "203.0.113.99") {
			t.Error("a refused name's address is allowed")
		}
		st := c.Status(idA, wire.EgressPolicy{})
		if st.RefusedQueries != 4 || !slices.ContainsFunc(st.Denied, func(d wire.EgressDenial) bool { return d.Kind == wire.DenialDNS && d.Name == "other.test" }) {
			t.Errorf("refused %d, denied %+v; want 4 and a DNS denial of other.test", st.RefusedQueries, st.Denied)
		}
	})
	t.Run("open sandbox: forwarded, nothing learned", func(t *testing.T) {
		resp := ask(t, srv, b, "other.test", dns.TypeA)
		if !slices.Equal(answers(resp), []string{"203.0.113.99"}) {
			t.Fatalf("got %v, want 203.0.113.99", answers(resp))
		}
		resp = ask(t, srv, b, "www.example.test", dns.TypeAAAA)
		if !slices.Equal(answers(resp), []string{"2001:db8::3"}) {
			t.Errorf("AAAA: got %v, want 2001:db8::3", answers(resp))
		}
		if hasRule(ipt, "203.0.113.99") {
			t.Error("an open sandbox's answer became a rule")
		}
	})
	t.Run("unknown address is refused", func(t *testing.T) {
		resp := ask(t, srv, stranger, "pkg.test", dns.TypeA)
		if resp.Rcode != dns.RcodeRefused {
			t.Errorf("got %s, want REFUSED", dns.RcodeToString[resp.Rcode])
		}
	})
	t.Run("released sandbox is refused", func(t *testing.T) {
		if err := c.Release(t.Context(), idB); err != nil {
			t.Fatal(err)
		}
		before := up.asked("other.test A")
		resp := ask(t, srv, b, "other.test", dns.TypeA)
		if resp.Rcode != dns.RcodeRefused || up.asked("other.test A") != before {
			t.Errorf("got %s, want REFUSED and no upstream query", dns.RcodeToString[resp.Rcode])
		}
	})
}

func TestResolverFailures(t *testing.T) {
	t.Parallel()
	c, _ := testController(t, 0)
	// A loopback port nothing listens on: the upstream is down.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	c.dns.upstreams = []string{dead}
	c.drv.(*fakeNet).addrs[idA] = netip.MustParseAddr("127.0.0.1")
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
	srv := serveResolver(t, c)

	if resp := ask(t, srv, "127.0.0.1", "pkg.test", dns.TypeA); resp.Rcode != dns.RcodeServerFailure {
		t.Errorf("upstream down: got %s, want SERVFAIL", dns.RcodeToString[resp.Rcode])
	}

	// Two questions (the DNS library's server turns them away first with
	// FORMERR; the resolver's own check says NOTIMP), and a non-query
	// opcode: never forwarded, never answered.
	cl := &dns.Client{Net: "udp", Timeout: 10 * time.Second}
	two := new(dns.Msg)
	two.SetQuestion("pkg.test.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "other.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	notify := new(dns.Msg)
	notify.SetNotify("pkg.test.")
	for name, q := range map[string]*dns.Msg{"two questions": two, "notify": notify} {
		resp, _, err := cl.ExchangeContext(t.Context(), q, srv)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if (resp.Rcode != dns.RcodeNotImplemented && resp.Rcode != dns.RcodeFormatError) || len(resp.Answer) != 0 {
			t.Errorf("%s: got %s %v, want NOTIMP or FORMERR", name, dns.RcodeToString[resp.Rcode], answers(resp))
		}
	}
}

// countingHandler counts the log records written.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int // message → records
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// TestResolverLimits: an allowlist sandbox asks only for addresses, a
// flood of queries is refused past the sandbox's rate and costs a bounded
// number of log lines, and learned addresses stop at the sandbox's cap.
func TestResolverLimits(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	c, ipt := testController(t, 0)
	logs := &countingHandler{n: map[string]int{}}
	c.dns.log = slog.New(logs)
	c.log = slog.New(logs)
	c.dns.upstreams = []string{up.addr}
	c.cfg.MaxLearned = 2
	n := c.drv.(*fakeNet)
	n.addrs[idA] = netip.MustParseAddr("127.0.0.1")
	n.addrs[idB] = netip.MustParseAddr("127.0.0.2")
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test", "*.example.test:443", "rebind.pkg.test"}})
	mustApply(t, c, idB, wire.EgressPolicy{Mode: wire.EgressOpen})
	srv := serveResolver(t, c)

	t.Run("allowlist: only address queries", func(t *testing.T) {
		for _, qt := range []uint16{dns.TypeTXT, dns.TypeMX, dns.TypeNS, dns.TypeANY, dns.TypeNULL} {
			resp := ask(t, srv, "127.0.0.1", "pkg.test", qt)
			if resp.Rcode != dns.RcodeRefused {
				t.Errorf("%s: got %s, want REFUSED", dns.TypeToString[qt], dns.RcodeToString[resp.Rcode])
			}
			if n := up.asked("pkg.test " + dns.TypeToString[qt]); n != 0 {
				t.Errorf("%s: the upstream was asked %d times", dns.TypeToString[qt], n)
			}
		}
		for _, qt := range []uint16{dns.TypeCNAME, dns.TypeHTTPS, dns.TypeSVCB} {
			if resp := ask(t, srv, "127.0.0.1", "pkg.test", qt); resp.Rcode == dns.RcodeRefused {
				t.Errorf("%s: refused", dns.TypeToString[qt])
			}
		}
		// An open sandbox asks what it likes.
		ask(t, srv, "127.0.0.2", "pkg.test", dns.TypeTXT)
		if n := up.asked("pkg.test TXT"); n != 1 {
			t.Errorf("open sandbox's TXT: the upstream was asked %d times, want 1", n)
		}
	})
	t.Run("learned addresses stop at the cap", func(t *testing.T) {
		ask(t, srv, "127.0.0.1", "pkg.test", dns.TypeA)                // 1
		ask(t, srv, "127.0.0.1", "www.example.test", dns.TypeA)        // 2
		resp := ask(t, srv, "127.0.0.1", "rebind.pkg.test", dns.TypeA) // over
		if len(resp.Answer) != 0 || hasRule(ipt, "203.0.113.44") {
			t.Errorf("past the cap: answered %v, learned %v; want neither", answers(resp), hasRule(ipt, "203.0.113.44"))
		}
		if st := c.Status(idA, wire.EgressPolicy{}); len(st.Resolved) != 2 {
			t.Errorf("resolved %+v, want 2 entries", st.Resolved)
		}
	})
	t.Run("a flood is refused past the rate and logged in a few lines", func(t *testing.T) {
		c.mu.Lock() // decide reads them under it
		c.cfg.QueryRate, c.cfg.QueryBurst = 1, 10
		c.mu.Unlock()
		before := up.asked("pkg.test A")
		refused := 0
		for range 300 {
			if ask(t, srv, "127.0.0.2", "pkg.test", dns.TypeA).Rcode == dns.RcodeRefused {
				refused++
			}
		}
		if forwarded := up.asked("pkg.test A") - before; forwarded > 20 || refused < 280 {
			t.Errorf("forwarded %d, refused %d of 300; want most refused", forwarded, refused)
		}
		for range 300 {
			ask(t, srv, "127.0.0.1", "not-listed.test", dns.TypeA)
		}
		if n := logs.count("dns query refused"); n > 2*sandboxLogLines+2 {
			t.Errorf("%d log lines for 600 refused queries, want at most %d", n, 2*sandboxLogLines+2)
		}
	})
}
