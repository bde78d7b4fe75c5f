package daemon

import (
	"log/slog"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/leader"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// sandboxLocks is the lock of each sandbox's lifecycle among the daemons
// of a PostgreSQL store (sandbox.Options.Locks), a lease of the store
// "sandbox-<id>" held while an operation runs; nil on a SQLite file, which
// one daemon has to itself: its lock stays in its process, with no round
// trip. The holder is the daemon's registry id (host and data dir), so a
// daemon restarted after a SIGKILL takes back at once the locks of the
// operations it was killed in, rather than waiting out their TTL.
func sandboxLocks(cfg config.Config, st *store.Store, log *slog.Logger) sandbox.Locker {
	if !store.IsPostgresURL(cfg.StoreTarget()) {
		return nil
	}
	return &leader.Locks{Store: st, Holder: storeHolder(cfg), Log: log}
}
