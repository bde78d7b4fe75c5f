package agentconn

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hotcell/hotcell/internal/agent"
	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/agentconn/agentconntest"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/wire"
)

// newChannel serves a Channel on loopback with fresh material.
func newChannel(t *testing.T, timeout ...time.Duration) *Channel {
	t.Helper()
	m, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "agent-channel"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := NewChannel(ln, m, []string{ln.Addr().String()}, slog.New(slog.DiscardHandler))
	if len(timeout) > 0 {
		ch.timeout = timeout[0]
	}
	served := make(chan error, 1)
	go func() { served <- ch.Serve() }()
	t.Cleanup(func() {
		ch.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ch
}

// routed returns a Conn for id that accepts from ch's route.
func routed(t *testing.T, ch *Channel, id string) *Conn {
	t.Helper()
	c := New(id, slog.New(slog.DiscardHandler))
	ln, err := ch.Register(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddListener(ln, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialAgent dials ch as the agent does with d, and serves a healthy agent
// answering pid on the session. It returns the agent's connection.
func dialAgent(t *testing.T, d driver.AgentDial, pid int) net.Conn {
	t.Helper()
	nc := dialTLS(t, d)
	agentconntest.Serve(t, nc, agentconntest.Healthy(wire.AgentHealth{Version: "test", PID: pid}, http.NotFoundHandler()))
	return nc
}

// dialTLS dials ch as the agent does with d.
func dialTLS(t *testing.T, d driver.AgentDial) net.Conn {
	t.Helper()
	dial, err := agent.TLSDialer(d)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// refused reports whether the daemon closed nc without a byte.
func refused(t *testing.T, nc net.Conn) bool {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := nc.Read(make([]byte, 1))
	return n == 0 && err == io.EOF
}

// rawHello dials ch and sends h without serving anything.
func rawHello(t *testing.T, ch *Channel, d driver.AgentDial, h agentauth.Hello) net.Conn {
	t.Helper()
	line, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := agentauth.ClientConfig([]byte(d.CertPEM))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := (&tlsDialer{conf}).dial(ch.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(line); err != nil {
		t.Fatal(err)
	}
	return nc
}

func waitPID(t *testing.T, c *Conn, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for c.Health().PID != pid {
		if ctx.Err() != nil {
			t.Fatalf("agent pid %d never connected (health %+v)", pid, c.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChannelRoutesByCredential: an agent with its sandbox's dial reaches
// that sandbox's Conn; a neighbour's id with its own credential, a forged
// credential and an unknown id are refused and connect nobody.
func TestChannelRoutesByCredential(t *testing.T) {
	t.Parallel()
	ch := newChannel(t)
	a, b := routed(t, ch, "sb-a"), routed(t, ch, "sb-b")
	da := *ch.Dial("sb-a")
	dialAgent(t, da, 11)
	waitPID(t, a, 11)

	for name, h := range map[string]agentauth.Hello{
		"neighbour's id, own credential": {Sandbox: "sb-b", Token: da.Token},
		"forged credential":              {Sandbox: "sb-b", Token: agentauth.Token([]byte("not the daemon's key, not at all"), "sb-b")},
		"unknown id":                     {Sandbox: "sb-gone", Token: agentauth.Token(ch.tokenKey, "sb-gone")},
	} {
		if !refused(t, rawHello(t, ch, da, h)) {
			t.Errorf("%s: not refused", name)
		}
	}
	if b.Connected() {
		t.Error("the neighbour got a session")
	}
	if got := a.Health().PID; got != 11 {
		t.Errorf("sb-a's agent: pid %d, want 11", got)
	}
}

// TestChannelKeepsLiveSession: a second agent with the right credential
// does not take a session that answers; once that session is gone, the
// next one is adopted (an agent that restarted comes back).
func TestChannelKeepsLiveSession(t *testing.T) {
	t.Parallel()
	ch := newChannel(t)
	c := routed(t, ch, "sb-a")
	d := *ch.Dial("sb-a")
	first := dialAgent(t, d, 1)
	waitPID(t, c, 1)

	if !refused(t, rawHello(t, ch, d, agentauth.Hello{Sandbox: "sb-a", Token: d.Token})) {
		t.Error("a second session with the right credential was not refused")
	}
	if got := c.Health().PID; got != 1 {
		t.Errorf("after the second session: pid %d, want 1", got)
	}
	first.Close()
	dialAgent(t, d, 2)
	waitPID(t, c, 2)
}

// leavingAgent serves an agent whose health check says leaving when told
// to, with no keep-alive, GET /pid answering its pid and GET /slow answering "done" once
// release is closed. It returns the agent's session.
func leavingAgent(t *testing.T, d driver.AgentDial, pid int, leaving *atomic.Bool, release <-chan struct{}) *yamux.Session {
	t.Helper()
	nc := dialTLS(t, d)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.AgentHealth{Version: "test", PID: pid, Leaving: leaving.Load()})
	})
	mux.HandleFunc("GET /pid", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, pid) })
	mux.HandleFunc("GET /slow", slowUntil(release))
	// Every stream ends after its answer, as on a real agent's session
	// that is leaving: no idle stream keeps a drained session open.
	return agentconntest.Serve(t, nc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		mux.ServeHTTP(w, r)
	}))
}

// slowUntil answers its headers at once and "done" once release is
// closed: a call that stays in flight as long as a test wants.
func slowUntil(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
			fmt.Fprint(w, "done")
		case <-r.Context().Done():
		}
	}
}

// get sends GET path to c's agent and returns the answer's body.
func get(c *Conn, path string) (string, error) { return send(c, http.MethodGet, path, nil) }

// post sends POST path with a small body, which the transport cannot
// send again, to c's agent and returns the answer's body.
func post(c *Conn, path string) (string, error) {
	return send(c, http.MethodPost, path, strings.NewReader(`{"x":1}`))
}

func send(c *Conn, method, path string, body io.Reader) (string, error) {
	req, _ := http.NewRequest(method, path, body)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// answer is what a call in a goroutine of a test got.
type answer struct {
	body string
	err  error
}

func closedWithin(s *yamux.Session, d time.Duration) bool {
	select {
	case <-s.CloseChan():
		return true
	case <-time.After(d):
		return false
	}
}

// TestChannelDrainsLeavingSession: a newcomer over TCP replaces a session
// that answers only when that session's agent says it is leaving (an
// agent leaving its socket fallback). The call in flight on the old
// session finishes there, new calls take the new one, and the daemon
// closes the old one once it is empty. One session drains at a time: a
// third session's arrival closes the first if it still drains.
func TestChannelDrainsLeavingSession(t *testing.T) {
	t.Parallel()
	ch := newChannel(t)
	c := routed(t, ch, "sb-a")
	d := *ch.Dial("sb-a")
	var leaving1, leaving2, leaving3 atomic.Bool
	release1, release2 := make(chan struct{}), make(chan struct{})
	s1 := leavingAgent(t, d, 1, &leaving1, release1)
	waitPID(t, c, 1)

	slow := func() chan answer {
		ch := make(chan answer, 1)
		go func() {
			b, err := get(c, "/slow")
			ch <- answer{b, err}
		}()
		return ch
	}
	inFlight := slow()
	for s1.NumStreams() == 0 {
		time.Sleep(5 * time.Millisecond)
	}

	// Not leaving: the newcomer is refused, as in TestChannelKeepsLiveSession.
	if !refused(t, rawHello(t, ch, d, agentauth.Hello{Sandbox: "sb-a", Token: d.Token})) {
		t.Fatal("a newcomer took a session whose agent is not leaving")
	}

	leaving1.Store(true)
	s2 := leavingAgent(t, d, 2, &leaving2, release2)
	waitPID(t, c, 2)
	if got, err := get(c, "/pid"); err != nil || got != "2" {
		t.Errorf("a call after the move: %q, %v; want the new session's pid 2", got, err)
	}
	if closedWithin(s1, 300*time.Millisecond) {
		t.Fatal("the old session was closed with a call in flight on it")
	}
	close(release1)
	if a := <-inFlight; a.err != nil || a.body != "done" {
		t.Errorf("the call in flight across the move: %q, %v", a.body, a.err)
	}
	if !closedWithin(s1, 5*time.Second) {
		t.Error("the old session was not closed once empty")
	}

	// A call held on the second; it leaves too, and a third comes while
	// the second still drains: the second goes on draining, and a fourth
	// closes it at once.
	held := slow()
	for s2.NumStreams() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	leaving2.Store(true)
	s3 := leavingAgent(t, d, 3, &leaving3, nil)
	waitPID(t, c, 3)
	if closedWithin(s2, 300*time.Millisecond) {
		t.Fatal("the second session was closed with a call in flight on it")
	}
	leaving3.Store(true)
	leavingAgent(t, d, 4, new(atomic.Bool), nil)
	waitPID(t, c, 4)
	if !closedWithin(s2, 5*time.Second) {
		t.Error("a second drain did not close the first")
	}
	if a := <-held; a.err == nil && a.body == "done" {
		t.Error("the call on the session closed by the second drain finished")
	}
	if !closedWithin(s3, 5*time.Second) {
		t.Error("the third session, empty when its agent left it, was not closed")
	}
	close(release2)
}

// TestChannelHandshakeLimits: silent connections are cut at the handshake
// deadline, one source holds at most maxHandshakesPerSource of them (the
// rest are closed at once), and a closed route refuses.
func TestChannelHandshakeLimits(t *testing.T) {
	t.Parallel()
	ch := newChannel(t, 300*time.Millisecond)
	var conns []net.Conn
	for range maxHandshakesPerSource + 4 {
		nc, err := net.Dial("tcp", ch.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	start := time.Now()
	for _, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Error("a silent connection was sent bytes")
		}
		nc.Close()
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("silent connections lived %v past a 300 ms deadline", waited)
	}
	if got := ch.Refused(); got < int64(len(conns)) {
		t.Errorf("refused %d, want %d", got, len(conns))
	}

	c := routed(t, ch, "sb-a")
	d := *ch.Dial("sb-a")
	c.Close() // closes its route
	if !refused(t, rawHello(t, ch, d, agentauth.Hello{Sandbox: "sb-a", Token: d.Token})) {
		t.Error("a closed route took a connection")
	}
}

type tlsDialer struct{ conf *tls.Config }

func (d *tlsDialer) dial(addr string) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, d.conf)
}

// adopter is a daemon's OnUnknown: it counts its calls and, for the ids
// the store knows (known), registers a route with a Conn as the manager
// does.
type adopter struct {
	t     *testing.T
	ch    *Channel
	known map[string]bool

	mu    sync.Mutex
	calls []string
	conns map[string]*Conn
}

func newAdopter(t *testing.T, ch *Channel, known ...string) *adopter {
	a := &adopter{t: t, ch: ch, known: map[string]bool{}, conns: map[string]*Conn{}}
	for _, id := range known {
		a.known[id] = true
	}
	ch.OnUnknown = a.adopt
	return a
}

func (a *adopter) adopt(_ context.Context, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, id)
	if !a.known[id] {
		return false
	}
	c := New(id, slog.New(slog.DiscardHandler))
	ln, err := a.ch.Register(id)
	if err == nil {
		err = c.AddListener(ln, true)
	}
	if err != nil {
		a.t.Errorf("adopt %s: %v", id, err)
		return false
	}
	a.t.Cleanup(func() { c.Close() })
	a.conns[id] = c
	return true
}

