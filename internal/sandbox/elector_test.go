package sandbox

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/leader"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestElectedLoopsActOnce stands for two daemons on one PostgreSQL store,
// each with RunBackground under a StoreLease. Daemon B's driver holds no
// box at all, so a reconciler of B that acted would at once mark every
// sandbox "removed behind the daemon's back": while A leads, the one box A
// removed is noticed once (by A) and the box still running stays running.
// Once A's loops stop, B leads and acts: it notices the box missing from
// its driver.
func TestElectedLoopsActOnce(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	lo := LifecycleOptions{OrphanGrace: time.Hour, ReconcileInterval: 50 * time.Millisecond, ReapInterval: 50 * time.Millisecond}
	type daemon struct {
		m    *Manager
		drv  *fakedriver.Driver
		stop context.CancelFunc
		done chan struct{}
	}
	start := func(name string) *daemon {
		dir, err := os.MkdirTemp("/tmp", "hcel")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		st, err := store.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		drv := fakedriver.New(t)
		log := slog.New(slog.DiscardHandler)
		el := &leader.StoreLease{Store: st, Name: "sandbox-loops", Holder: name, TTL: 600 * time.Millisecond, Log: log}
		m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
			Log: log, Lifecycle: lo, Elector: el})
		t.Cleanup(m.Close)
		if err := m.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		d := &daemon{m: m, drv: drv, stop: cancel, done: make(chan struct{})}
		go func() {
			defer close(d.done)
			_ = m.RunBackground(ctx)
		}()
		t.Cleanup(func() { cancel(); <-d.done })
		return d
	}
	a := start("daemon-a")
	// A leads before B campaigns: B's first try finds the lease held.
	waitFor(t, "daemon A to lead", func() bool {
		_, until, err := a.m.store.(*store.Store).LeaseHolder(t.Context(), "sandbox-loops")
		return err == nil && until.After(time.Now())
	})
	b := start("daemon-b")
	ctx := t.Context()
	kept, err := a.m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Two boxes removed one after the other: A has made at least two
	// passes after B started its loops, each noticed once.
	for i := 0; i < 2; i++ {
		gone, err := a.m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = a.drv.Destroy(ctx, gone.ID)
		waitFor(t, "the removed box to be noticed", func() bool {
			sb, err := b.m.Get(ctx, gone.ID)
			return err == nil && sb.State == wire.StateError
		})
		noticedOnce(t, a.m, gone.ID, lo.ReconcileInterval)
	}
	if sb, err := a.m.Get(ctx, kept.ID); err != nil || sb.State != wire.StateRunning {
		t.Fatalf("the box A runs: got %v %q, %v; want running (B's reconciler acted while A led)", sb.State, sb.Error, err)
	}
	// A stops (its loops give the lease up); B leads and its reconciler,
	// whose driver has no box, marks the kept one.
	a.stop()
	<-a.done
	waitFor(t, "daemon B to lead and reconcile", func() bool {
		sb, err := b.m.Get(ctx, kept.ID)
		return err == nil && sb.State == wire.StateError
	})
	noticedOnce(t, b.m, kept.ID, lo.ReconcileInterval)
}

// noticedOnce checks that box id has exactly one error event: the
// reconciler writes the state before the event, so it waits for the
// first, then lets several more passes run that must add none.
func noticedOnce(t *testing.T, m *Manager, id string, pass time.Duration) {
	t.Helper()
	waitFor(t, "the error event of "+id, func() bool { return countEvents(t, m, id, wire.SandboxEventError) >= 1 })
	time.Sleep(5 * pass)
	if n := countEvents(t, m, id, wire.SandboxEventError); n != 1 {
		t.Errorf("box %s: %d error events, want 1", id, n)
	}
}

func countEvents(t *testing.T, m *Manager, id, typ string) int {
	t.Helper()
	n := 0
	for _, e := range eventTypes(t, m, id) {
		if e == typ {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
