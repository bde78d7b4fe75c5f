package agentconn

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

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
	ch := NewChannel(ln, m, ln.Addr().String(), slog.New(slog.DiscardHandler))
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
	dial, err := agent.TLSDialer(d)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	agentconntest.Serve(t, nc, agentconntest.Healthy(wire.AgentHealth{Version: "test", PID: pid}, http.NotFoundHandler()))
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
