// Package daemon wires hotcell serve together: config → store → driver →
// sandbox manager → API server, and runs them until the context ends.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/apikeys"
	"github.com/hotcell/hotcell/internal/buildinfo"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/metrics"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/templates"
	"github.com/hotcell/hotcell/internal/wire"
)

// Ready, when set, is called once the API listens, with its address and
// whether the token was just created. Tests and the CLI use it.
type Ready func(addr net.Addr, tokenPath string, tokenCreated bool)

// Run serves the API until ctx ends, then shuts down cleanly. Sandboxes are
// left running: the next daemon re-adopts them.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return RunWithReady(ctx, cfg, log, nil)
}

// RunWithReady is Run with a callback for when the API is listening.
func RunWithReady(ctx context.Context, cfg config.Config, log *slog.Logger, ready Ready) error {
	if log == nil {
		log = slog.Default()
	}
	protectFromOOM(log)
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	token, created, err := config.EnsureToken(cfg.TokenPath())
	if err != nil {
		return err
	}
	if created {
		log.Info("created API token", "path", cfg.TokenPath())
	}
	// On Kubernetes the agent reaches pods from kubernetes_agent_image,
	// and the daemon may have no binary of it (config.Validate).
	var agentPath string
	if cfg.AgentBinary != "" {
		if agentPath, err = installAgent(cfg.AgentBinary, cfg.DataDir); err != nil {
			return err
		}
	}

	st, err := store.Open(ctx, cfg.StoreTarget())
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	if store.IsPostgresURL(cfg.StoreTarget()) && !cfg.Kubernetes() {
		release, err := claimStore(ctx, st, cfg, log)
		if err != nil {
			return err
		}
		defer release() // before the store closes
	}
	if store.IsPostgresURL(cfg.StoreTarget()) {
		// The daemons of a set answer one token (identity.go).
		shared, err := setSecret(ctx, st, settingAPIToken, cfg.TokenPath(), token, created, log)
		if err != nil {
			return err
		}
		created = created && shared == token
		token = shared
	}

	be, err := openBackend(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer be.close()
	drv := be.drv

	// ops owns the API's requests and the work they start that outlives
	// them (creates, destroys, backups, restores): the shutdown waits for
	// it before the store closes.
	ops := inflight.New()
	agentLn, agentMat, err := listenAgentChannel(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	if agentLn != nil {
		defer agentLn.Close() // the channel's, unless the start fails before it serves
	}
	eg, err := be.startEgress(ctx, cfg, listenerPort(agentLn), log)
	if err != nil {
		return err
	}
	defer eg.Close() // after every goroutine of the group below
	var agentCh *agentconn.Channel
	if agentLn != nil {
		agentCh = newAgentChannel(cfg, agentLn, agentMat, eg.Gateway(), log)
		// After the manager's Close (deferred below), which closes the
		// sandboxes' routes.
		defer agentCh.Close()
	}
	gw, gwServer, gwListener, err := newGateway(ctx, cfg, st, eg, be.podAddr, ops, log)
	if err != nil {
		return err
	}
	if gwListener != nil {
		defer gwListener.Close() // its server's, unless the start fails before it serves
	}
	// The sampler keeps each sandbox's previous reading, so CPU % is a
	// delta whoever asks: an API call, a stream or a metrics scrape.
	sampler := metrics.NewSampler(drv)
	// The metrics come first, so the manager can time its steps into
	// them; their sandbox listing runs only at a scrape, once mgr is set.
	var mgr *sandbox.Manager
	mets := metrics.New(metrics.Options{
		Sandboxes: func(ctx context.Context) ([]wire.Sandbox, error) { return mgr.List(ctx, sandbox.ListFilter{}) },
		Stats:     sampler.Sample,
		Log:       log,
	})
	mets.Registry().MustRegister(gw.Collector())
	if c := eg.Collector(); c != nil {
		mets.Registry().MustRegister(c)
	}
	if agentCh != nil {
		mets.Registry().MustRegister(agentChannelRefused(agentCh))
	}
	// The templates' users are the manager's sandboxes, and the manager's
	// pools make boxes from the templates.
	var (
		tplImages driver.ImageBuilder = noImageBuilds{be.name}
		snapshots driver.Snapshotter  // nil: snapshots are refused (501)
	)
	switch {
	case be.docker != nil:
		imgs := imagesAfterDestroys{be.docker, &mgr}
		tplImages, snapshots = imgs, imgs
	case be.kube != nil && be.kube.CanSnapshot():
		imgs := kubeImages{be.kube, &mgr, cfg}
		tplImages, snapshots = imgs, imgs
	}
	reg := newRegistry(cfg, st, log)
	instance, err := setInstance(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	tpls := templates.New(st, tplImages, func(ctx context.Context) ([]wire.Sandbox, error) {
		return mgr.List(ctx, sandbox.ListFilter{})
	}, log)
	tpls.UseImages(drv.EnsureImage) // templates from existing images, on every driver
	mgr = sandbox.New(drv, st, sandbox.Options{
		DataDir:         cfg.DataDir,
		Instance:        instance,
		AgentBinary:     agentPath,
		DefaultImage:    cfg.DefaultImage,
		SetupTimeout:    cfg.SetupTimeout,
		GitTimeout:      cfg.GitTimeout,
		AllowLocalRepos: cfg.AllowLocalRepos,
		Egress:          eg,
		Log:             log,
		Lifecycle:       sandbox.LifecycleOptionsFrom(cfg),
		Gateway:         gw,
		Stats:           sampler.Sample,
		Ops:             ops,

		DefaultLimits:  cfg.DefaultLimits,
		MaxLimits:      cfg.MaxLimits,
		DefaultRuntime: cfg.DefaultRuntime,
		Steps:          mets.ObserveStep,
		PoolStore:      st,
		Templates:      tpls,
		AgentChannel:   agentChannelOpt(agentCh),
		Elector:        loopsElector(cfg, st, log),
		Locks:          sandboxLocks(cfg, st, log),
		Sessions:       sessionsOpt(reg),
		Peers:          peersOpt(reg),
	})
	defer mgr.Close() // also when a later step of the start fails
	if be.kube != nil {
		be.kube.UseAgents(mgr.Agent) // a commit reads the box through its agent
	}
	if agentCh != nil {
		// Any sandbox of the store, not only this daemon's: the agents
		// of a daemon of the set that died redial here.
		agentCh.OnUnknown = mgr.AdoptRoute
	}
	// Before Recover, which re-adopts the boxes of the pools it loads.
	if err := mgr.ConfigurePools(ctx, cfg.PoolMap()); err != nil {
		return fmt.Errorf("configure pools: %w", err)
	}
	if err := mgr.Recover(ctx); err != nil {
		return fmt.Errorf("recover sandboxes: %w", err)
	}
	bk, err := startBackups(ctx, cfg, st, snapshots, mgr, ops, log)
	if err != nil {
		return err
	}

	tpls.UseCapture(bk, ops)
	tpls.BoundBuilds(cfg.TemplateBuildTimeout)
	mets.Registry().MustRegister(mgr.PoolCollector())

	keys := apikeys.New(st, log)
	e2bKey, err := e2bSecret(ctx, cfg, st, log)
	if err != nil {
		return err
	}
	e2bSrv, err := newE2B(cfg, token, e2bKey, keys, mgr, tpls, bk, log)
	if err != nil {
		return err
	}
	// Of several daemons on one store, calls for a sandbox whose agent
	// another daemon holds go to it (forward.go): those on the listener
	// and the MCP tools' in-process calls alike. srv is set below, before
	// any call.
	var (
		srv     *api.Server
		forward func(http.Handler) http.Handler
	)
	if reg != nil {
		forwarded := NewForwardedCounter()
		mets.Registry().MustRegister(forwarded)
		forward = Forwarding{
			Counted:    forwarded,
			Self:       reg.id,
			SandboxOf:  func(r *http.Request) (string, bool) { return srv.SandboxOf(r) },
			HasSession: mgr.HasSession,
			Holders:    st,
			Log:        log,
		}.Handler
	}
	srv = api.New(withManager(api.Options{
		Forward:            forward,
		Token:              token,
		APIKeys:            keys,
		E2B:                e2bSrv.Handler(),
		ExecTimeout:        cfg.ExecTimeout,
		MaxExecOutput:      cfg.MaxExecOutput,
		StreamWriteTimeout: cfg.StreamWriteTimeout,
		PreviewDomain:      cfg.PreviewDomain,
		PreviewTokenTTL:    cfg.PreviewTokenTTL,
		ConsoleSessionTTL:  cfg.ConsoleSessionTTL,
		AllowLocalRepos:    cfg.AllowLocalRepos,
		Hosts:              api.NewHostAllowlist(cfg.ListenHost(), cfg.PreviewDomain, cfg.AllowedHostList()),
		Metrics:            mets.Handler(),
		ObserveRequest:     mets.ObserveRequest,
		Log:                log,
		Backups:            bk,
		Templates:          tpls,
		Gateway:            gw,
		ReloadGateway: func(context.Context) (wire.GatewayReload, error) {
			return reloadGateway(cfg, gw)
		},
		Host: func(ctx context.Context) (wire.HostInfo, error) {
			di, err := drv.Info(ctx)
			if err != nil {
				return wire.HostInfo{}, fmt.Errorf("%s driver: %w", be.name, errors.Join(errdefs.ErrUnavailable, err))
			}
			n, err := mgr.Count(ctx)
			if err != nil {
				return wire.HostInfo{}, err
			}
			return wire.HostInfo{
				Version: buildinfo.Version(), Driver: di.Name, EngineVersion: di.EngineVersion,
				CPUs: di.CPUs, MemoryBytes: di.MemoryBytes, Sandboxes: n, DefaultImage: cfg.DefaultImage,
				DefaultLimits: cfg.DefaultLimits, MaxLimits: cfg.MaxLimits,
				DiskLimitEnforced: be.diskLimitEnforced(),
				Runtimes:          di.Runtimes, DefaultRuntime: cfg.DefaultRuntime,
			}, nil
		},
	}, mgr))

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	if reg != nil {
		if err := reg.register(ctx, advertiseURL(cfg, ln.Addr(), log)); err != nil {
			ln.Close()
			return err
		}
	}
	var handler http.Handler = srv.Handler()
	if forward != nil {
		handler = forward(handler) // inside ops: forwarded calls count in flight
	}
	hs := &http.Server{
		Handler:           ops.Handler(handler),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(mgr.CloseStreams) // event streams end, not hold the shutdown
	log.Info("hotcell serving", "addr", ln.Addr().String(), "dataDir", cfg.DataDir, "token", cfg.TokenPath(), "goroutines", runtime.NumGoroutine())
	if ready != nil {
		ready(ln.Addr(), cfg.TokenPath(), created)
	}

	// One group runs everything until ctx ends or a part fails; the
	// shutdown then takes the parts down in order. loops are the reaper
	// and reconciler, which stop first; services (egress upkeep, gateway
	// usage flushes) stop last, after the operations that use them.
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	services, stopServices := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServices()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve("api", hs, ln) })
	if gwServer != nil {
		g.Go(func() error { return serve("llm gateway", gwServer, gwListener) })
	}
	if agentCh != nil {
		g.Go(agentCh.Serve)
	}
	g.Go(func() error { return eg.Run(services) })
	g.Go(func() error { return reloadOnSignal(services, cfg, gw, log) })
	g.Go(func() error {
		// Its last flush, at the end, fails only the usage it could not
		// write; the daemon still stops cleanly.
		if err := gw.Run(services); err != nil {
			log.Warn("write gateway usage", "err", err)
		}
		return nil
	})
	g.Go(func() error { return mgr.RunBackground(loops) })
	if reg != nil {
		g.Go(func() error { return reg.run(services) })
	}
	g.Go(func() error {
		<-gctx.Done()
		sd := shutdown{
			log: log, grace: cfg.ShutdownTimeout, ops: ops,
			servers: []*http.Server{hs, gwServer}, stopLoops: stopLoops,
			closeConns: mgr.Close, stopServices: stopServices,
		}
		sd.run()
		if agentCh != nil {
			agentCh.Close() // ends its Serve; the sessions ended with mgr.Close
		}
		return nil
	})
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// serve serves hs on ln until the shutdown closes it.
func serve(name string, hs *http.Server, ln net.Listener) error {
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", name, err)
	}
	return nil
}

// installAgent copies the agent binary into the data dir, where boxes
// bind-mount it from. A copy keeps running boxes independent of the build
// tree; replacing it by rename leaves the file a running box holds intact.
func installAgent(src, dataDir string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("read agent binary %s (build it with `make build` or pass --agent-binary): %w", src, err)
	}
	dir := filepath.Join(dataDir, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	dst := filepath.Join(dir, "hotcell-agent")
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
		return dst, nil
	}
	tmp, err := os.CreateTemp(dir, ".hotcell-agent-*")
	if err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, bytes.NewReader(data)); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("install agent: %w", err)
	}
	return dst, nil
}
