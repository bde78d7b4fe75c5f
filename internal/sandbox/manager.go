// Package sandbox owns the lifecycle of sandboxes: the state machine, the
// store records, the agent connections and the reconciliation of what the
// store says with what the driver reports.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/keyedmutex"
	"github.com/hotcell/hotcell/internal/leader"
	"github.com/hotcell/hotcell/internal/redact"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// SessionRegistry records which daemon holds each sandbox's agent session.
type SessionRegistry interface {
	// Hold records that this daemon holds sandbox id's session; an error
	// refuses the session (the agent dials again).
	Hold(ctx context.Context, id string) error
	// Drop records that it no longer does.
	Drop(ctx context.Context, id string)
}

// Store is what the manager needs from persistence.
type Store interface {
	Put(ctx context.Context, sb wire.Sandbox) error
	Get(ctx context.Context, id string) (wire.Sandbox, error)
	List(ctx context.Context, f store.Filter) ([]wire.Sandbox, error)
	Delete(ctx context.Context, id string) error
	Count(ctx context.Context) (int, error)
	// PutSandboxEnv and SandboxEnv keep the env a sandbox's agent lays
	// over its box's own (sendEnv); it goes with the record.
	PutSandboxEnv(ctx context.Context, id string, env map[string]string) error
	SandboxEnv(ctx context.Context, id string) (map[string]string, error)
	EventStore
}

// Options configure a Manager.
type Options struct {
	// DataDir holds sandboxes/<id>/run, the run dirs bind-mounted into boxes.
	DataDir string
	// Instance, when set, is the instance id (the label of the boxes this
	// daemon owns) in place of the data dir's: the one the daemons
	// sharing a PostgreSQL store share (store setting "instance").
	Instance string
	// AgentBinary is the host path of the static agent bind-mounted into boxes.
	AgentBinary  string
	DefaultImage string
	// SetupTimeout bounds each setup command when the request gives none.
	SetupTimeout time.Duration
	// GitTimeout bounds the host-side git work of a create's repo.
	GitTimeout time.Duration
	// AllowLocalRepos lets git use the file transport (host paths and
	// file:// URLs); the API refuses them before this unless it is set.
	AllowLocalRepos bool
	// ReadyTimeout bounds how long a started box may take to connect its agent.
	ReadyTimeout time.Duration
	// StopTimeout is how long a stopping agent gets before it is killed.
	StopTimeout time.Duration
	// Egress, when set, puts boxes on the egress network under a policy.
	Egress EgressHook
	Log    *slog.Logger
	// Lifecycle configures timeouts, the reaper and the reconciler.
	Lifecycle LifecycleOptions
	// Elector, when set, runs the reaper, the reconciler, the backend
	// watch, the disk watch and the pools' refill only while this daemon
	// leads (RunBackground), so that of several daemons on one store
	// exactly one acts on a removed box or a due timeout. Nil: they run
	// all the time, as for a daemon alone on its store.
	Elector leader.Elector
	// Peers, when set, is the registry of the daemons sharing the store:
	// a create records which daemon makes it, and Recover and the
	// leader's reconciler roll back only the unfinished creates of
	// daemons that are gone (set.go). With Elector, Recover's other fixes
	// are then the leader's.
	Peers Peers
	// Sessions, when set, is told when this daemon's agent session of a
	// sandbox comes up and when the daemon closes it (the daemon registry
	// of a store several daemons share).
	Sessions SessionRegistry
	// Ops owns the work that outlives a request (create, destroy and the
	// other transitions): the daemon waits for it at shutdown and cancels
	// it after the grace period. Nil: a group of the manager's own.
	Ops *inflight.Group
	// Gateway, when set, mints LLM gateway tokens at create (gateway.go).
	Gateway GatewayHook
	// Stats reads a box's counters for Manager.Stats (stats.go); nil
	// turns stats off.
	Stats Sampler
	// DefaultLimits and MaxLimits are the daemon's default_limits and
	// max_limits (ResolveLimits); zero values leave sandboxes unlimited.
	DefaultLimits, MaxLimits wire.Limits
	// DefaultRuntime is the runtime of a create that names none
	// (wire.RuntimeRunc when empty).
	DefaultRuntime string
	// Steps, when set, learns how long each step of a create and a
	// destroy took (steps.go).
	Steps StepObserver
	// PoolStore and Templates, both set, turn warm pools on (pool.go).
	PoolStore PoolStore
	Templates TemplateSource
	// Locks, when set, takes each sandbox's lifecycle lock among the
	// daemons sharing the store too (leader.Locks on its leases), beside
	// the lock in this process: a stopped sandbox has no agent session
	// whose daemon every call for it is sent to, so two daemons could
	// otherwise start it, or start and destroy it, at once. Nil (a daemon
	// alone on its store): the lock is this process's only, with no
	// round trip to the store.
	Locks Locker
	// AgentChannel, when set, is the daemon's TCP listener for agents
	// (agentconn.Channel): every sandbox's agent is told to dial it, and
	// its Conn accepts from it beside the run dir's socket.
	AgentChannel AgentChannel
}

