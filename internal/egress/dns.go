package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Decision is what the resolver should do with one query.
type Decision struct {
	// Forward sends the query upstream; otherwise it is REFUSED.
	Forward bool
	// Learn lists the entries whose ports the answered addresses get;
	// empty for an open sandbox, whose answers need no rules.
	Learn []Entry
	// Sandbox is the asking sandbox's id; empty for an unknown address.
	Sandbox string
	// Limited says the sandbox asked faster than its query rate allows.
	Limited bool
}

// policySource is what the resolver asks about each query: the controller.
type policySource interface {
	decide(src netip.Addr, name string) Decision
	// learn allows addrs (with their TTL) for the sandbox before the answer
	// is sent, so that the connection that follows it is let through; it
	// returns those it allowed (a sandbox's learned addresses are capped).
	learn(ctx context.Context, id, name string, entries []Entry, addrs []learnedAddr) map[netip.Addr]bool
	refused(id, name string)
	// logLine says whether a log line caused by the sandbox may be
	// written, and how many were held back since the last one written.
	logLine(id string) (ok bool, held int)
	// answered counts an answer forwarded to the sandbox.
	answered(id string)
}

type learnedAddr struct {
	addr netip.Addr
	ttl  time.Duration
}

// resolver is the DNS server on the egress network's gateway: the only
// resolver a sandbox has. It knows the asking sandbox by the query's source
// address.
type resolver struct {
	src       policySource
	upstreams []string
	minTTL    time.Duration
	log       *slog.Logger
	// blocked says whether the firewall drops an address in every mode.
	blocked func(netip.Addr) bool
	// strangers bounds the log lines of queries from no sandbox's address.
	strangers lineLimiter

	mu      sync.Mutex
	servers []*dns.Server
	pc      net.PacketConn // bound, not yet served
	ln      net.Listener
}

// maxLearnTTL bounds how long one answer opens an address, whatever TTL
// the upstream claims.
const maxLearnTTL = time.Hour

// bind takes the resolver's UDP and TCP sockets on addr without answering
// on them yet: the controller binds first, so that an address another
// daemon holds is found before anything else is changed.
func (r *resolver) bind(addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return fmt.Errorf("listen for dns on %s/udp: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("listen for dns on %s/tcp: %w", addr, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pc, r.ln = pc, ln
	return nil
}

// serve answers on the sockets bind took.
func (r *resolver) serve() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pc == nil || r.ln == nil {
		return errors.New("dns: serve before bind")
	}
	for _, srv := range []*dns.Server{
		{PacketConn: r.pc, Net: "udp", Handler: r, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second},
		{Listener: r.ln, Net: "tcp", Handler: r, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second},
	} {
		started := make(chan error, 1)
		srv.NotifyStartedFunc = func() { started <- nil }
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				select {
				case started <- err:
				default:
					r.log.Error("dns server stopped", "net", srv.Net, "err", err)
				}
			}
		}()
		if err := <-started; err != nil {
			r.shutdownLocked()
			return fmt.Errorf("serve dns over %s: %w", srv.Net, err)
		}
		r.servers = append(r.servers, srv)
	}
	r.pc, r.ln = nil, nil // the servers own them now
	return nil
}

func (r *resolver) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shutdownLocked()
}

func (r *resolver) shutdownLocked() {
	for _, s := range r.servers {
		_ = s.Shutdown()
	}
	r.servers = nil
	if r.pc != nil {
		r.pc.Close()
		r.ln.Close()
		r.pc, r.ln = nil, nil
	}
}

// ServeDNS answers one query.
func (r *resolver) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	resp := r.answer(w.RemoteAddr(), w.RemoteAddr().Network(), q)
	_ = w.WriteMsg(resp)
}

