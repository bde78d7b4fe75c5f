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

// dropGoneRoutes closes this daemon's routes (Conn, run dir) of sandboxes
// whose record recs (a listing of the store) no longer has, or has as
// destroyed: on a set another daemon may destroy a sandbox whose agent
// route this one took (AdoptRoute, Recover's listen), and its teardown
// closes only its own. Every daemon runs it (activityLoop), as each keeps
// its own routes. A candidate is looked up again under its lock taken
// only if free: a create or a claim writes its record before it listens,
// under the lock, so a route of an operation in flight is never taken for
// a leftover of a listing older than its record.
func (m *Manager) dropGoneRoutes(ctx context.Context, recs []wire.Sandbox) {
	live := make(map[string]bool, len(recs))
	for _, sb := range recs {
		live[sb.ID] = sb.State != wire.StateDestroyed
	}
	m.mu.Lock()
	var gone []string
	for id := range m.conns {
		if !live[id] {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	for _, id := range gone {
		if ctx.Err() != nil {
			return
		}
		unlock, ok := m.lockNow(ctx, id)
		if !ok {
			continue
		}
		sb, err := m.store.Get(ctx, id)
		switch {
		case errors.Is(err, errdefs.ErrNotFound), err == nil && sb.State == wire.StateDestroyed:
			m.log.Info("closing the route of a sandbox another daemon destroyed", "sandbox", id)
			m.closeConn(id)
			m.life.activity.forget(id)
			if err := os.RemoveAll(filepath.Join(m.opts.DataDir, "sandboxes", id)); err != nil {
				m.log.Warn("remove the run dir of a sandbox another daemon destroyed", "sandbox", id, "err", err)
			}
		case err != nil:
			m.log.Warn("look up the sandbox of a route", "sandbox", id, "err", err)
		}
		unlock()
	}
}
