package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/leader"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestAgentMovesToALiveDaemon stands for two daemons of a set on one
// PostgreSQL store, each with its TCP agent channel (one material, both
// listeners advertised, A's first) whose OnUnknown is AdoptRoute, as the
// daemon wires it. Boxes run real agents that dial as cmd/hotcell-agent
// does (the dial file in the run dir).
//
//   - A create on B: its agent dials A first, which does not take a
//     sandbox being created (it would leave B's create waiting): refused,
//     the agent moves on to B and the create completes.
//   - A sandbox made on A holds its session on A; when A goes (its
//     listener and sessions closed) the agent redials B, which had no
//     route for it and takes it: B's calls reach the box.
func TestAgentMovesToALiveDaemon(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	mat, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "agent-channel"))
	if err != nil {
		t.Fatal(err)
	}
	var lns []net.Listener
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	log := slog.New(slog.DiscardHandler)
	type daemon struct {
		m  *Manager
		ch *agentconn.Channel
	}
	start := func(ln net.Listener) daemon {
		// Short: the agent socket path must fit in 108 bytes.
		dir, err := os.MkdirTemp("/tmp", "hcad")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		st, err := store.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		ch := agentconn.NewChannel(ln, mat, addrs, log)
		m := New(fakedriver.New(t), st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 20 * time.Second,
			Log: log, AgentChannel: ch})
		ch.OnUnknown = m.AdoptRoute
		served := make(chan error, 1)
		go func() { served <- ch.Serve() }()
		t.Cleanup(func() {
			m.Close()
			ch.Close()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		if err := m.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		return daemon{m, ch}
	}
	a, b := start(lns[0]), start(lns[1])
	ctx := t.Context()

	onB, err := b.m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatalf("create on B: %v", err)
	}
	if a.ch.Refused() == 0 {
		t.Error("A refused nothing: the agent of B's create did not try A first")
	}
	if _, err := a.m.Agent(ctx, onB.ID); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("A's agent connection of B's sandbox: got %v, want none (unavailable)", err)
	}
	if printenv(t, b.m, onB.ID, "PATH") == "" {
		t.Error("exec through B in B's sandbox: no PATH")
	}
	if !b.m.HasSession(onB.ID) || a.m.HasSession(onB.ID) {
		t.Errorf("HasSession of B's sandbox: B %v, A %v, want true, false (daemon.Forwarding serves by it)", b.m.HasSession(onB.ID), a.m.HasSession(onB.ID))
	}

	sb, err := a.m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatalf("create on A: %v", err)
	}
	if printenv(t, a.m, sb.ID, "PATH") == "" {
		t.Error("exec through A: no PATH")
	}
	if _, err := b.m.Agent(ctx, sb.ID); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("B's agent connection of A's sandbox while A holds it: got %v, want none (unavailable)", err)
	}
	if !a.m.HasSession(sb.ID) || b.m.HasSession(sb.ID) {
		t.Errorf("HasSession of A's sandbox: A %v, B %v, want true, false", a.m.HasSession(sb.ID), b.m.HasSession(sb.ID))
	}

	// A goes as a daemon that stops does: its sessions, then its listener.
	a.m.Close()
	a.ch.Close()
	waitFor(t, "B to take the agent of A's sandbox", func() bool {
		_, err := b.m.Agent(ctx, sb.ID)
		return err == nil
	})
	if printenv(t, b.m, sb.ID, "PATH") == "" {
		t.Error("exec through B after A went: no PATH")
	}
	if !b.m.HasSession(sb.ID) {
		t.Error("HasSession of A's sandbox on B after A went: false, want true")
	}
}