// Locker is a lock by name among the daemons sharing a store
// (leader.Locks).
type Locker interface {
	// Lock waits for name until ctx ends; unlock releases it.
	Lock(ctx context.Context, name string) (unlock func(), err error)
	// TryLock takes name only if nobody holds it, without waiting.
	TryLock(ctx context.Context, name string) (unlock func(), ok bool, err error)
}

// AgentChannel is the agent channel across hosts, as the manager uses it.
type AgentChannel interface {
	// Register returns the listener of sandbox id's authenticated agent
	// connections; closing it removes the route.
	Register(id string) (net.Listener, error)
	// Dial is what id's box needs to reach the listener, its credential
	// included.
	Dial(id string) *driver.AgentDial
}

// Manager drives sandboxes through their lifecycle.
type Manager struct {
	opts  Options
	drv   driver.Driver
	store Store
	log   *slog.Logger

	// removing counts the destroys still removing their boxes in the
	// background (Destroy); RemoveImage waits for them.
	removing removals

	mu    sync.Mutex
	conns map[string]*agentconn.Conn
	locks keyedmutex.Map // one per sandbox id, serialising its lifecycle

	life  *lifecycle // events, activity, timeouts, reconciler (lifecycle.go)
	rts   runtimes   // what the backend can run (runtime.go)
	pools *poolSet   // warm pools (pool.go); nil when off
}

// New returns a Manager. Call Recover before serving requests.
func New(drv driver.Driver, st Store, opts Options) *Manager {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	if opts.SetupTimeout == 0 {
		opts.SetupTimeout = 10 * time.Minute
	}
	if opts.Ops == nil {
		opts.Ops = inflight.New()
	}
	if opts.GitTimeout == 0 {
		opts.GitTimeout = 10 * time.Minute
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 10 * time.Second
	}
	return &Manager{
		opts:  opts,
		drv:   drv,
		store: st,
		log:   opts.Log.With("component", "sandbox"),
		conns: map[string]*agentconn.Conn{},
		life:  newLifecycle(opts.Lifecycle),
		pools: newPoolSet(opts.PoolStore, opts.Templates),
	}
}

// lock serialises lifecycle operations on one sandbox: in this process,
// and with Options.Locks among the daemons sharing the store too (the
// in-process lock first, so a daemon asks the store for a sandbox once at
// a time). It fails when ctx ends while it waits for another daemon, or
// when the store cannot be asked.
func (m *Manager) lock(ctx context.Context, id string) (func(), error) {
	unlock := m.locks.Lock(id)
	if m.opts.Locks == nil {
		return unlock, nil
	}
	release, err := m.opts.Locks.Lock(ctx, lockName(id))
	if err != nil {
		unlock()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sandbox %s: wait for another daemon's operation: %w", id, err)
		}
		return nil, fmt.Errorf("sandbox %s: take its lock in the store: %w", id, errors.Join(errdefs.ErrUnavailable, err))
	}
	return func() { release(); unlock() }, nil
}

// lockName is the name of sandbox id's lock among the daemons of a set.
func lockName(id string) string { return "sandbox-" + id }

// Hold takes sandbox id's lifecycle lock until the returned func is called:
// transitions wait and the reconciler skips the sandbox meanwhile. Callers
// use it while the box is changed outside the state machine, such as the
// engine's pause during a snapshot commit.
func (m *Manager) Hold(ctx context.Context, id string) (func(), error) { return m.lock(ctx, id) }

func (m *Manager) runDir(id string) string {
	return filepath.Join(m.opts.DataDir, "sandboxes", id, "run")
}

// listen opens (or returns) the agent socket of sandbox id.
func (m *Manager) listen(id string) (*agentconn.Conn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.conns[id]; ok {
		return c, nil
	}
	dir := m.runDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	c, err := agentconn.Listen(id, filepath.Join(dir, driver.AgentSocket), m.log)
	if err != nil {
		return nil, err
	}
	if ch := m.opts.AgentChannel; ch != nil {
		ln, err := ch.Register(id)
		if err == nil {
			// keepLive: the TCP route is reachable from the network, so
			// a live session is not handed to a newcomer (agentconn).
			err = c.AddListener(ln, true)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("route the agent channel: %w", err)
		}
	}
	c.OnConnect(m.onConnect(id))
	m.conns[id] = c
	return c, nil
}

// refreshAgentDial hands the existing box of sandbox id the dial file of
// this daemon's channel (or removes it without one), where the driver can:
// its agent takes it at its next redial. A failure is logged, not fatal:
// the agent still has the socket.
func (m *Manager) refreshAgentDial(ctx context.Context, id string) {
	r, ok := m.drv.(driver.AgentDialRefresher)
	if !ok {
		return
	}
	spec := driver.Spec{ID: id, HostRunDir: m.runDir(id), AgentDial: m.agentDial(id)}
	if err := r.RefreshAgentDial(ctx, spec); err != nil {
		m.log.Warn("refresh the agent dial file", "sandbox", id, "err", err)
	}
}

// agentDial is what the box of sandbox id needs to dial the TCP agent
// channel (nil without one: the agent dials the run dir's socket).
func (m *Manager) agentDial(id string) *driver.AgentDial {
	if m.opts.AgentChannel == nil {
		return nil
	}
	return m.opts.AgentChannel.Dial(id)
}