func (a *adopter) calledFor() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func (a *adopter) conn(id string) *Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns[id]
}

// wait returns id's Conn once the hook took its route.
func (a *adopter) wait(id string) *Conn {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.conn(id) == nil {
		if time.Now().After(deadline) {
			a.t.Fatalf("no route taken for %s (hook calls %v)", id, a.calledFor())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a.conn(id)
}

// TestChannelAdoptsUnknownSandbox: an agent whose credential checks out
// but whose sandbox has no route here (its session was on another daemon
// of the set) is handed to OnUnknown once, which takes the route, and its
// session comes up; after that the route is there and the hook is not
// asked again. A wrong credential, a forged one or another sandbox's
// never reach the hook (nor a store behind it), and an id the hook
// refuses (a record gone) is refused.
func TestChannelAdoptsUnknownSandbox(t *testing.T) {
	t.Parallel()
	ch := newChannel(t)
	a := newAdopter(t, ch, "sb-elsewhere")
	d := *ch.Dial("sb-elsewhere")
	forged := agentauth.Token([]byte("not the daemon's key, not at all"), "sb-x")
	for name, h := range map[string]agentauth.Hello{
		"another sandbox's credential": {Sandbox: "sb-x", Token: d.Token},
		"forged credential":            {Sandbox: "sb-x", Token: forged},
		"wrong credential, known id":   {Sandbox: "sb-elsewhere", Token: forged},
	} {
		if !refused(t, rawHello(t, ch, d, h)) {
			t.Errorf("%s: not refused", name)
		}
	}
	if got := a.calledFor(); len(got) != 0 {
		t.Fatalf("the hook was asked about %v before any credential checked out", got)
	}

	first := dialAgent(t, d, 21)
	c := a.wait("sb-elsewhere")
	waitPID(t, c, 21)
	first.Close()
	dialAgent(t, d, 22) // the agent comes back: the route is there now
	waitPID(t, c, 22)
	if got := a.calledFor(); !slices.Equal(got, []string{"sb-elsewhere"}) {
		t.Errorf("hook calls %v, want one for sb-elsewhere", got)
	}

	gone := *ch.Dial("sb-gone")
	if !refused(t, rawHello(t, ch, gone, agentauth.Hello{Sandbox: "sb-gone", Token: gone.Token})) {
		t.Error("a sandbox the hook refused got a connection")
	}
	if got := a.calledFor(); !slices.Equal(got, []string{"sb-elsewhere", "sb-gone"}) {
		t.Errorf("hook calls %v, want sb-elsewhere then sb-gone", got)
	}
}

// channelSet serves n Channels on loopback with one material and every
// listener advertised, as the daemons of a set are configured.
func channelSet(t *testing.T, n int) []*Channel {
	t.Helper()
	m, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "agent-channel"))
	if err != nil {
		t.Fatal(err)
	}
	var lns []net.Listener
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	var chs []*Channel
	for _, ln := range lns {
		ch := NewChannel(ln, m, addrs, slog.New(slog.DiscardHandler))
		served := make(chan error, 1)
		go func() { served <- ch.Serve() }()
		t.Cleanup(func() {
			ch.Close()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		chs = append(chs, ch)
	}
	return chs
}

// TestAgentRedialsToAnotherDaemon: a real agent (RunDialer with the dial
// file of a set of two daemons) holds its session on the daemon that made
// its sandbox; when that daemon goes (its listener and the session
// closed), the agent's next dial reaches the other daemon, which had no
// route for the sandbox and takes it.
func TestAgentRedialsToAnotherDaemon(t *testing.T) {
	t.Parallel()
	chs := channelSet(t, 2)
	first := routed(t, chs[0], "sb-a")
	other := newAdopter(t, chs[1], "sb-a")
	d := *chs[0].Dial("sb-a")
	if got, want := d.Addresses(), []string{chs[0].Addr().String(), chs[1].Addr().String()}; !slices.Equal(got, want) {
		t.Fatalf("dial file addresses %v, want %v", got, want)
	}
	dial, err := agent.TLSDialer(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() {
		ran <- agent.RunDialer(ctx, dial, agentconntest.Healthy(wire.AgentHealth{Version: "test", PID: 31}, http.NotFoundHandler()), slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("RunDialer: %v", err)
		}
	})
	waitPID(t, first, 31)
	if got := other.calledFor(); len(got) != 0 {
		t.Errorf("the other daemon was asked about %v while the first held the session", got)
	}

	chs[0].Close()
	first.Close()
	waitPID(t, other.wait("sb-a"), 31)
}

// TestAgentLeavesFallback: the real agent's loop (agent.RunDialer) on a
// fallback dialer, against a Conn that listens on a socket and on the
// channel's route as the manager's do. While TCP fails the agent serves
// on the socket; once TCP answers it moves there, a call that was running
// on the socket's session finishes there, and the daemon closes that
// session once it is empty.
func TestAgentLeavesFallback(t *testing.T) {
	t.Parallel()
	ch := newChannel(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	c, err := Listen("sb-a", sock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ln, err := ch.Register("sb-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddListener(ln, true); err != nil {
		t.Fatal(err)
	}
	tcp, err := agent.TLSDialer(*ch.Dial("sb-a"))
	if err != nil {
		t.Fatal(err)
	}
	var reachable atomic.Bool
	first := func(ctx context.Context) (net.Conn, error) {
		if !reachable.Load() {
			return nil, errors.New("no route to the listener")
		}
		return tcp(ctx)
	}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(wire.AgentHealth{Version: "test", PID: 1, Leaving: agent.Leaving(r.Context())})
	})
	// /via answers the network the call came by.
	mux.HandleFunc("/via", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Context().Value(http.LocalAddrContextKey).(net.Addr).Network())
	})
	mux.HandleFunc("GET /slow", slowUntil(release))
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() {
		ran <- agent.RunDialer(ctx, agent.FallbackDialer(first, agent.UnixDialer(sock)), mux, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() { cancel(); <-ran })

	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if got, err := get(c, "/via"); err != nil || got != "unix" {
		t.Fatalf("with TCP failing: via %q, %v; want unix", got, err)
	}
	inFlight := make(chan answer, 1)
	go func() {
		b, err := get(c, "/slow")
		inFlight <- answer{b, err}
	}()
	c.mu.Lock()
	old := c.sess
	c.mu.Unlock()
	for old.NumStreams() == 0 {
		time.Sleep(5 * time.Millisecond)
	}

	reachable.Store(true)
	for {
		// A POST with a body, which the transport cannot send again:
		// one cut by the move would fail here.
		got, err := post(c, "/via")
		if err != nil {
			t.Fatalf("a call during the move: %v", err)
		}
		if got == "tcp" {
			break
		}
		if wctx.Err() != nil {
			t.Fatal("the agent never moved to TCP")
		}
		time.Sleep(time.Millisecond)
	}
	if old.IsClosed() {
		t.Fatal("the socket's session was closed with a call in flight on it")
	}
	close(release)
	if a := <-inFlight; a.err != nil || a.body != "done" {
		t.Errorf("the call in flight across the move: %q, %v", a.body, a.err)
	}
	select {
	case <-old.CloseChan():
	case <-time.After(5 * time.Second):
		t.Errorf("the socket's session was not closed once empty (%d streams)", old.NumStreams())
	}
}