// TestStartAfterRoutesKept: a route a daemon keeps for a stopped sandbox
// must not take the agent of its next start on another daemon. Two
// daemons of a set on one PostgreSQL store and one backend (a shared
// fakedriver running real agents), each with its TCP agent channel; Y's
// listener is first in the list every agent dials. X makes a sandbox (its
// agent passes over Y), Y takes a route for it (AdoptRoute, as when the
// agent redials Y), X stops it. Y, not the leader, closes its route on its
// own, so X's start gets its agent: it dials Y first, is refused, and
// comes to X. With Y's look at its routes an hour apart, X's start right
// after the stop meets Y's route still kept: Y refuses the agent of a
// sandbox another live daemon is starting (startedElsewhere), and it
// comes to X.
func TestStartAfterRoutesKept(t *testing.T) {
	t.Parallel()
	for _, kept := range []bool{false, true} {
		t.Run(map[bool]string{false: "route closed", true: "route kept"}[kept], func(t *testing.T) {
			t.Parallel()
			startAfterRoutesKept(t, kept)
		})
	}
}

func startAfterRoutesKept(t *testing.T, kept bool) {
	url := testenv.RequirePostgres(t)
	mat, err := agentauth.LoadOrCreate(filepath.Join(t.TempDir(), "agent-channel"))
	if err != nil {
		t.Fatal(err)
	}
	var lns []net.Listener
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	log := slog.New(slog.DiscardHandler)
	drv := fakedriver.New(t)
	start := func(name string, ln net.Listener, life LifecycleOptions) (*Manager, *store.Store) {
		dir, err := os.MkdirTemp("/tmp", "hcad")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		st, err := store.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		// Registered and alive for the test's length (storePeers' bound).
		if err := st.Heartbeat(t.Context(), name, "http://"+ln.Addr().String(), time.Now()); err != nil {
			t.Fatal(err)
		}
		ch := agentconn.NewChannel(ln, mat, addrs, log)
		m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 10 * time.Second,
			Log: log, AgentChannel: ch, Lifecycle: life, Peers: storePeers{st, name, time.Minute},
			Locks:   &leader.Locks{Store: st, Holder: name, TTL: time.Second, Log: log},
			Elector: &leader.StoreLease{Store: st, Name: "sandbox-loops", Holder: name, TTL: 600 * time.Millisecond, Log: log}})
		ch.OnUnknown = m.AdoptRoute
		served := make(chan error, 1)
		go func() { served <- ch.Serve() }()
		bctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		t.Cleanup(func() {
			cancel()
			<-done
			m.Close()
			ch.Close()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		if err := m.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(done)
			_ = m.RunBackground(bctx)
		}()
		return m, st
	}
	yLife := setLifecycle
	if kept {
		yLife.ReapInterval = time.Hour
	}
	x, st := start("daemon-x", lns[1], setLifecycle)
	waitFor(t, "X to lead", func() bool {
		h, until, err := st.LeaseHolder(t.Context(), "sandbox-loops")
		return err == nil && h == "daemon-x" && until.After(time.Now())
	})
	y, _ := start("daemon-y", lns[0], yLife)
	ctx := t.Context()

	sb, err := x.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatalf("create on X: %v", err)
	}
	// Refused while X's pass holds the sandbox's lock, as the agent
	// would be; it redials.
	waitFor(t, "Y to take a route of X's running sandbox", func() bool { return y.AdoptRoute(ctx, sb.ID) })
	if _, err := x.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	yRoute := func() bool {
		y.mu.Lock()
		_, ok := y.conns[sb.ID]
		y.mu.Unlock()
		return ok
	}
	if kept {
		if !yRoute() {
			t.Fatal("Y closed its route of the stopped sandbox with its look an hour away")
		}
	} else {
		waitFor(t, "Y to close its route of the stopped sandbox", func() bool { return !yRoute() })
	}
	if _, err := x.Start(ctx, sb.ID); err != nil {
		t.Fatalf("start on X after the stop: %v", err)
	}
	if !x.HasSession(sb.ID) || y.HasSession(sb.ID) {
		t.Errorf("the started sandbox's session: X %v, Y %v; want X's", x.HasSession(sb.ID), y.HasSession(sb.ID))
	}
	if printenv(t, x, sb.ID, "PATH") == "" {
		t.Error("exec through X after the start: no PATH")
	}
}