// onConnect is what every new agent session of sandbox id runs before it
// serves: the sandbox's env goes to the agent, and the registry learns
// that this daemon holds the session.
func (m *Manager) onConnect(id string) agentconn.ConnectHook {
	env := m.sendEnv(id)
	reg := m.opts.Sessions
	return func(ctx context.Context, rt http.RoundTripper) error {
		if err := m.startedElsewhere(ctx, id); err != nil {
			return err
		}
		if err := env(ctx, rt); err != nil {
			return err
		}
		if reg != nil {
			return reg.Hold(ctx, id)
		}
		return nil
	}
}

func (m *Manager) closeConn(id string) {
	m.mu.Lock()
	c, ok := m.conns[id]
	delete(m.conns, id)
	m.mu.Unlock()
	if ok {
		c.Close()
		if reg := m.opts.Sessions; reg != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			reg.Drop(ctx, id)
			cancel()
		}
	}
}

// Populate fills a new sandbox's workspace (a restore from a backup) once
// its agent is up, before its repo is cloned and its setup commands run.
type Populate func(ctx context.Context, id string, conn *agentconn.Conn) error

// CreateOptions are the per-create steps a caller adds to a request.
type CreateOptions struct {
	// Progress learns of long steps (image pull, clone, setup); may be nil.
	Progress driver.Progress
	// Populate, when set, runs once the agent is up and before the repo
	// and the setup commands; its failure fails (and undoes) the create.
	Populate Populate
	// Template is the template version the request was filled from
	// (already applied to it); the sandbox records it.
	Template *wire.TemplateRef
}

// Create makes a sandbox from a validated request and returns it once it is
// ready to exec. On failure nothing is left behind: no box, no volume, no
// run dir, no record.
func (m *Manager) Create(ctx context.Context, req wire.CreateSandboxRequest, co CreateOptions) (wire.Sandbox, error) {
	progress := co.Progress
	// Registered before anything is read or made: a create that comes
	// after shutdown began is refused whole.
	ctx, end, err := m.opts.Ops.Begin(ctx)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer end()
	clock := m.clock("create", m.log)
	defer clock.done()
	image := req.Image
	if image == "" {
		image = m.opts.DefaultImage
	}
	persist := req.Persist == nil || *req.Persist
	if progress == nil {
		progress = func(string) {}
	}
	egress, err := m.egressPolicy(req.Egress)
	if err != nil {
		return wire.Sandbox{}, err
	}
	limits, err := ResolveLimits(req.Limits, m.opts.DefaultLimits, m.opts.MaxLimits)
	if err != nil {
		return wire.Sandbox{}, err
	}
	runtime, err := m.ResolveRuntime(ctx, req.Runtime)
	if err != nil {
		return wire.Sandbox{}, err
	}
	if err := m.checkCanPause("timeouts.", m.initialTimeouts(req.Timeouts, time.Now())); err != nil {
		return wire.Sandbox{}, err
	}
	if m.pools != nil {
		// Refills wait while the API's creates run, claims included: they
		// too need the firewall and the store, which refills would share.
		m.pools.cold.Add(1)
		defer m.pools.createEnded()
	}
	if co.Template != nil && m.pools.has(co.Template.Name) {
		if sb, ok, err := m.claim(ctx, req, co, image, egress, limits, runtime, persist, progress); ok {
			return sb, err
		}
	}
	// The image comes first so that a missing one leaves nothing behind.
	if err := m.drv.EnsureImage(ctx, image, progress); err != nil {
		return wire.Sandbox{}, err
	}
	clock.step("resolve")

	now := time.Now().UTC()
	sb := wire.Sandbox{
		ID:        newID(),
		State:     wire.StateCreating,
		Image:     image,
		Env:       req.Env,
		Labels:    req.Labels,
		Limits:    limits,
		Persist:   persist,
		Egress:    egress,
		CreatedAt: now,
		UpdatedAt: now,
		Timeouts:  m.initialTimeouts(req.Timeouts, now),
		Gateway:   req.Gateway,
		Runtime:   runtime,
		Template:  co.Template,
	}
	unlock, err := m.lock(ctx, sb.ID)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	log := m.log.With("sandbox", sb.ID)

	// A create outlives a client that hangs up half-way: it either finishes
	// or cleans up after itself, never leaves half a sandbox. Only the
	// daemon's shutdown ends it early, after its grace period (Ops).
	ctx, endDetached, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer endDetached()
	ctx = clock.trace(ctx)
	if err := m.putCreating(ctx, sb); err != nil {
		return wire.Sandbox{}, fmt.Errorf("record sandbox: %w", err)
	}
	clock.step("record")
	fail := func(err error) (wire.Sandbox, error) {
		if cause := context.Cause(ctx); cause != nil {
			err = fmt.Errorf("%w (%w; the create was cancelled and removed)", err, cause)
		}
		// The clean-up runs also when the shutdown cancelled the create,
		// bounded on its own: the daemon waits for it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		log.Warn("create failed, cleaning up", "err", err)
		m.Event(cctx, sb.ID, wire.SandboxEventError, "create failed: "+err.Error(), nil)
		if cerr := m.teardown(cctx, sb.ID); cerr != nil {
			log.Error("clean up after failed create", "err", cerr)
		}
		return wire.Sandbox{}, err
	}

	conn, err := m.listen(sb.ID)
	if err != nil {
		return fail(err)
	}
	clock.step("listen")
	spec := driver.Spec{
		ID:            sb.ID,
		Image:         image,
		Env:           req.Env,
		Labels:        req.Labels,
		Limits:        limits,
		Persist:       persist,
		HostRunDir:    m.runDir(sb.ID),
		HostAgentPath: m.opts.AgentBinary,
		Instance:      m.life.instance,
		Runtime:       runtime,
		AgentDial:     m.agentDial(sb.ID),
	}
	m.prepareEgress(&spec, sb)
	if err := m.grantGateway(ctx, sb.ID, req.Gateway); err != nil {
		return fail(err)
	}
	clock.step("gateway")
	if err := m.drv.Create(ctx, spec); err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			m.rts.forget() // the runtime may have gone since it was checked
		}
		return fail(fmt.Errorf("create box: %w", err))
	}
	if err := m.drv.Start(ctx, sb.ID); err != nil {
		return fail(fmt.Errorf("start box: %w", err))
	}
	if err := m.applyEgress(ctx, sb); err != nil {
		return fail(err)
	}
	clock.step("egress")
	if err := m.waitAgent(ctx, sb.ID, conn); err != nil {
		return fail(err)
	}
	clock.step("agent")
	if err := m.fillWorkspace(ctx, &sb, req, co, conn, spec.DNS, progress); err != nil {
		return fail(err)
	}
	sb.State = wire.StateRunning
	sb.UpdatedAt = time.Now().UTC()
	clock.step("setup")
	if err := m.store.Put(ctx, sb); err != nil {
		return fail(fmt.Errorf("record sandbox: %w", err))
	}
	clock.step("record_running")
	log.Info("sandbox created", "image", image, "runtime", runtime)
	m.Event(ctx, sb.ID, wire.SandboxEventCreated, "", map[string]string{"image": image, "runtime": runtime})
	clock.step("event")
	return m.withDeadlines(sb), nil
}