func (r *resolver) answer(remote net.Addr, netw string, q *dns.Msg) *dns.Msg {
	refuse := func() *dns.Msg {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeRefused)
		return m
	}
	if q.Opcode != dns.OpcodeQuery || len(q.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeNotImplemented)
		return m
	}
	src := addrOf(remote)
	name := NormalizeName(q.Question[0].Name)
	qtype := q.Question[0].Qtype
	d := r.src.decide(src, name)
	why := "not allowed"
	switch {
	case d.Limited:
		why = "query rate"
	case d.Forward && len(d.Learn) > 0 && !allowlistQtypes[qtype]:
		// TXT and the like to an allowed name carry data both ways; an
		// allowlist sandbox needs only addresses.
		d.Forward, why = false, "query type"
	}
	if !d.Forward {
		if d.Sandbox != "" {
			r.src.refused(d.Sandbox, name)
		}
		r.logf(slog.LevelInfo, d.Sandbox, "dns query refused", "source", src, "name", clip(name), "type", dns.TypeToString[qtype], "reason", why)
		return refuse()
	}
	if qtype == dns.TypeAAAA && len(d.Learn) > 0 {
		// The egress network has no IPv6: an empty answer makes clients
		// use the A records, which the firewall learns.
		m := new(dns.Msg)
		m.SetReply(q)
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.forward(ctx, netw, q)
	if err != nil {
		r.logf(slog.LevelWarn, d.Sandbox, "dns upstream failed", "name", clip(name), "err", err)
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		return m
	}
	if len(d.Learn) > 0 {
		var addrs []learnedAddr
		var keep []dns.RR
		for _, rr := range resp.Answer {
			switch rr := rr.(type) {
			case *dns.A:
				a, ok := netip.AddrFromSlice(rr.A.To4())
				if !ok || r.blocked(a) {
					// An allowed name that points into the host's
					// networks (DNS rebinding) is neither learned nor
					// passed on.
					continue
				}
				ttl := max(time.Duration(rr.Hdr.Ttl)*time.Second, r.minTTL)
				addrs = append(addrs, learnedAddr{addr: a, ttl: min(ttl, maxLearnTTL)})
			case *dns.AAAA:
				continue // see above: no IPv6 on the network
			}
			keep = append(keep, rr)
		}
		resp.Answer = keep
		if len(addrs) > 0 {
			// Only what was allowed is answered: an address beyond the
			// sandbox's cap would only time out.
			allowed := r.src.learn(ctx, d.Sandbox, name, d.Learn, addrs)
			resp.Answer = slices.DeleteFunc(resp.Answer, func(rr dns.RR) bool {
				a, ok := rr.(*dns.A)
				if !ok {
					return false
				}
				ip, _ := netip.AddrFromSlice(a.A.To4())
				return !allowed[ip]
			})
		}
	}
	if d.Sandbox != "" {
		r.src.answered(d.Sandbox)
	}
	resp.Id = q.Id
	return resp
}

// allowlistQtypes are the query types an allowlist sandbox may ask: what
// finding an address needs.
var allowlistQtypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeHTTPS: true, dns.TypeSVCB: true,
}

// logf writes a log line a sandbox caused (id; "" for an address of no
// sandbox), within that sandbox's share of the log.
func (r *resolver) logf(level slog.Level, id, msg string, args ...any) {
	var ok bool
	var held int
	if id == "" {
		ok, held = r.strangers.allow(time.Now())
	} else {
		ok, held = r.src.logLine(id)
	}
	if !ok {
		return
	}
	if held > 0 {
		args = append(args, "heldBack", held)
	}
	r.log.Log(context.Background(), level, msg, append([]any{"sandbox", id}, args...)...)
}

// forward asks each upstream in turn; a truncated UDP answer is retried
// over TCP so that big answers are complete.
func (r *resolver) forward(ctx context.Context, netw string, q *dns.Msg) (*dns.Msg, error) {
	var errs []error
	for _, up := range r.upstreams {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		if netw == "tcp" {
			c.Net = "tcp"
		}
		out := q.Copy()
		resp, _, err := c.ExchangeContext(ctx, out, up)
		if err == nil && resp.Truncated && c.Net == "udp" {
			c.Net = "tcp"
			resp, _, err = c.ExchangeContext(ctx, out, up)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", up, err))
			continue
		}
		return resp, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no upstream resolver configured")
	}
	return nil, errors.Join(errs...)
}

func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
