package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// eventRetention is how long the event log of a destroyed sandbox stays.
const eventRetention = 24 * time.Hour

// RunBackground runs the reaper (timeouts), the reconciler (orphans,
// boxes changed behind the daemon's back, engine restarts), the disk
// watch (writable layers over their limit) and the pools' refill until ctx
// ends, then waits for the actions in flight. Call it after Recover.
//
// With Options.Elector they run only while this daemon leads; every
// daemon still writes the activity its own calls saw to the store, where
// the leader's reaper reads it (lastActivity), so a sandbox used through
// one daemon is not reaped as idle by another.
func (m *Manager) RunBackground(ctx context.Context) error {
	el := m.opts.Elector
	if el == nil {
		m.runLoops(ctx)
		return nil
	}
	l := m.life
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		m.activityLoop(ctx)
	}()
	el.Run(ctx, func(lctx context.Context) {
		if m.fixesByLeader() {
			m.recoverRecords(lctx) // Recover's fixes, left to the leader
		}
		m.runLoops(lctx)
	})
	l.wg.Wait()
	return nil
}

// runLoops runs the loops only one daemon of a store may run until ctx
// ends, and waits for them and the actions they started.
func (m *Manager) runLoops(ctx context.Context) {
	l := m.life
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		m.reapLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		m.reconcileLoop(ctx, kick)
	}()
	go func() {
		defer wg.Done()
		m.watchBackend(ctx, kick)
	}()
	go func() {
		defer wg.Done()
		m.diskLoop(ctx)
	}()
	if m.pools != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.poolLoop(ctx)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	// The timeouts' actions the reaper started (fire) end with ctx too.
	l.acts.Wait()
}

// activityLoop, on a daemon that may not lead, writes the activity of its
// calls (and of the sandboxes it keeps busy) to the store every reap
// interval, and once more at the end; with the same listing it closes
// the routes of sandboxes another daemon destroyed (dropGoneRoutes).
func (m *Manager) activityLoop(ctx context.Context) {
	tick := time.NewTicker(m.life.opts.ReapInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.flushActivity(context.Background(), nil)
			return
		case now := <-tick.C:
			if recs, ok := m.persistActivity(ctx, now.UTC()); ok {
				m.dropGoneRoutes(ctx, recs)
			}
		}
	}
}

// persistActivity counts the sandboxes this daemon keeps busy as active at
// now and writes what moved to the store; it returns the records it
// listed.
func (m *Manager) persistActivity(ctx context.Context, now time.Time) ([]wire.Sandbox, bool) {
	recs, err := m.store.List(ctx, store.Filter{})
	if err != nil {
		m.log.Warn("reaper: list sandboxes", "err", err)
		return nil, false
	}
	known := make(map[string]bool, len(recs))
	for _, sb := range recs {
		known[sb.ID] = true
		if m.life.activity.busy(sb.ID) {
			// Busy counts as activity all along, also for a later daemon.
			m.life.activity.touch(sb.ID, now)
		}
	}
	m.flushActivity(ctx, known)
	return recs, true
}

func (m *Manager) reapLoop(ctx context.Context) {
	// Activity persisted by an earlier daemon: deadlines carry across
	// restarts.
	if act, err := m.store.Activity(ctx); err == nil {
		for id, at := range act {
			m.life.activity.touch(id, at)
		}
		m.life.activity.unpersisted(0)
	}
	tick := time.NewTicker(m.life.opts.ReapInterval)
	defer tick.Stop()
	lastPrune := time.Time{}
	for {
		select {
		case <-ctx.Done():
			m.flushActivity(context.Background(), nil)
			return
		case now := <-tick.C:
			m.reap(ctx, now.UTC())
			if now.Sub(lastPrune) > time.Hour {
				lastPrune = now
				if _, err := m.store.PruneEvents(ctx, now.Add(-eventRetention)); err != nil {
					m.log.Warn("prune event logs", "err", err)
				}
			}
		}
	}
}

// flushActivity persists activity that moved by more than the flush
// interval; known, when not nil, limits it to sandboxes with a record.
func (m *Manager) flushActivity(ctx context.Context, known map[string]bool) {
	flush := m.life.opts.ActivityFlush
	if known == nil {
		flush = 0
	}
	for id, at := range m.life.activity.unpersisted(flush) {
		if known != nil && !known[id] {
			m.life.activity.forget(id)
			continue
		}
		if err := m.store.SetActivity(ctx, id, at); err != nil {
			m.log.Warn("persist activity", "sandbox", id, "err", err)
		}
	}
}

