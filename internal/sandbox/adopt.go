package sandbox

import (
	"context"
	"errors"

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
