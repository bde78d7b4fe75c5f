package agentconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/loglimit"
)

// The agent channel across hosts. One TCP listener serves every sandbox:
// an agent dials it, completes a TLS 1.3 handshake (it pins the daemon's
// certificate), and sends a hello with its sandbox id and that sandbox's
// credential (agentauth). The listener checks the credential in constant
// time and hands the connection to that sandbox's Conn, as if it had come
// in on the run dir's socket; the yamux session and everything above it
// are the same. The daemon still never dials: the listener only accepts.
//
// The listener is reachable from the network, unlike a socket in a
// read-only bind mount, so: nothing is read before the TLS handshake and
// the hello, both under one deadline; at most maxHandshakes connections
// are in them at once, maxHandshakesPerSource of them from one address
// (a sandbox cannot use up the slots its neighbours' agents need); a
// refused connection is closed without saying why (an unknown id and a
// wrong credential look the same); and a session that is up and answers
// is kept against a newcomer with the right credential (Conn.AddListener).
const (
	// maxHandshakes bounds the connections in their TLS handshake and hello.
	maxHandshakes = 256
	// maxHandshakesPerSource bounds those from one source address.
	maxHandshakesPerSource = 8
	// tcpHandshakeTimeout bounds the TLS handshake and the hello together.
	tcpHandshakeTimeout = 5 * time.Second
)

// listenerLog rate-limits what connections to the listener make it log,
// keyed by source address.
var listenerLog = loglimit.New(10, time.Minute)

// Channel is the daemon's TCP listener for agents.
type Channel struct {
	// OnUnknown, when set (before Serve), is asked about an agent whose
	// credential checked out but whose sandbox has no route here: the
	// daemons of a set on one store each take sessions for every sandbox
	// of the store, not only those they registered. It registers the
	// route (Register) and reports true, or reports false to refuse the
	// connection. It runs only after the credential was verified, so a
	// guessed id or credential never reaches it (nor the store behind it),
	// and within the connection's handshake slot and deadline (ctx).
	OnUnknown func(ctx context.Context, id string) bool

	ln        net.Listener
	conf      *tls.Config
	tokenKey  []byte
	certPEM   string
	advertise []string
	log       *slog.Logger
	timeout   time.Duration

	mu      sync.Mutex
	routes  map[string]*route
	sources map[netip.Addr]int // connections in their handshake, by source
	busy    int                // all connections in their handshake
	closed  bool

	handshakes sync.WaitGroup
	done       chan struct{}

	// Refused counts connections closed before they reached a sandbox.
	refused atomic.Int64
}

// NewChannel serves the agent channel on ln (a TCP listener) with the
// daemon's material. advertise is the host:port agents are told to dial,
// or several that they try in turn: the listeners of every daemon of a set
// on one store, which share the material. Call Serve, then Close.
func NewChannel(ln net.Listener, m *agentauth.Material, advertise []string, log *slog.Logger) *Channel {
	return &Channel{
		ln: ln, conf: m.ServerConfig(), tokenKey: m.TokenKey, certPEM: string(m.CertPEM),
		advertise: slices.Clone(advertise), log: log.With("component", "agent-channel"), timeout: tcpHandshakeTimeout,
		routes: map[string]*route{}, sources: map[netip.Addr]int{}, done: make(chan struct{}),
	}
}

// Addr is the listener's address.
func (ch *Channel) Addr() net.Addr { return ch.ln.Addr() }

// Dial returns what sandbox id's agent needs to reach this listener (its
// credential included): a driver delivers it to the box.
func (ch *Channel) Dial(id string) *driver.AgentDial {
	return driver.NewAgentDial(ch.advertise, ch.certPEM, id, agentauth.Token(ch.tokenKey, id))
}

// Refused returns how many connections were closed before they reached a
// sandbox: too many in their handshake, a failed handshake or hello, an
// unknown sandbox or a wrong credential.
func (ch *Channel) Refused() int64 { return ch.refused.Load() }

// Serve accepts connections until Close; it returns nil then.
func (ch *Channel) Serve() error {
	defer close(ch.done)
	for {
		nc, err := ch.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			ch.log.Warn("accept agent connection", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		src := sourceOf(nc)
		if !ch.take(src) {
			ch.refused.Add(1)
			nc.Close()
			listenerLog.Log(context.Background(), ch.log, src.String(), slog.LevelWarn, "agent connection refused: too many in their handshake", "source", src.String())
			continue
		}
		ch.handshakes.Add(1)
		go func() {
			defer ch.handshakes.Done()
			ch.handle(nc, src)
		}()
	}
}

func sourceOf(nc net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// take reserves a handshake slot for a connection from src.
func (ch *Channel) take(src netip.Addr) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed || ch.busy >= maxHandshakes || ch.sources[src] >= maxHandshakesPerSource {
		return false
	}
	ch.busy++
	ch.sources[src]++
	return true
}

func (ch *Channel) give(src netip.Addr) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.busy--
	if ch.sources[src]--; ch.sources[src] <= 0 {
		delete(ch.sources, src)
	}
}

