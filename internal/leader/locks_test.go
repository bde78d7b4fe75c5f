package leader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two processes (two store handles, two holders), each with two callers,
// take one lock in turn: never two at once. The TTL is an hour, so the
// callers finish only because each unlock releases the lease at once.
func TestLocksExclude(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		var (
			in, most atomic.Int32
			wg       sync.WaitGroup
			errs     = make(chan error, 16)
		)
		for _, holder := range []string{"daemon-a", "daemon-b"} {
			l := &Locks{Store: open(), Holder: holder, TTL: time.Hour, Poll: 10 * time.Millisecond}
			for c := 0; c < 2; c++ {
				wg.Go(func() {
					for i := 0; i < 4; i++ {
						unlock, err := l.Lock(ctx, "sandbox-sb-1")
						if err != nil {
							errs <- fmt.Errorf("%s: %w", holder, err)
							return
						}
						n := in.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(5 * time.Millisecond)
						in.Add(-1)
						unlock()
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("lock (a lease not released waits an hour): %v", err)
		}
		if m := most.Load(); m != 1 {
			t.Errorf("%d callers held the lock at once, want 1", m)
		}
	})
}

// TryLock never waits: it fails while another process, or another caller
// of the same process, holds the lock, and succeeds once it is released.
// A lock held longer than its TTL is renewed, so nobody takes it
// meanwhile.
func TestLocksTryLockAndRenewal(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		ctx := t.Context()
		const ttl = 3 * time.Second
		a := &Locks{Store: open(), Holder: "daemon-a", TTL: ttl}
		b := &Locks{Store: open(), Holder: "daemon-b", TTL: ttl}
		unlock, err := a.Lock(ctx, "sandbox-sb-2")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := a.TryLock(ctx, "sandbox-sb-2"); ok || err != nil {
			t.Errorf("TryLock by the holder's own process while held: got %v, %v; want false", ok, err)
		}
		// Past two TTLs: only the renewals keep it.
		for end := time.Now().Add(2*ttl + time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			if _, ok, err := b.TryLock(ctx, "sandbox-sb-2"); ok || err != nil {
				t.Fatalf("TryLock by another process while held: got %v, %v; want false", ok, err)
			}
		}
		unlock()
		unlock() // a second call does nothing
		unlockB, ok, err := b.TryLock(ctx, "sandbox-sb-2")
		if !ok || err != nil {
			t.Fatalf("TryLock after the holder's unlock: got %v, %v; want true", ok, err)
		}
		unlockB()
	})
}

// A lock whose holder died (no unlock, no renewal) is free once its TTL
// has passed; a waiter whose context ends gives up with the context's
// error.
func TestLocksHolderDied(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, open func() LeaseStore) {
		const ttl = 2 * time.Second
		took := time.Now()
		if ok, err := open().AcquireLease(t.Context(), "sandbox-sb-3", "dead", took, ttl); err != nil || !ok {
			t.Fatalf("take the lock for the dead holder: %v, %v", ok, err)
		}
		b := &Locks{Store: open(), Holder: "daemon-b", TTL: ttl, Poll: 20 * time.Millisecond}
		short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, err := b.Lock(short, "sandbox-sb-3"); err == nil {
			t.Fatal("lock of a held lock before its TTL: got it, want the context's error")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		unlock, err := b.Lock(ctx, "sandbox-sb-3")
		if err != nil {
			t.Fatalf("lock once the dead holder's lease expired: %v", err)
		}
		if since := time.Since(took); since < ttl {
			t.Errorf("took a dead holder's lock %v after it was taken, before its TTL of %v", since, ttl)
		}
		unlock()
	})
}
