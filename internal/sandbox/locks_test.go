package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/leader"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// gatedDriver is one daemon's view of a backend the daemons of a set
// share: the boxes are the same for each. An armed op (Start or Destroy)
// tells reached, then waits for gate; Start after the box started,
// Destroy before it removes anything.
type gatedDriver struct {
	*fakedriver.Driver
	op      string
	armed   atomic.Bool
	reached chan struct{}
	gate    chan struct{}
}

func (g *gatedDriver) arm() {
	g.reached, g.gate = make(chan struct{}), make(chan struct{})
	g.armed.Store(true)
}

func (g *gatedDriver) wait(op string) {
	if g.op == op && g.armed.CompareAndSwap(true, false) {
		close(g.reached)
		<-g.gate
	}
}

func (g *gatedDriver) Start(ctx context.Context, id string) error {
	err := g.Driver.Start(ctx, id)
	g.wait("start")
	return err
}

func (g *gatedDriver) Destroy(ctx context.Context, id string) error {
	g.wait("destroy")
	return g.Driver.Destroy(ctx, id)
}

// TestLocksAcrossDaemons stands for two daemons on one PostgreSQL store
// and one backend: lifecycle operations of one stopped sandbox (which has
// no agent session, so no daemon every call is sent to) from both daemons
// run one after the other. A start through A and a destroy through B end
// with neither a box nor a record, whichever goes first; the reconciler's
// lockNow does not wait for another daemon's operation; and each lock is
// released at its unlock: with a TTL of an hour, the later operations
// would otherwise wait an hour.
func TestLocksAcrossDaemons(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	shared := fakedriver.New(t)
	open := func(holder, gated string) (*Manager, *gatedDriver, *store.Store) {
		dir, err := os.MkdirTemp("/tmp", "hclk")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		st, err := store.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		drv := &gatedDriver{Driver: shared, op: gated}
		m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
			Log:   slog.New(slog.DiscardHandler),
			Locks: &leader.Locks{Store: st, Holder: holder, TTL: time.Hour, Poll: 20 * time.Millisecond}})
		t.Cleanup(m.Close)
		if err := m.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		return m, drv, st
	}
	a, drvA, st := open("daemon-a", "start")
	b, drvB, _ := open("daemon-b", "destroy")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	stopped := func() string {
		t.Helper()
		sb, err := a.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Stop(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	holder := func(id string) string {
		t.Helper()
		h, _, err := st.LeaseHolder(ctx, lockName(id))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	goneWhole := func(id string) {
		t.Helper()
		if _, err := st.Get(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("record of %s: got %v, want none", id, err)
		}
		if s, _ := shared.Inspect(ctx, id); s.State != driver.BoxMissing {
			t.Errorf("box of %s: got %s, want none (a box without a record)", id, s.State)
		}
		if h := holder(id); h != "" {
			t.Errorf("lock of %s held by %q after both operations, want released", id, h)
		}
	}
	reach := func(g *gatedDriver, done <-chan error) {
		t.Helper()
		select {
		case <-g.reached:
		case err := <-done:
			t.Fatalf("the %s ended (%v) before it reached the backend", g.op, err)
		case <-ctx.Done():
			t.Fatalf("the %s never reached the backend", g.op)
		}
	}
	notYet := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s returned (%v) while the other daemon's operation held the sandbox", what, err)
		case <-time.After(300 * time.Millisecond):
		}
	}

	// A starts (held once its box runs, before the record says so); B's
	// destroy waits, then removes all of it.
	id := stopped()
	drvA.arm()
	started := make(chan error, 1)
	go func() { _, err := a.Start(ctx, id); started <- err }()
	reach(drvA, started)
	destroyed := make(chan error, 1)
	go func() { destroyed <- b.Destroy(ctx, id) }()
	notYet(destroyed, "B's destroy")
	if h := holder(id); h != "daemon-a" {
		t.Errorf("lock during A's start: held by %q, want daemon-a", h)
	}
	if unlock, ok := b.lockNow(ctx, id); ok {
		unlock()
		t.Error("B's lockNow took the sandbox while A's start held it")
	}
	close(drvA.gate)
	if err := <-started; err != nil {
		t.Errorf("A's start: %v", err)
	}
	if err := <-destroyed; err != nil {
		t.Errorf("B's destroy: %v", err)
	}
	goneWhole(id)

	// B destroys (held before anything is removed); A's start waits, then
	// finds no sandbox rather than starting a box that is going away.
	id = stopped()
	drvB.arm()
	destroyed = make(chan error, 1)
	go func() { destroyed <- b.Destroy(ctx, id) }()
	reach(drvB, destroyed)
	started = make(chan error, 1)
	go func() { _, err := a.Start(ctx, id); started <- err }()
	notYet(started, "A's start")
	close(drvB.gate)
	if err := <-destroyed; err != nil {
		t.Errorf("B's destroy: %v", err)
	}
	if err := <-started; !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("A's start after B's destroy: got %v, want not found", err)
	}
	goneWhole(id)

	// Each lock was released at once: a stop through B of what A made,
	// and a start through A of what B stopped, do not wait for the TTL.
	sb, err := a.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Stop(ctx, sb.ID); err != nil || got.State != wire.StateStopped {
		t.Fatalf("B's stop of A's sandbox: got %v, %v", got.State, err)
	}
	if got, err := a.Start(ctx, sb.ID); err != nil || got.State != wire.StateRunning {
		t.Fatalf("A's start of the sandbox B stopped: got %v, %v", got.State, err)
	}
	if h := holder(sb.ID); h != "" {
		t.Errorf("lock after the operations: held by %q, want released", h)
	}
}