// fillWorkspace runs the steps of a create that follow a ready agent, the
// same for a new box and a claimed one: the restore (co.Populate), the
// repo's clone and the setup commands, recording their results in sb.
func (m *Manager) fillWorkspace(ctx context.Context, sb *wire.Sandbox, req wire.CreateSandboxRequest, co CreateOptions, conn *agentconn.Conn, dns []netip.Addr, progress driver.Progress) error {
	if co.Populate != nil {
		if err := co.Populate(ctx, sb.ID, conn); err != nil {
			return err
		}
	}
	if req.Repo != nil {
		progress("cloning " + redact.URLWithoutUserinfo(req.Repo.URL))
		res, err := m.cloneInto(ctx, sb.ID, sb.Egress, dns, conn, *req.Repo)
		if err != nil {
			return err
		}
		sb.Repo = &res
	}
	timeout := m.opts.SetupTimeout
	if req.SetupTimeoutMs > 0 {
		timeout = time.Duration(req.SetupTimeoutMs) * time.Millisecond
	}
	for i, cmd := range req.Setup {
		progress("setup: " + cmd)
		res, err := runSetup(ctx, conn, cmd, timeout)
		// A setup command may carry a secret in its arguments (a token to
		// a package registry): what is logged or kept in an error names
		// it by index and program. The event's fields, which only the API
		// serves, keep the whole command for its owner.
		what := setupSummary(i, cmd)
		if err != nil {
			return fmt.Errorf("run %s: %w", what, err)
		}
		sb.Setup = append(sb.Setup, res)
		m.Event(ctx, sb.ID, wire.SandboxEventSetup, fmt.Sprintf("%s exited %d", what, res.ExitCode), map[string]string{"command": cmd, "exitCode": fmt.Sprint(res.ExitCode)})
		// A failing setup command does not fail the create, but the
		// commands after it assume it worked, so they are not run.
		if res.ExitCode != 0 {
			m.log.Info("setup command failed; later ones skipped", "sandbox", sb.ID, "setup", what, "exitCode", res.ExitCode)
			break
		}
	}
	return nil
}

// waitAgent waits for the agent of a just-started box, and notices a box
// that died instead of connecting.
func (m *Manager) waitAgent(ctx context.Context, id string, conn *agentconn.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.ReadyTimeout)
	defer cancel()
	for {
		wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := conn.WaitReady(wctx)
		wcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the agent of sandbox %s did not connect within %s: %w", id, m.opts.ReadyTimeout, errdefs.ErrUnavailable)
		}
		st, ierr := m.drv.Inspect(ctx, id)
		if ierr == nil && st.State != driver.BoxRunning && st.State != driver.BoxPaused {
			return fmt.Errorf("box of sandbox %s exited with code %d before its agent connected (does the image run on this host's architecture?): %w", id, st.ExitCode, errdefs.ErrUnavailable)
		}
	}
}

