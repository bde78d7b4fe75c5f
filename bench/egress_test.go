package bench

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testinet"
)

// BenchmarkEgressFirstConnect: the first connection to an allowlisted name
// (a DNS query through hotcell's resolver, which adds the answer to the
// sandbox's firewall rules before answering, then a TCP connect) against
// the same connection from an open sandbox, whose resolver only forwards.
// Every sample uses a new name, so every one is a first connection. The
// "internet" is a network namespace the benchmark makes (198.18.X.10:80);
// the DNS upstream runs in the benchmark on loopback.
func BenchmarkEgressFirstConnect(b *testing.B) {
	testenv.RequireDocker(b)
	testenv.RequireRoot(b, "a network namespace and iptables")
	host := benchInternet(b)
	upstream := benchUpstream(b, host)
	d := testdaemon.StartWith(b, testdaemon.Options{Args: []string{"--egress-dns-upstream", upstream}})
	b.Cleanup(d.Close)
	mk := func(p client.EgressPolicy) client.Sandbox {
		sb, err := d.C.CreateSandbox(b.Context(), client.CreateSandboxRequest{Egress: &p, Labels: map[string]string{"bench": "egress"}})
		if err != nil {
			b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
		}
		b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
		return sb
	}
	allow := mk(client.EgressPolicy{Allow: []string{"*.bench.test:80"}})
	open := mk(client.EgressPolicy{Mode: client.EgressOpen})

	const samples = 30
	measure := func(id string, n int) []time.Duration {
		var out []time.Duration
		for i := range n {
			name := fmt.Sprintf("n%d-%s.bench.test", i, randName())
			start := time.Now()
			res, err := d.C.Exec(b.Context(), id, client.ExecRequest{Command: "timeout 5 nc " + name + " 80 </dev/null"})
			el := time.Since(start)
			if err != nil || !strings.Contains(res.Stdout, "hello") {
				b.Fatalf("connect to %s: %v %+v", name, err, res)
			}
			out = append(out, el)
		}
		return out
	}
	b.ResetTimer()
	var hc, base []time.Duration
	for range b.N {
		// Interleaved halves, so drift on the host hits both alike.
		for range 2 {
			base = append(base, measure(open.ID, samples/2)...)
			hc = append(hc, measure(allow.ID, samples/2)...)
		}
	}
	b.StopTimer()
	h, o := Summarize(hc), Summarize(base)
	tb := Table{Title: "first connection to a new name: exec of `nc NAME 80` (ms)", Head: []string{"mode", "n", "p50", "p95", "min", "max", "p50 vs open"}}
	tb.Row("allowlist (DNS + rule update + connect)", itoa(h.N), Ms(h.P50), Ms(h.P95), Ms(h.Min), Ms(h.Max), fx(Ratio(h.P50, o.P50)))
	tb.Row("open (DNS forwarded + connect)", itoa(o.N), Ms(o.P50), Ms(o.P95), Ms(o.Min), Ms(o.Max), fx(1))
	tb.Note("p50 allowlist - open = %s ms: the cost of learning the address into the sandbox's rules (an iptables insert),", Ms(h.P50-o.P50))
	tb.Note("less what allowlist saves: it answers AAAA itself (the egress network has no IPv6) where open forwards it too")
	report(b, tb)
}

func randName() string {
	var x [4]byte
	_, _ = rand.Read(x[:])
	return hex.EncodeToString(x[:])
}

// benchInternet makes a network namespace with 198.18.X.10 behind a veth
// and a TCP server there answering "hello from ..."; it returns that
// address.
func benchInternet(b *testing.B) netip.Addr {
	b.Helper()
	var x [1]byte
	_, _ = rand.Read(x[:])
	pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, x[0], 0}), 24)
	target := netip.AddrFrom4([4]byte{198, 18, x[0], 10})
	n := testinet.New(b, testinet.Config{NS: "hcbench", HostVeth: "hcb", PeerVeth: "hcq", Prefix: pfx, Addrs: []netip.Addr{target}})
	n.Serve(b, netip.AddrPortFrom(target, 80))
	return target
}

// benchUpstream answers every *.bench.test with host, TTL 60, on loopback.
func benchUpstream(b *testing.B, host netip.Addr) string {
	b.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if strings.HasSuffix(strings.ToLower(q.Question[0].Name), ".bench.test.") && q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: host.AsSlice()})
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}
