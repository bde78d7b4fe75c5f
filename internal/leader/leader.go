// Package leader elects, among daemons that share a store, the one that
// runs a task only one may run at a time: a reconciler that would act
// twice on one removed box, a reaper that would stop a sandbox twice.
//
// Elector is the small interface such a task is run under. StoreLease
// implements it with a lease row in the store (internal/store's leases),
// which works on PostgreSQL as on SQLite. KubeLeases puts the same lease
// on a coordination.k8s.io/v1 Lease object, for daemons that share a
// Kubernetes cluster: StoreLease{Store: &KubeLeases{...}} elects through the
// API server. The daemon runs the sandbox manager's loops (reaper,
// reconciler, watches, pool refill) under a StoreLease on a PostgreSQL
// store (sandbox.Options.Elector).
package leader

import (
	"context"
	"log/slog"
	"time"
)

// Elector runs work only while this process leads.
type Elector interface {
	// Run campaigns for the role until ctx ends. While this process
	// leads, lead runs with a context that is cancelled as soon as the
	// leadership may have been lost (another holder took it, or renewals
	// failed for long enough that the lease might expire); Run then
	// campaigns again, and calls lead again once it leads again. Run
	// returns when ctx has ended, after lead has returned and the role was
	// given up.
	Run(ctx context.Context, lead func(ctx context.Context))
}

// LeaseStore is what StoreLease needs: internal/store's *Store, or
// KubeLeases.
type LeaseStore interface {
	AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Defaults of StoreLease.
const (
	DefaultTTL = 15 * time.Second
)

// StoreLease is an Elector on a lease row of a store shared by the
// candidates. The leader renews the lease every Renew; a leader that
// cannot renew steps down (cancels lead's context) once TTL-2*Renew has
// passed since its last renewal, so that it has stopped acting before the
// lease can expire and another take it. Candidates' clocks must agree to
// well within Renew.
type StoreLease struct {
	Store LeaseStore
	// Name is the role, e.g. "reconciler".
	Name string
	// Holder names this candidate, unique among them (e.g. host, pid and
	// a random part).
	Holder string
	// TTL is how long a lease lasts unrenewed (DefaultTTL when 0); Renew
	// how often the leader renews it and the others try for it (TTL/3
	// when 0; at most TTL/3).
	TTL, Renew time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Log gets the changes of leadership; slog.Default when nil.
	Log *slog.Logger
}

var _ Elector = (*StoreLease)(nil)

// Run implements Elector.
func (l *StoreLease) Run(ctx context.Context, lead func(ctx context.Context)) {
	ttl, renew := l.TTL, l.Renew
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if renew <= 0 || renew > ttl/3 {
		renew = ttl / 3
	}
	now := l.Now
	if now == nil {
		now = time.Now
	}
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("role", l.Name, "holder", l.Holder)

	var (
		leading bool
		cancel  context.CancelFunc
		done    chan struct{}
		lastOK  time.Time
	)
	stepDown := func(why string) {
		if !leading {
			return
		}
		cancel()
		<-done
		leading = false
		log.Info("stepped down", "why", why)
	}
	tick := time.NewTicker(renew)
	defer tick.Stop()
	for {
		if leading {
			select {
			case <-done: // lead returned by itself: call it again while leading
				cancel()
				leading = false
			default:
			}
		}
		at := now()
		callCtx, callCancel := context.WithTimeout(ctx, renew)
		ok, err := l.Store.AcquireLease(callCtx, l.Name, l.Holder, at, ttl)
		callCancel()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Warn("renewing the lease failed", "err", err)
			if leading && at.Sub(lastOK) >= ttl-2*renew {
				stepDown("the lease could not be renewed")
			}
		case !ok:
			stepDown("another holder has the lease")
		default:
			lastOK = at
			if !leading {
				leading = true
				log.Info("leading")
				cancel, done = start(ctx, lead)
			}
		}
		select {
		case <-ctx.Done():
			stepDown("stopping")
			// Free the role at once rather than after the TTL.
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := l.Store.ReleaseLease(rctx, l.Name, l.Holder); err != nil {
				log.Warn("releasing the lease failed; it expires by itself", "err", err)
			}
			rcancel()
			return
		case <-tick.C:
		}
	}
}

// start runs lead in a goroutine with a context of its own, and returns
// what cancels it and what is closed when lead has returned.
func start(ctx context.Context, lead func(context.Context)) (context.CancelFunc, chan struct{}) {
	leadCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leadCtx)
	}()
	return cancel, done
}