// teardown removes everything a sandbox owns. It is idempotent.
func (m *Manager) teardown(ctx context.Context, id string) error {
	m.closeConn(id)
	m.life.activity.forget(id)
	// The firewall rules and the gateway tokens go while the engine
	// removes the box: they do not depend on each other, and a box whose
	// rules went first, or last, is confined all the same (its address
	// falls to the network's final drop).
	var sideErrs []error
	side := make(chan struct{})
	go func() {
		defer close(side)
		start := time.Now()
		if err := m.forgetEgress(ctx, id); err != nil {
			sideErrs = append(sideErrs, err)
		}
		traceParallel(ctx, "egress_parallel", time.Since(start))
		start = time.Now()
		if err := m.forgetGateway(ctx, id); err != nil {
			sideErrs = append(sideErrs, err)
		}
		traceParallel(ctx, "gateway_parallel", time.Since(start))
	}()
	var errs []error
	if err := m.drv.Destroy(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("destroy box: %w", err))
	}
	if err := os.RemoveAll(filepath.Join(m.opts.DataDir, "sandboxes", id)); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	driver.TraceStep(ctx, "run_dir")
	<-side
	errs = append(sideErrs, errs...)
	driver.TraceStep(ctx, "wait_parallel")
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := m.store.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete record: %w", err)
	}
	driver.TraceStep(ctx, "delete_record")
	return nil
}

// Get returns one sandbox. A box waiting unclaimed in a pool is not one.
func (m *Manager) Get(ctx context.Context, id string) (wire.Sandbox, error) {
	return m.withDeadlinesErr(m.getVisible(ctx, id))
}

// getVisible reads the record of sandbox id, which must not be a box that
// waits unclaimed in a pool: users never see those.
func (m *Manager) getVisible(ctx context.Context, id string) (wire.Sandbox, error) {
	sb, err := m.getLive(ctx, id)
	if err == nil && sb.Pool != "" {
		return wire.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return sb, err
}

// getLive reads the record of sandbox id; a destroyed sandbox whose
// removal is not done is not found.
func (m *Manager) getLive(ctx context.Context, id string) (wire.Sandbox, error) {
	sb, err := m.store.Get(ctx, id)
	if err == nil && sb.State == wire.StateDestroyed {
		return wire.Sandbox{}, fmt.Errorf("sandbox %q was destroyed: %w", id, errdefs.ErrNotFound)
	}
	return sb, err
}

// ListFilter selects sandboxes in List. Zero fields match everything;
// Labels match when the sandbox has every given key with exactly the given
// value.
type ListFilter struct {
	State  wire.State
	Labels map[string]string
}

// List returns the sandboxes that match f.
func (m *Manager) List(ctx context.Context, f ListFilter) ([]wire.Sandbox, error) {
	list, err := m.store.List(ctx, store.Filter{State: f.State, Labels: f.Labels, HidePooled: true})
	// A destroyed sandbox whose removal is not done is gone for users.
	list = slices.DeleteFunc(list, func(sb wire.Sandbox) bool { return sb.State == wire.StateDestroyed })
	for i := range list {
		list[i] = m.withDeadlines(list[i])
	}
	return list, err
}

// Count returns how many sandboxes exist.
func (m *Manager) Count(ctx context.Context) (int, error) { return m.store.Count(ctx) }

// Destroy removes a sandbox and all it owns. Destroying one that does not
// exist succeeds.
//
// With a driver that can kill a box at once (driver.Killer) it answers
// once the sandbox is gone for everyone and leaves the engine's slow part
// to the background: the record is marked destroyed (durably: a daemon
// that dies before the rest is done finishes it at its next start, and the
// reconciler retries a removal that failed), the agent's connection
// closes, the firewall rules and the gateway tokens go, then the box's
// processes are killed. The removal of the container, the workspace (disk
// or volume), the run dir and the record follow under the sandbox's lock.
// The rules go before the kill: the box's address is the engine's to give
// to a new box once it died, and that box must never find these rules.
func (m *Manager) Destroy(ctx context.Context, id string) error {
	// A destroy that started finishes even if its caller hangs up; the
	// daemon's shutdown waits for it.
	ctx, end, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return err
	}
	defer end()
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return err
	}
	handedOff := false
	defer func() {
		if !handedOff {
			unlock()
		}
	}()
	if m.pools.member(id) {
		return nil // the pool's, not a user's: it does not exist for them
	}
	clock := m.clock("destroy", m.log.With("sandbox", id))
	defer clock.done()
	ctx = clock.trace(ctx)
	sb, err := m.store.Get(ctx, id)
	clock.step("lookup")
	if errors.Is(err, errdefs.ErrNotFound) {
		// No record: still remove anything of ours by that id.
		return m.teardown(ctx, id)
	} else if err != nil {
		return err
	}
	killer, canKill := m.drv.(driver.Killer)
	if !canKill || sb.State == wire.StateDestroyed {
		// No quick kill, or a destroy answered before whose removal is
		// not done (it failed, and the reconciler has not retried yet):
		// all of it now.
		if err := m.teardown(ctx, id); err != nil {
			if sb.State != wire.StateDestroyed {
				m.setError(ctx, id, "destroy failed: "+err.Error())
			}
			return err
		}
		if sb.State != wire.StateDestroyed {
			m.log.Info("sandbox destroyed", "sandbox", id)
			m.Event(ctx, id, wire.SandboxEventDestroyed, "", nil)
		}
		clock.step("event")
		return nil
	}
	sb.State = wire.StateDestroyed
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return fmt.Errorf("record sandbox %s as destroyed: %w", id, err)
	}
	clock.step("record_destroyed")
	// The log says destroyed as soon as the sandbox is gone for users (a
	// GET of it is a 404 from the Put on), as before the removal moved to
	// the background.
	m.Event(ctx, id, wire.SandboxEventDestroyed, "", nil)
	m.closeConn(id)
	m.life.activity.forget(id)
	if err := m.forgetSide(ctx, id); err != nil {
		return m.destroyFailed(ctx, id, err)
	}
	clock.step("firewall_tokens")
	if err := killer.KillNow(ctx, id); err != nil {
		return m.destroyFailed(ctx, id, fmt.Errorf("kill box: %w", err))
	}
	m.log.Info("sandbox destroyed; removing its box in the background", "sandbox", id)

	// The rest outlives the request, under the sandbox's lock (transitions
	// and the reconciler wait, a second destroy returns when it is done)
	// and registered with the daemon's operations (its shutdown waits).
	bctx, bend, err := m.opts.Ops.Detach(context.WithoutCancel(ctx))
	if err != nil {
		return nil // shutting down: the next start finishes it
	}
	handedOff = true
	m.removing.add()
	go func() {
		defer m.removing.done()
		defer bend()
		defer unlock()
		bclock := m.clock("destroy", m.log.With("sandbox", id))
		bclock.prefix = "background_"
		defer bclock.done()
		bctx = bclock.trace(bctx)
		start := time.Now()
		if err := m.removeRest(bctx, id); err != nil {
			m.log.Error("remove a destroyed sandbox's box; the reconciler retries", "sandbox", id, "err", err)
			return
		}
		if m.opts.Steps != nil {
			m.opts.Steps("destroy", "background_total", time.Since(start))
		}
	}()
	return nil
}

