package sandbox

import (
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/wire"
)

// Engine restart policies: what happens to sandboxes that were running when
// the backend (the Docker Engine) restarted under them.
const (
	EngineRestartRestart = "restart" // start them again; their agents redial
	EngineRestartMark    = "mark"    // record them as stopped, with the reason
)

// LifecycleOptions configure timeouts, the reaper and the reconciler.
type LifecycleOptions struct {
	// DefaultTimeouts apply to a sandbox created without its own; empty
	// actions fall back to stop (idle) and destroy (lifetime).
	DefaultTimeouts wire.Timeouts
	// OrphanGrace is how long a box or volume of this instance that has no
	// record is left alone (reported) before it is removed; 0 removes it at
	// once. The grace covers a create that is between making the record and
	// making the box in another goroutine, and an operator looking at it.
	OrphanGrace time.Duration
	// EngineRestartPolicy is EngineRestartRestart (default) or EngineRestartMark.
	EngineRestartPolicy string
	// ReapInterval is how often the reaper looks at deadlines (default 1 s).
	ReapInterval time.Duration
	// ReconcileInterval is how often the store is compared with the
	// backend, to notice boxes killed or removed behind the daemon's back
	// and engine restarts (default 3 s).
	ReconcileInterval time.Duration
	// DiskCheckInterval is how often the writable layer of each running
	// sandbox is measured against its disk limit (default 10 s).
	DiskCheckInterval time.Duration
	// ActivityFlush is the coarseness with which activity is persisted
	// (default 5 s): a daemon restart can lose at most this much of it.
	ActivityFlush time.Duration
}

// lifecycle is the manager's state for events, activity, timeouts and
// reconciliation; it lives apart from the Manager's own fields.
type lifecycle struct {
	opts     LifecycleOptions
	events   *broker
	activity *activity
	instance string

	mu sync.Mutex
	// orphans maps the id of a box or volume without a record to when it was
	// first seen; it is removed when its grace is over.
	orphans map[string]time.Time
	// acting holds ids whose timeout action is running, so the reaper does
	// not start it twice.
	acting map[string]bool
	// engineDown is set while the engine does not answer; the reconcile
	// after it comes back treats stopped boxes as casualties of a restart.
	engineDown bool
	// wg holds RunBackground's own goroutines; acts the timeouts' actions
	// the reaper started.
	wg, acts sync.WaitGroup
}

func newLifecycle(opts LifecycleOptions) *lifecycle {
	if opts.DefaultTimeouts.IdleAction == "" {
		opts.DefaultTimeouts.IdleAction = wire.ActionStop
	}
	if opts.DefaultTimeouts.LifetimeAction == "" {
		opts.DefaultTimeouts.LifetimeAction = wire.ActionDestroy
	}
	if opts.EngineRestartPolicy == "" {
		opts.EngineRestartPolicy = EngineRestartRestart
	}
	if opts.ReapInterval <= 0 {
		opts.ReapInterval = time.Second
	}
	if opts.ReconcileInterval <= 0 {
		opts.ReconcileInterval = 3 * time.Second
	}
	if opts.DiskCheckInterval <= 0 {
		opts.DiskCheckInterval = 10 * time.Second
	}
	if opts.ActivityFlush <= 0 {
		opts.ActivityFlush = 5 * time.Second
	}
	return &lifecycle{
		opts:     opts,
		events:   newBroker(),
		activity: newActivity(),
		orphans:  map[string]time.Time{},
		acting:   map[string]bool{},
	}
}

// LifecycleOptionsFrom takes the lifecycle settings from the daemon config.
func LifecycleOptionsFrom(cfg config.Config) LifecycleOptions {
	return LifecycleOptions{
		DefaultTimeouts: wire.Timeouts{
			IdleSeconds:        int64(cfg.IdleTimeout / time.Second),
			IdleAction:         cfg.IdleAction,
			MaxLifetimeSeconds: int64(cfg.MaxLifetime / time.Second),
			LifetimeAction:     cfg.LifetimeAction,
		},
		OrphanGrace:         cfg.OrphanGrace,
		EngineRestartPolicy: cfg.EngineRestart,
		DiskCheckInterval:   cfg.DiskCheckInterval,
	}
}
