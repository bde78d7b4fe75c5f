package leader

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/keyedmutex"
)

// Defaults of Locks.
const (
	DefaultLockTTL  = 30 * time.Second
	DefaultLockPoll = 100 * time.Millisecond
)

// Locks are mutexes by name among the processes sharing a store, each a
// lease of the store held by Holder: one sandbox's lifecycle lock among
// the daemons of a set, say. A held lock is renewed every TTL/3 and
// released at unlock, so another process waits no longer than the work
// it waits for; one whose holder died is free TTL after its last renewal.
// Within the process a name is held by one caller at a time too.
type Locks struct {
	Store LeaseStore
	// Holder names this process among those sharing the store. A process
	// restarted under the same Holder takes its leases back at once.
	Holder string
	// TTL is how long a lock lasts unrenewed (DefaultLockTTL when 0);
	// Poll how often a waiter tries again (DefaultLockPoll when 0).
	TTL, Poll time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log gets a lock whose renewal failed; slog.Default when nil.
	Log *slog.Logger

	local keyedmutex.Map
}

func (l *Locks) ttl() time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return DefaultLockTTL
}

func (l *Locks) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Lock takes the lock name, waiting for its holder until ctx ends, and
// returns the function that releases it (call it once). A store that
// cannot be asked fails the lock at once.
func (l *Locks) Lock(ctx context.Context, name string) (unlock func(), err error) {
	local := l.local.Lock(name)
	poll := l.Poll
	if poll <= 0 {
		poll = DefaultLockPoll
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			local()
			return nil, fmt.Errorf("wait for lock %q: %w", name, context.Cause(ctx))
		case <-t.C:
		}
		ok, err := l.Store.AcquireLease(ctx, name, l.Holder, l.now(), l.ttl())
		if err != nil {
			local()
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
		if ok {
			return l.held(name, local), nil
		}
		t.Reset(poll)
	}
}

// TryLock takes the lock name only if nobody holds it: it asks the store
// once and never waits for a holder.
func (l *Locks) TryLock(ctx context.Context, name string) (unlock func(), ok bool, err error) {
	local, ok := l.local.TryLock(name)
	if !ok {
		return nil, false, nil
	}
	ok, err = l.Store.AcquireLease(ctx, name, l.Holder, l.now(), l.ttl())
	if err != nil || !ok {
		local()
		if err != nil {
			err = fmt.Errorf("lock %q: %w", name, err)
		}
		return nil, false, err
	}
	return l.held(name, local), true, nil
}

// held renews the lease name until the returned unlock, which releases
// it and then local.
func (l *Locks) held(name string, local func()) func() {
	ttl := l.ttl()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
			ok, err := l.Store.AcquireLease(ctx, name, l.Holder, l.now(), ttl)
			cancel()
			if err != nil || !ok {
				// The work under the lock goes on: it cannot be undone
				// half-way. Another may take the lock once it expired.
				l.log().Warn("renewing a lock failed", "lock", name, "holder", l.Holder, "taken by another", err == nil, "err", err)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			// Released at once rather than after the TTL, even when the
			// caller's context has ended.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := l.Store.ReleaseLease(ctx, name, l.Holder); err != nil {
				l.log().Warn("releasing a lock failed; it expires by itself", "lock", name, "ttl", ttl, "err", err)
			}
			cancel()
			local()
		})
	}
}

func (l *Locks) log() *slog.Logger {
	if l.Log != nil {
		return l.Log
	}
	return slog.Default()
}