// reap fires the timeouts that are due.
func (m *Manager) reap(ctx context.Context, now time.Time) {
	recs, ok := m.persistActivity(ctx, now)
	if !ok {
		return
	}
	for _, sb := range recs {
		kind, action, ok := m.due(sb, now)
		if !ok {
			continue
		}
		l := m.life
		l.mu.Lock()
		if l.acting[sb.ID] {
			l.mu.Unlock()
			continue
		}
		l.acting[sb.ID] = true
		l.mu.Unlock()
		l.acts.Add(1)
		go func() {
			defer l.acts.Done()
			defer func() {
				l.mu.Lock()
				delete(l.acting, sb.ID)
				l.mu.Unlock()
			}()
			m.fire(ctx, sb, kind, action, now)
		}()
	}
}

// due says whether a timeout of sb fires at now, which, and its action.
func (m *Manager) due(sb wire.Sandbox, now time.Time) (kind, action string, ok bool) {
	t := sb.Timeouts
	if t == nil || sb.State == wire.StateCreating || sb.State == wire.StateDestroyed {
		return "", "", false
	}
	if t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) {
		return "lifetime", t.LifetimeAction, true
	}
	if t.IdleSeconds > 0 && sb.State == wire.StateRunning && !m.life.activity.busy(sb.ID) {
		if !now.Before(m.lastActivity(sb).Add(time.Duration(t.IdleSeconds) * time.Second)) {
			return "idle", t.IdleAction, true
		}
	}
	return "", "", false
}

// fire applies a timeout's action. A lifetime fires once: its deadline is
// cleared, so a sandbox started again afterwards runs until its lifetime is
// extended or set anew.
func (m *Manager) fire(ctx context.Context, sb wire.Sandbox, kind, action string, now time.Time) {
	log := m.log.With("sandbox", sb.ID, "timeout", kind, "action", action)
	if kind == "idle" && m.keepAliveRunning(ctx, sb.ID) {
		// A keepAlive process holds the sandbox up: that is activity.
		m.Touch(sb.ID)
		return
	}
	// The record may have moved on since the reaper listed it (a call came
	// in, the sandbox was stopped): only a timeout still due fires.
	fresh, err := m.store.Get(ctx, sb.ID)
	if err != nil {
		return
	}
	if k, _, ok := m.due(fresh, now); !ok || k != kind {
		return
	}
	sb = fresh
	if kind == "lifetime" && action != wire.ActionDestroy {
		if err := m.clearExpiry(ctx, sb.ID); err != nil {
			log.Error("clear expired lifetime", "err", err)
			return
		}
	}
	secs := sb.Timeouts.IdleSeconds
	if kind == "lifetime" {
		secs = sb.Timeouts.MaxLifetimeSeconds
	}
	log.Info("timeout fired")
	m.Event(ctx, sb.ID, wire.SandboxEventTimedOut, fmt.Sprintf("%s timeout of %ds: %s", kind, secs, action),
		map[string]string{"timeout": kind, "action": action})
	switch action {
	case wire.ActionStop:
		_, err = m.Stop(ctx, sb.ID)
	case wire.ActionPause:
		if sb.State == wire.StateRunning {
			_, err = m.Pause(ctx, sb.ID)
		}
	case wire.ActionDestroy:
		err = m.Destroy(ctx, sb.ID)
	}
	if err != nil {
		log.Error("timeout action failed", "err", err)
		m.Event(ctx, sb.ID, wire.SandboxEventError, fmt.Sprintf("%s timeout: %s failed: %v", kind, action, err), nil)
	}
}

func (m *Manager) clearExpiry(ctx context.Context, id string) error {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if sb.Timeouts == nil {
		return nil
	}
	sb.Timeouts.ExpiresAt = nil
	return m.store.Put(ctx, sb)
}

// keepAliveRunning asks the agent whether a process started with keepAlive
// still runs. An agent that cannot say (no processes API, not connected)
// holds nothing up.
func (m *Manager) keepAliveRunning(ctx context.Context, id string) bool {
	conn, err := m.Agent(ctx, id)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	running := false
	err = conn.Processes(ctx, func(p wire.Process) bool {
		running = p.KeepAlive && p.State == wire.ProcessRunning
		return !running
	})
	if err != nil {
		m.log.Debug("reaper: list keepAlive processes", "sandbox", id, "err", err)
		return false
	}
	return running
}
