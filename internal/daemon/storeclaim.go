package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/leader"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// Several daemons serve one PostgreSQL store only on the Kubernetes
// driver, whose boxes depend on no daemon's host: a pod dials whichever
// daemon of the set listens, and any daemon reaches it through the
// cluster. A Docker box hangs on its daemon's host (its run dir, agent
// socket, egress network and firewall are the daemon's), so a daemon on
// the Docker driver holds the store's "daemon" lease while it runs, and a
// second daemon on the same store refuses to start rather than have two
// daemons act on one engine's boxes.
const (
	storeLease      = "daemon"
	storeLeaseTTL   = 30 * time.Second
	storeLeaseRenew = 10 * time.Second
)

// storeHolder names this daemon in the lease: its host and data dir, which
// stay the same across a restart, so a daemon restarted after a SIGKILL
// takes its own lease back at once.
func storeHolder(cfg config.Config) string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + cfg.DataDir
}

// claimStore takes the store's daemon lease and renews it until the
// returned stop is called, which gives it up.
func claimStore(ctx context.Context, st *store.Store, cfg config.Config, log *slog.Logger) (stop func(), err error) {
	holder := storeHolder(cfg)
	ok, err := st.AcquireLease(ctx, storeLease, holder, time.Now(), storeLeaseTTL)
	if err != nil {
		return nil, fmt.Errorf("claim the store: %w", err)
	}
	if !ok {
		other, until, err := st.LeaseHolder(ctx, storeLease)
		if err != nil {
			return nil, fmt.Errorf("claim the store: %w", err)
		}
		return nil, fmt.Errorf("another hotcell daemon (%s) serves this store (claimed until %s): several daemons serve one store only on the kubernetes driver (docs/kubernetes.md, Several daemons on one store); stop that daemon (its claim lapses %s after it stops) or give this one a store of its own",
			other, until.Format(time.RFC3339), storeLeaseTTL)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(storeLeaseRenew)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			ok, err := st.AcquireLease(rctx, storeLease, holder, time.Now(), storeLeaseTTL)
			switch {
			case rctx.Err() != nil:
				return
			case err != nil:
				log.Error("renewing this daemon's claim on the store failed", "err", err)
			case !ok:
				log.Error("another daemon took this daemon's claim on the store: two daemons now serve it", "holder", holder)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		rel, cancelRel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelRel()
		if err := st.ReleaseLease(rel, storeLease, holder); err != nil {
			log.Warn("giving up this daemon's claim on the store failed; it lapses by itself", "err", err, "after", storeLeaseTTL)
		}
	}, nil
}

// loopsLease is the store lease under which a daemon on PostgreSQL runs
// its reaper, reconciler, backend and disk watches and pool refill
// (sandbox.Options.Elector): of several daemons on one store exactly one
// runs them. It is a lease of the store rather than a Kubernetes Lease
// because the store is what every daemon of a set shares whatever the
// driver, and it needs no further right on the cluster.
const loopsLease = "sandbox-loops"

// loopsElector is the Elector of the manager's loops: a StoreLease on a
// PostgreSQL store, nil (the loops always run) on a SQLite file, which
// one daemon has to itself. The holder is storeHolder's, so a daemon
// restarted after a SIGKILL leads again at once rather than after the
// lease's TTL.
func loopsElector(cfg config.Config, st *store.Store, log *slog.Logger) leader.Elector {
	if !store.IsPostgresURL(cfg.StoreTarget()) {
		return nil
	}
	return &leader.StoreLease{Store: st, Name: loopsLease, Holder: storeHolder(cfg), Log: log}
}

// registryHeartbeat is how often a daemon on PostgreSQL renews its row in
// the daemon registry (store.Heartbeat).
const registryHeartbeat = 5 * time.Second

// registry is this daemon's entry in the daemon registry of a PostgreSQL
// store: its id (storeHolder's: the same across restarts), the URL of its
// API, and the sandboxes whose agent session it holds
// (sandbox.SessionRegistry).
type registry struct {
	st  *store.Store
	id  string
	url string
	log *slog.Logger
}

// newRegistry is this daemon's entry in a PostgreSQL store's registry;
// nil on a SQLite file, which one daemon has to itself. register puts it
// in once the API listens.
func newRegistry(cfg config.Config, st *store.Store, log *slog.Logger) *registry {
	if !store.IsPostgresURL(cfg.StoreTarget()) {
		return nil
	}
	return &registry{st: st, id: storeHolder(cfg), log: log}
}

// register records the daemon, its API reachable at url.
func (r *registry) register(ctx context.Context, url string) error {
	r.url = url
	if err := r.st.Heartbeat(ctx, r.id, url, time.Now()); err != nil {
		return fmt.Errorf("register in the daemon registry: %w", err)
	}
	return nil
}

// Hold implements sandbox.SessionRegistry.
func (r *registry) Hold(ctx context.Context, id string) error {
	return r.st.HoldSession(ctx, id, r.id, time.Now())
}

// Drop implements sandbox.SessionRegistry.
func (r *registry) Drop(ctx context.Context, id string) {
	if err := r.st.DropSession(ctx, id, r.id); err != nil {
		r.log.Warn("daemon registry: drop the agent session", "sandbox", id, "err", err)
	}
}

// run renews the heartbeat until ctx ends, then unregisters the daemon
// (and its sessions): the others need not wait for its heartbeat to age.
func (r *registry) run(ctx context.Context) error {
	t := time.NewTicker(registryHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := r.st.Unregister(uctx, r.id); err != nil {
				r.log.Warn("daemon registry: unregister", "err", err)
			}
			return nil
		case <-t.C:
			if err := r.st.Heartbeat(ctx, r.id, r.url, time.Now()); err != nil && ctx.Err() == nil {
				r.log.Warn("daemon registry: heartbeat", "err", err)
			}
		}
	}
}

// aliveBeats is how many heartbeats a daemon may miss before the others
// take it for dead: its unfinished creates are then rolled back by them
// (sandbox.Peers).
const aliveBeats = 3

// Self implements sandbox.Peers.
func (r *registry) Self() string { return r.id }

// Alive implements sandbox.Peers: daemon id is registered and beat within
// aliveBeats heartbeats.
func (r *registry) Alive(ctx context.Context, id string) (bool, error) {
	ds, err := r.st.Daemons(ctx)
	if err != nil {
		return false, err
	}
	bound := time.Now().Add(-aliveBeats * registryHeartbeat)
	for _, d := range ds {
		if d.ID == id {
			return d.Alive(bound), nil
		}
	}
	return false, nil
}

// peersOpt keeps a nil *registry from becoming a non-nil interface.
func peersOpt(r *registry) sandbox.Peers {
	if r == nil {
		return nil
	}
	return r
}

// sessionsOpt keeps a nil *registry from becoming a non-nil interface.
func sessionsOpt(r *registry) sandbox.SessionRegistry {
	if r == nil {
		return nil
	}
	return r
}
