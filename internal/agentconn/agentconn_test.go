package agentconn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hotcell/hotcell/internal/agentconn/agentconntest"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// fakeAgent is the agent's end of one connection.
type fakeAgent struct{ sess *yamux.Session }

// newFakeAgent serves name on nc. healthy=false answers the health check
// with a 503, as an agent that is not ready (or not an agent) would.
func newFakeAgent(t *testing.T, nc net.Conn, name string, pid int, healthy bool) *fakeAgent {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /who", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })
	var h http.Handler = mux
	if healthy {
		h = agentconntest.Healthy(wire.AgentHealth{Version: name, PID: pid}, mux)
	} else {
		mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"code":"unavailable","message":"not ready"}}`, http.StatusServiceUnavailable)
		})
	}
	return &fakeAgent{sess: agentconntest.Serve(t, nc, h)}
}

// closed reports whether the daemon ended this agent's session.
func (a *fakeAgent) closed(t *testing.T) bool {
	t.Helper()
	select {
	case <-a.sess.CloseChan():
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

func newConn(t *testing.T) *Conn {
	t.Helper()
	// Not t.TempDir: a unix socket path must stay short. Nothing dials it
	// here; the connections are handed to adopt over net.Pipe.
	dir, err := os.MkdirTemp("", "hc-ac-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := Listen("sb-test", filepath.Join(dir, "a.sock"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connect hands the daemon a new agent connection, as acceptLoop does,
// and returns the agent's end. adopt returns when the session ends.
func connect(t *testing.T, c *Conn, name string, pid int, healthy bool) (*fakeAgent, chan struct{}) {
	t.Helper()
	daemonEnd, agentEnd := net.Pipe()
	a := newFakeAgent(t, agentEnd, name, pid, healthy)
	adopted := make(chan struct{})
	go func() {
		defer close(adopted)
		c.adopt(daemonEnd, false, func() {})
	}()
	// adopt returns only when the session ends: end it from the agent's
	// side first (cleanups run last first, the Conn's Close after this).
	t.Cleanup(func() {
		a.sess.Close()
		<-adopted
	})
	return a, adopted
}

func who(t *testing.T, c *Conn) string {
	t.Helper()
	name, err := whoErr(t.Context(), c)
	if err != nil {
		t.Fatalf("request to the agent: %v", err)
	}
	return name
}

func whoErr(ctx context.Context, c *Conn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://agent/who", nil)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// waitHealth waits until the session of the agent with pid is the current one.
func waitHealth(t *testing.T, c *Conn, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.Health().PID != pid || !c.Connected(); {
		if time.Now().After(deadline) {
			t.Fatalf("agent pid %d never became the session (health %+v, connected %v)", pid, c.Health(), c.Connected())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionReplacement: one session per sandbox at a time, and the latest
// healthy one wins. An agent that restarted replaces its predecessor, whose
// session is closed; a connection that fails the health check replaces
// nothing; requests after a replacement go to the new agent.
func TestSessionReplacement(t *testing.T) {
	t.Parallel()
	c := newConn(t)

	first, _ := connect(t, c, "first", 101, true)
	waitHealth(t, c, 101)
	if got := who(t, c); got != "first" {
		t.Fatalf("got %q, want first", got)
	}

	second, _ := connect(t, c, "second", 102, true)
	waitHealth(t, c, 102)
	if !first.closed(t) {
		t.Error("the replaced session is still open: two sessions for one sandbox")
	}
	if got := who(t, c); got != "second" {
		t.Errorf("after the replacement: got %q, want second", got)
	}

	// Not healthy: refused, and the current session stays.
	bad, badDone := connect(t, c, "bad", 103, false)
	select {
	case <-badDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the unhealthy connection was neither refused nor adopted")
	}
	if !bad.closed(t) {
		t.Error("the unhealthy connection was left open")
	}
	if h := c.Health(); h.PID != 102 || !c.Connected() {
		t.Errorf("after an unhealthy connection: health %+v connected %v, want pid 102 connected", h, c.Connected())
	}
	if got := who(t, c); got != "second" {
		t.Errorf("after an unhealthy connection: got %q, want second", got)
	}

	// The agent goes away: no session until the next one comes.
	second.sess.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Connected(); {
		if time.Now().After(deadline) {
			t.Fatal("still connected after the agent closed its session")
		}
		time.Sleep(5 * time.Millisecond)
	}
	type answer struct {
		name string
		err  error
	}
	got := make(chan answer, 1)
	go func() { // waits for the next agent
		name, err := whoErr(t.Context(), c)
		got <- answer{name, err}
	}()
	connect(t, c, "third", 104, true)
	if a := <-got; a.err != nil || a.name != "third" {
		t.Errorf("a request made while no agent was there: got %q %v, want third", a.name, a.err)
	}

	// Close ends the session and refuses new ones.
	c.mu.Lock()
	third := c.sess
	c.mu.Unlock()
	c.Close()
	if third == nil || !third.IsClosed() {
		t.Error("Close left the session open")
	}
	late, lateDone := connect(t, c, "late", 105, true)
	<-lateDone
	if !late.closed(t) {
		t.Error("a connection after Close was adopted")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err == nil {
		t.Error("WaitReady after Close: got no error")
	}
}

// TestCloseWakesWaiters: a request waiting for an agent that will never
// come (its box died) fails when the connection is closed, not at its
// deadline.
func TestCloseWakesWaiters(t *testing.T) {
	t.Parallel()
	c := newConn(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { waiting <- c.WaitReady(ctx) }()
	time.Sleep(50 * time.Millisecond) // let it wait; an early Close is checked first anyway
	c.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, errdefs.ErrUnavailable) || ctx.Err() != nil {
			t.Errorf("got %v, want unavailable before the deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request waiting for the agent did not end when the connection closed")
	}
}
