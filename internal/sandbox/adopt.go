package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// AdoptRoute takes a route of the TCP agent channel for sandbox id, which
// this daemon has none of, and reports whether it did: the daemons of a
// set on one store each accept the agent of any sandbox of the store, not
// only those whose routes they registered at Recover or Create, so an
// agent whose daemon died is served by the one it redials. The channel
// asks (agentconn.Channel.OnUnknown) only once the agent's credential
// checked out. The session then comes up as any other: the connect hook
// sends the sandbox's env and records this daemon as its holder.
//
// Only a running or paused sandbox is taken. A create, a start or a
// restart is the business of the daemon running it, which listened for
// the agent first and waits for it there: taking the agent here would
// leave that daemon waiting; refused, the agent dials its next address.
// A record gone or destroyed is refused, as is a sandbox a lifecycle
// operation holds, of this daemon or, with Options.Locks, of another (it
// listens itself if it needs to).
func (m *Manager) AdoptRoute(ctx context.Context, id string) bool {
	unlock, ok := m.lockNow(ctx, id)
	if !ok {
		return false
	}
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("look up the sandbox of an agent with no route here", "sandbox", id, "err", err)
		}
		return false
	}
	if sb.State != wire.StateRunning && sb.State != wire.StatePaused {
		return false
	}
	if _, err := m.listen(id); err != nil {
		m.log.Warn("take the route of an agent's sandbox", "sandbox", id, "err", err)
		return false
	}
	return true
}

// dropGoneRoutes closes this daemon's routes of sandboxes that no agent
// of theirs should reach here, by the listing recs of the store: on a set
// another daemon may destroy or stop a sandbox whose agent route this one
// took (AdoptRoute, Recover's listen), and its teardown or stop closes
// only its own. A route of a sandbox whose record is gone or destroyed
// goes with its run dir; one of a stopped sandbox (or one in error) with
// no live session goes alone: left, it would take the agent of the
// sandbox's next start on another daemon when the agent dials this one
// first, and that daemon would wait for its agent in vain. Every daemon
// runs it (activityLoop), as each keeps its own routes. A candidate is
// looked up again under its lock taken only if free: a create, claim or
// start listens under the lock (a create after writing its record), so a
// route of an operation in flight is never taken for a leftover of a
// listing older than it.
func (m *Manager) dropGoneRoutes(ctx context.Context, recs []wire.Sandbox) {
	states := make(map[string]wire.State, len(recs))
	for _, sb := range recs {
		states[sb.ID] = sb.State
	}
	m.mu.Lock()
	var cands []string
	for id, c := range m.conns {
		st, ok := states[id]
		if !ok || st == wire.StateDestroyed || (routeIdle(st) && !c.Connected()) {
			cands = append(cands, id)
		}
	}
	m.mu.Unlock()
	for _, id := range cands {
		if ctx.Err() != nil {
			return
		}
		m.dropRoute(ctx, id)
	}
}

// routeIdle reports whether a sandbox in state st has no agent to route:
// its box is stopped, or its start failed.
func routeIdle(st wire.State) bool { return st == wire.StateStopped || st == wire.StateError }

// dropRoute is dropGoneRoutes for one candidate, under its lock.
func (m *Manager) dropRoute(ctx context.Context, id string) {
	unlock, ok := m.lockNow(ctx, id)
	if !ok {
		return
	}
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	switch {
	case errors.Is(err, errdefs.ErrNotFound), err == nil && sb.State == wire.StateDestroyed:
		m.log.Info("closing the route of a sandbox another daemon destroyed", "sandbox", id)
		m.closeConn(id)
		m.life.activity.forget(id)
		if err := os.RemoveAll(filepath.Join(m.opts.DataDir, "sandboxes", id)); err != nil {
			m.log.Warn("remove the run dir of a sandbox another daemon destroyed", "sandbox", id, "err", err)
		}
	case err == nil && routeIdle(sb.State) && !m.HasSession(id):
		m.log.Info("closing the route of a stopped sandbox", "sandbox", id, "state", sb.State)
		m.closeConn(id)
	case err != nil:
		m.log.Warn("look up the sandbox of a route", "sandbox", id, "err", err)
	}
}
