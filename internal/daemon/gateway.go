package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/gateway"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// newGateway loads the LLM gateway's providers and tokens and, when it is
// on, listens where sandboxes reach it. On the Docker driver that is the
// egress network's gateway address, the one host address every sandbox may
// reach (the firewall lets egress_gateway_port through); sandboxes reach it
// as host.docker.internal, which the egress controller points at that
// address, and a call is tied to its sandbox by its source address in the
// egress subnet. On the Kubernetes driver it is agent_listen's host at
// egress_gateway_port, which pods reach at agent_advertise's host
// (config.KubeGateway), and a call is tied to its sandbox by its pod's
// address, podAddr. The server is nil when the gateway is off; Run serves
// it and runs the gateway's usage flusher. With neither (the Docker driver
// without its egress controller) nothing ties a request to its sandbox's
// address, so the gateway has no listener.
func newGateway(ctx context.Context, cfg config.Config, st *store.Store, eg egressControl, podAddr func(context.Context, string) (netip.Addr, error), ops *inflight.Group, log *slog.Logger) (*gateway.Gateway, *http.Server, net.Listener, error) {
	port := cfg.Egress().GatewayPort
	opts := gateway.Options{
		Providers:  cfg.Providers,
		Store:      st,
		SandboxURL: "http://" + net.JoinHostPort(docker.HostGateway, strconv.Itoa(port)),
		Log:        log,

		MaxConcurrent: cfg.MaxConcurrent(),
	}
	if store.IsPostgresURL(cfg.StoreTarget()) {
		// Other daemons of the set may revoke a token this gateway knows,
		// and count calls against the budgets it checks.
		opts.Recheck = gateway.DefaultRecheck
		opts.Shared = true
		// Its calls' reservations are recorded under its registry id
		// and count while its heartbeat does (registry.Alive).
		opts.Daemon = storeHolder(cfg)
		opts.LiveFor = aliveBeats * registryHeartbeat
	}
	var addr string
	ec, onEgressNetwork := eg.(*egress.Controller)
	switch {
	case cfg.Kubernetes() && podAddr != nil:
		listen, advertise := cfg.KubeGateway()
		addr, opts.SandboxURL = listen, "http://"+advertise
		opts.SandboxAddr = newRecentAddrs(podAddr, podAddrTTL).get
	case onEgressNetwork:
		addr = net.JoinHostPort(ec.Gateway().String(), strconv.Itoa(port))
		opts.Subnet, opts.HostAddr, opts.SandboxAt = ec.Subnet(), ec.Gateway(), ec.SandboxAt
	}
	g, err := gateway.New(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if addr == "" {
		log.Info("llm gateway off: sandboxes of this driver have no egress network to reach it on")
		return g, nil, nil, nil
	}
	if port == 0 || !g.Enabled() {
		log.Info("llm gateway off", "port", port, "providers", len(cfg.Providers))
		return g, nil, nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("llm gateway: listen on %s: %w", addr, err)
	}
	hs := &http.Server{
		// Its requests are operations: the shutdown waits for streams in
		// flight, whose usage is in the final flush.
		Handler:           ops.Handler(g.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("llm gateway serving", "addr", addr, "sandboxURL", opts.SandboxURL, "providers", g.Providers())
	return g, hs, ln, nil
}

// podAddrTTL is how long the gateway takes a sandbox's pod address as
// known. A pod's address changes only with a new pod, which a stop and
// start makes in more time than this.
const podAddrTTL = 2 * time.Second

// recentAddrs keeps each sandbox's pod address for a short while: the
// gateway checks a call's source at every call, and a sandbox's burst of
// calls would otherwise be as many reads of its pod from the API server.
// A failed look-up is not kept.
type recentAddrs struct {
	lookup func(context.Context, string) (netip.Addr, error)
	ttl    time.Duration

	mu sync.Mutex
	m  map[string]recentAddr
}

type recentAddr struct {
	addr netip.Addr
	at   time.Time
}

func newRecentAddrs(lookup func(context.Context, string) (netip.Addr, error), ttl time.Duration) *recentAddrs {
	return &recentAddrs{lookup: lookup, ttl: ttl, m: map[string]recentAddr{}}
}

func (r *recentAddrs) get(ctx context.Context, id string) (netip.Addr, error) {
	now := time.Now()
	r.mu.Lock()
	e, ok := r.m[id]
	r.mu.Unlock()
	if ok && now.Sub(e.at) < r.ttl {
		return e.addr, nil
	}
	a, err := r.lookup(ctx, id)
	if err != nil {
		return a, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, old := range r.m { // the destroyed sandboxes' go too
		if now.Sub(old.at) >= r.ttl {
			delete(r.m, k)
		}
	}
	r.m[id] = recentAddr{a, now}
	return a, nil
}

// reloadGateway re-reads the config as at start and swaps in the
// providers' keys (POST /v1/gateway/reload, SIGHUP).
func reloadGateway(cfg config.Config, gw *gateway.Gateway) (wire.GatewayReload, error) {
	next, err := cfg.Reload()
	if err != nil {
		return wire.GatewayReload{}, fmt.Errorf("reload config: %w", errors.Join(errdefs.ErrInvalidArgument, err))
	}
	res, err := gw.Reload(next.Providers)
	if err != nil {
		return res, errors.Join(errdefs.ErrInvalidArgument, err)
	}
	return res, nil
}

// reloadOnSignal reloads the gateway's keys on every SIGHUP until ctx ends.
func reloadOnSignal(ctx context.Context, cfg config.Config, gw *gateway.Gateway, log *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			if _, err := reloadGateway(cfg, gw); err != nil {
				// The keys in use stay: a failed reload changes nothing.
				log.Warn("SIGHUP: reload gateway keys", "err", err)
			}
		}
	}
}