// destroyFailed ends a destroy whose firewall, tokens or kill failed after
// the record was marked: everything is removed now, in the request, as
// without a quick kill. Only when that fails too is the error the caller's
// (the record stays destroyed, and the reconciler retries).
func (m *Manager) destroyFailed(ctx context.Context, id string, err error) error {
	m.log.Warn("quick destroy failed; removing the sandbox in the request", "sandbox", id, "err", err)
	if terr := m.teardown(ctx, id); terr != nil {
		return errors.Join(err, terr)
	}
	return nil
}

// RemoveImage removes image ref through remove (a driver's), and when a box
// still uses it, waits for the destroys still removing their boxes in the
// background and tries once more: those sandboxes are destroyed for the
// caller, who may remove the snapshot or template they were made from at
// once. A box of a sandbox that exists keeps the image: the conflict stays.
func (m *Manager) RemoveImage(ctx context.Context, ref string, remove func(context.Context, string) error) error {
	err := remove(ctx, ref)
	if !errors.Is(err, errdefs.ErrConflict) {
		return err
	}
	select {
	case <-m.removing.idle():
	case <-ctx.Done():
		return err
	}
	return remove(ctx, ref)
}

// removals counts work in flight and tells when none is left; unlike a
// sync.WaitGroup it may be waited on while work is added.
type removals struct {
	mu sync.Mutex
	n  int
	// none is closed while n is 0, replaced when work starts again.
	none chan struct{}
}

func (r *removals) add() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		r.none = make(chan struct{})
	}
	r.n++
}

func (r *removals) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n--
	if r.n == 0 {
		close(r.none)
	}
}

// idle returns a channel closed once no work is in flight (at once if none
// is now).
func (r *removals) idle() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return r.none
}

// forgetSide removes a sandbox's firewall rules and gateway tokens.
func (m *Manager) forgetSide(ctx context.Context, id string) error {
	var errs []error
	if err := m.forgetEgress(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := m.forgetGateway(ctx, id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeRest removes what a destroyed sandbox still has once its rules and
// tokens are gone and its box is dead: the box, its workspace, its run dir
// and, last, its record (the mark that makes a later daemon finish this).
func (m *Manager) removeRest(ctx context.Context, id string) error {
	var errs []error
	if err := m.drv.Destroy(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("destroy box: %w", err))
	}
	if err := os.RemoveAll(filepath.Join(m.opts.DataDir, "sandboxes", id)); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	driver.TraceStep(ctx, "run_dir")
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := m.store.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete record: %w", err)
	}
	driver.TraceStep(ctx, "delete_record")
	return nil
}

// finishDestroy completes the destroy of a sandbox whose record is marked
// destroyed (a daemon that died before its removal was done, or a removal
// that failed). The caller holds the sandbox's lock.
func (m *Manager) finishDestroy(ctx context.Context, id string) {
	log := m.log.With("sandbox", id)
	if err := m.teardown(ctx, id); err != nil {
		log.Error("finish the removal of a destroyed sandbox; retried later", "err", err)
		return
	}
	log.Info("finished the removal of a destroyed sandbox")
}

// Start brings a stopped sandbox back with the same root filesystem and
// workspace.
func (m *Manager) Start(ctx context.Context, id string) (wire.Sandbox, error) {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	sb, err := m.getVisible(ctx, id)
	if err != nil {
		return sb, err
	}
	if noop, err := checkTransition(id, sb.State, OpStart); err != nil || noop {
		return m.withDeadlines(sb), err
	}
	// The transition finishes even if its caller hangs up; the daemon's
	// shutdown waits for it.
	ctx, end, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return sb, err
	}
	defer end()
	m.refreshAgentDial(ctx, id) // before the box starts and its agent dials
	conn, err := m.listen(id)
	if err != nil {
		return sb, err
	}
	if err := m.putStarting(ctx, id); err != nil {
		return sb, err
	}
	if err := m.drv.Start(ctx, id); err != nil {
		return sb, fmt.Errorf("start sandbox %s: %w", id, err)
	}
	if err := m.applyEgress(ctx, sb); err != nil {
		m.setError(ctx, id, err.Error())
		return sb, err
	}
	if err := m.waitAgent(ctx, id, conn); err != nil {
		m.setError(ctx, id, err.Error())
		return sb, err
	}
	m.Touch(id)
	m.Event(ctx, id, wire.SandboxEventStarted, "", nil)
	return m.withDeadlinesErr(m.setState(ctx, sb, wire.StateRunning, ""))
}