// handle runs one connection's TLS handshake and hello and routes it.
func (ch *Channel) handle(nc net.Conn, src netip.Addr) {
	defer ch.give(src)
	refuse := func(why string, args ...any) {
		ch.refused.Add(1)
		nc.Close()
		listenerLog.Log(context.Background(), ch.log, src.String(), slog.LevelWarn, "agent connection refused: "+why, append([]any{"source", src.String()}, args...)...)
	}
	_ = nc.SetDeadline(time.Now().Add(ch.timeout))
	tc := tls.Server(nc, ch.conf)
	if err := tc.Handshake(); err != nil {
		refuse("TLS handshake failed", "err", err)
		return
	}
	h, err := agentauth.ReadHello(tc)
	if err != nil {
		refuse("bad hello", "err", err)
		return
	}
	// The credential is checked whatever the id, so an unknown id and a
	// wrong credential take the same time and look the same.
	ok := agentauth.Verify(ch.tokenKey, h)
	r := ch.route(h.Sandbox)
	if ok && r == nil && ch.OnUnknown != nil {
		ctx, cancel := context.WithTimeout(context.Background(), ch.timeout)
		adopted := ch.OnUnknown(ctx, h.Sandbox)
		cancel()
		if adopted {
			r = ch.route(h.Sandbox)
		}
		if r != nil {
			ch.log.Info("took the agent of a sandbox this daemon had no route for", "sandbox", h.Sandbox, "source", src.String())
		}
	}
	if !ok || r == nil {
		// h.Sandbox passed the hello's charset check: safe in a log line.
		refuse("unknown sandbox or wrong credential", "sandbox", h.Sandbox)
		return
	}
	if !r.deliver(tc) {
		refuse("the sandbox is not listening", "sandbox", h.Sandbox)
	}
}

func (ch *Channel) route(id string) *route {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.routes[id]
}

// Register returns the listener sandbox id's Conn accepts from (AddListener):
// the connections whose hello proved they are id's. Closing it removes
// the route; a later Register replaces an earlier one.
func (ch *Channel) Register(id string) (net.Listener, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return nil, fmt.Errorf("agent channel listener is closed")
	}
	r := &route{ch: ch, id: id, conns: make(chan net.Conn, 1), closed: make(chan struct{})}
	if old := ch.routes[id]; old != nil {
		old.shut()
	}
	ch.routes[id] = r
	return r, nil
}

// Close stops the listener, waits for the handshakes in progress and
// closes every route.
func (ch *Channel) Close() error {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return nil
	}
	ch.closed = true
	ch.mu.Unlock()
	err := ch.ln.Close()
	<-ch.done
	ch.handshakes.Wait()
	ch.mu.Lock()
	for id, r := range ch.routes {
		r.shut()
		delete(ch.routes, id)
	}
	ch.mu.Unlock()
	return err
}

// route is one sandbox's end of the Channel: a net.Listener of the
// connections that proved they are its agent's.
type route struct {
	ch     *Channel
	id     string
	conns  chan net.Conn
	mu     sync.Mutex // orders deliver against shut
	shutd  bool
	closed chan struct{}
}

// deliver hands nc to the sandbox's accept loop. One may wait at a time
// (the Conn takes one handshake at a time too): another is refused.
func (r *route) deliver(nc net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shutd {
		return false
	}
	select {
	case r.conns <- nc:
		return true
	default:
		return false
	}
}

func (r *route) Accept() (net.Conn, error) {
	select {
	case nc := <-r.conns:
		return nc, nil
	case <-r.closed:
		return nil, net.ErrClosed
	}
}

func (r *route) shut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shutd {
		return
	}
	r.shutd = true
	close(r.closed)
	select {
	case nc := <-r.conns:
		nc.Close()
	default:
	}
}

func (r *route) Close() error {
	r.ch.mu.Lock()
	if r.ch.routes[r.id] == r {
		delete(r.ch.routes, r.id)
	}
	r.ch.mu.Unlock()
	r.shut()
	return nil
}

func (r *route) Addr() net.Addr { return r.ch.ln.Addr() }