// Stop stops a running sandbox, keeping its root filesystem and workspace.
func (m *Manager) Stop(ctx context.Context, id string) (wire.Sandbox, error) {
	return m.stop(ctx, id, "")
}

// stop stops a running sandbox and records reason (empty for a stop that
// was asked for) as the sandbox's error.
func (m *Manager) stop(ctx context.Context, id, reason string) (wire.Sandbox, error) {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	sb, err := m.getVisible(ctx, id)
	if err != nil {
		return sb, err
	}
	if noop, err := checkTransition(id, sb.State, OpStop); err != nil || noop {
		return m.withDeadlines(sb), err
	}
	// The transition finishes even if its caller hangs up; the daemon's
	// shutdown waits for it.
	ctx, end, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return sb, err
	}
	defer end()
	if p, ok := m.drv.(driver.Pauser); ok && sb.State == wire.StatePaused {
		if err := p.Unpause(ctx, id); err != nil {
			return sb, fmt.Errorf("unpause sandbox %s before stop: %w", id, err)
		}
	}
	if err := m.drv.Stop(ctx, id, m.opts.StopTimeout); err != nil {
		return sb, fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	m.releaseEgress(ctx, id)
	if _, _, ok := m.set(); ok {
		// Its agent is gone; a route kept here would take the agent of
		// its next start on another daemon of the set (dropGoneRoutes).
		m.closeConn(id)
	}
	m.Event(ctx, id, wire.SandboxEventStopped, reason, nil)
	return m.withDeadlinesErr(m.setState(ctx, sb, wire.StateStopped, reason))
}

func (m *Manager) setState(ctx context.Context, sb wire.Sandbox, st wire.State, reason string) (wire.Sandbox, error) {
	sb.State = st
	sb.Error = reason
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return sb, fmt.Errorf("record sandbox %s: %w", sb.ID, err)
	}
	return sb, nil
}

func (m *Manager) setError(ctx context.Context, id, reason string) {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return
	}
	if _, err := m.setState(ctx, sb, wire.StateError, reason); err != nil {
		m.log.Error("record error state", "sandbox", id, "err", err)
	}
	m.Event(ctx, id, wire.SandboxEventError, reason, nil)
}

// Agent returns the agent connection of a running sandbox.
func (m *Manager) Agent(ctx context.Context, id string) (*agentconn.Conn, error) {
	sb, err := m.getVisible(ctx, id)
	if err != nil {
		return nil, err
	}
	if _, err := checkTransition(id, sb.State, OpUse); err != nil {
		return nil, err
	}
	m.mu.Lock()
	c, ok := m.conns[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %s has no agent connection: %w", id, errdefs.ErrUnavailable)
	}
	return c, nil
}

// HasSession reports whether this daemon holds a live agent session of
// sandbox id: of several daemons on one store, the one that does serves
// the sandbox's calls, and the others forward them to it.
func (m *Manager) HasSession(id string) bool {
	m.mu.Lock()
	c, ok := m.conns[id]
	m.mu.Unlock()
	return ok && c.Connected()
}

// Recover brings the manager in line with the store and the driver after a
// daemon start: sandboxes keep running and their agents redial; a create
// that was cut short is rolled back; a record whose box vanished becomes
// an error.
func (m *Manager) Recover(ctx context.Context) error {
	if err := m.ensureInstance(); err != nil {
		return err
	}
	recs, err := m.store.List(ctx, store.Filter{})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	// On a set the leader makes the fixes (recoverRecords), so that of
	// daemons starting at once only one marks a record and emits its
	// event; every daemon still listens for every sandbox's agent.
	byLeader := m.fixesByLeader()
	for _, sb := range recs {
		log := m.log.With("sandbox", sb.ID)
		if sb.Pool != "" {
			if sb.State == wire.StateCreating {
				// A refill in flight on the leader of a set is not a
				// leftover (set.go).
				leftover, creator, err := m.unfinishedCreate(ctx, sb.ID, true)
				if err != nil {
					return fmt.Errorf("recover the pooled box %s: %w", sb.ID, err)
				}
				if !leftover {
					log.Info("leaving alone a pool refill in flight on another daemon", "creator", creator)
					continue
				}
			}
			if err := m.recoverPooled(ctx, sb); err != nil {
				return err
			}
			continue
		}
		if sb.State == wire.StateDestroyed {
			if !byLeader { // the leader's reconciler finishes it
				log.Warn("finishing a destroy the daemon did not finish")
				m.finishDestroy(ctx, sb.ID)
			}
			continue
		}
		if sb.State == wire.StateCreating {
			leftover, creator, err := m.unfinishedCreate(ctx, sb.ID, true)
			if err != nil {
				return fmt.Errorf("recover the create of %s: %w", sb.ID, err)
			}
			if !leftover {
				log.Info("leaving alone a create in flight on another daemon", "creator", creator)
				continue
			}
			m.rollBackCreate(ctx, sb.ID, creator, "a create the daemon did not finish")
			continue
		}
		st, err := m.drv.Inspect(ctx, sb.ID)
		if err != nil {
			return fmt.Errorf("inspect sandbox %s: %w", sb.ID, err)
		}
		if st.State == driver.BoxMissing && byLeader {
			continue // the leader marks it
		}
		if st.State != driver.BoxMissing {
			// The dial file before the socket: an agent redialing now must
			// find the file when the socket answers, or it settles on the
			// socket for the whole session.
			m.refreshAgentDial(ctx, sb.ID)
			if _, err := m.listen(sb.ID); err != nil {
				return fmt.Errorf("listen for the agent of %s: %w", sb.ID, err)
			}
		}
		if byLeader && !m.ownCutStart(ctx, sb, st) {
			continue
		}
		if err := m.fixRecord(ctx, sb, st, !byLeader); err != nil {
			return err
		}
	}
	if err := m.recoverEgress(ctx); err != nil {
		m.log.Error("recover egress rules", "err", err)
	}
	return m.afterRecover(ctx)
}

// fixRecord brings sb's record in line with its box's status st at a
// recovery: a vanished box marks the sandbox, a box under another runtime
// or in another state than recorded is followed, each with its event.
// readopted adds the "re-adopted" event of a record found as it was.
func (m *Manager) fixRecord(ctx context.Context, sb wire.Sandbox, st driver.Status, readopted bool) error {
	log := m.log.With("sandbox", sb.ID)
	if st.State == driver.BoxMissing {
		if sb.State != wire.StateError {
			log.Warn("box of sandbox vanished")
			_, _ = m.setState(ctx, sb, wire.StateError, "its container vanished while the daemon was away")
			m.Event(ctx, sb.ID, wire.SandboxEventError, "its container vanished while the daemon was away", nil)
		}
		return nil
	}
	if st.Runtime != "" && st.Runtime != sb.Runtime {
		// The record must not claim an isolation the box lacks (its
		// container was replaced behind the daemon's back, or the
		// record predates runtimes): it follows the box.
		log.Warn("sandbox runs under another runtime than recorded", "recorded", sb.Runtime, "actual", st.Runtime)
		m.Event(ctx, sb.ID, wire.SandboxEventRecovered, fmt.Sprintf("runtime was recorded as %q, the box runs under %s", sb.Runtime, st.Runtime), map[string]string{"runtime": st.Runtime})
		sb.Runtime = st.Runtime
		if err := m.store.Put(ctx, sb); err != nil {
			return fmt.Errorf("record the runtime of %s: %w", sb.ID, err)
		}
	}
	want := map[driver.BoxState]wire.State{
		driver.BoxRunning: wire.StateRunning,
		driver.BoxPaused:  wire.StatePaused,
		driver.BoxStopped: wire.StateStopped,
	}[st.State]
	switch {
	case want != sb.State:
		log.Info("sandbox state changed while the daemon was away", "recorded", sb.State, "actual", want)
		reason := ""
		if st.OOMKilled {
			reason = "killed: out of memory"
		}
		_, _ = m.setState(ctx, sb, want, reason)
		m.Event(ctx, sb.ID, wire.SandboxEventRecovered, fmt.Sprintf("was %s, found %s", sb.State, want), map[string]string{"reason": reason})
	case readopted:
		m.Event(ctx, sb.ID, wire.SandboxEventRecovered, "re-adopted "+string(want), nil)
	}
	return nil
}

// Close ends every agent session without touching the boxes: they keep
// running and their agents redial the next daemon.
func (m *Manager) Close() {
	m.mu.Lock()
	conns := m.conns
	m.conns = map[string]*agentconn.Conn{}
	m.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// cleanupTimeout bounds the removal of what a failed create made, also
// when the daemon's shutdown cancelled the create.
const cleanupTimeout = 30 * time.Second

// setupSummary names setup command i for logs and errors without its
// arguments, which may hold secrets: "setup[0] (make, 42 bytes)". The
// program is the first word that is not a NAME=value assignment.
func setupSummary(i int, cmd string) string {
	prog := "?"
	for _, w := range strings.Fields(cmd) {
		if !strings.Contains(w, "=") {
			prog = w
			break
		}
	}
	if len(prog) > 40 {
		prog = prog[:40] + "..."
	}
	return fmt.Sprintf("setup[%d] (%s, %d bytes)", i, prog, len(cmd))
}
