package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/templates"
	"github.com/hotcell/hotcell/internal/wire"
)

// errStale says a pooled box cannot be handed out (its agent or record is
// gone): the claim removes it and tries the next.
var errStale = errors.New("pooled box is not healthy")

// claim hands a create from a template a ready box of its pool that
// matches, with the request's identity applied. ok is false on a miss:
// the caller makes a box (a cold create).
func (m *Manager) claim(ctx context.Context, req wire.CreateSandboxRequest, co CreateOptions, image string, egress *wire.EgressPolicy, limits wire.Limits, runtime string, persist bool, progress driver.Progress) (sb wire.Sandbox, ok bool, err error) {
	name := co.Template.Name
	key := poolKeyOf(co.Template.Version, image, runtime, limits, persist)
	// A box made with other limits will do where the driver can change
	// them on the running box (runc: memory, CPU, pids; not a disk).
	var adjust func(wire.Limits) bool
	lu, canUpdate := m.drv.(driver.LimitUpdater)
	if canUpdate {
		adjust = func(from wire.Limits) bool { return lu.CanUpdateLimits(runtime, from, limits) }
	}
	for {
		id, had, found := m.pools.take(name, key, adjust)
		if !found {
			m.pools.count(name, false, time.Now())
			return wire.Sandbox{}, false, nil
		}
		clock := m.clock("claim", m.log.With("sandbox", id))
		if had != limits {
			// Before the box is the claimer's. One the engine does not
			// update (its limits are then unknown) is replaced, and the
			// create makes its own box: the next would likely fail too.
			if err := lu.UpdateLimits(ctx, id, limits); err != nil {
				m.log.Warn("could not change a pooled box's limits at claim; replacing it", "sandbox", id, "template", name, "err", err)
				m.pools.wg.Add(1)
				go func() {
					defer m.pools.wg.Done()
					m.removePooled(context.WithoutCancel(ctx), id)
				}()
				m.pools.count(name, false, time.Now())
				return wire.Sandbox{}, false, nil
			}
			clock.step("limits")
		}
		sb, err := m.claimBox(ctx, clock, id, req, co, egress, limits, progress)
		clock.done()
		if errors.Is(err, errStale) {
			m.log.Warn("a pooled box failed its check at claim; replacing it", "sandbox", id, "template", name, "err", err)
			m.pools.wg.Add(1)
			go func() {
				defer m.pools.wg.Done()
				m.removePooled(context.WithoutCancel(ctx), id)
			}()
			continue
		}
		m.pools.count(name, true, time.Now())
		return sb, true, err
	}
}

// claimBox gives pooled box id the request's identity: its record (env,
// labels, egress, gateway, timeouts counting from now), the env its agent
// gives every process from now on (with the claimer's gateway tokens), its
// egress rules; then the workspace steps of a create. Nothing ran in the
// box under another identity: it had none. A failure after the box became
// the claimer's removes it, as a failed create does.
func (m *Manager) claimBox(ctx context.Context, clock *stepClock, id string, req wire.CreateSandboxRequest, co CreateOptions, egress *wire.EgressPolicy, limits wire.Limits, progress driver.Progress) (wire.Sandbox, error) {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	// As a create: it finishes or cleans up, whoever hangs up.
	ctx, endDetached, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer endDetached()
	ctx = clock.trace(ctx)
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return wire.Sandbox{}, fmt.Errorf("%w: %w", errStale, err)
	}
	m.mu.Lock()
	conn := m.conns[id]
	m.mu.Unlock()
	if sb.Pool == "" || sb.State != wire.StateRunning || conn == nil || !conn.Connected() {
		return wire.Sandbox{}, fmt.Errorf("%w: state %s, agent up %v", errStale, sb.State, conn != nil && conn.Connected())
	}
	clock.step("lookup")
	now := time.Now().UTC()
	pool := sb.Pool
	sb.Pool = ""
	sb.State = wire.StateCreating
	sb.Env = req.Env
	sb.Labels = req.Labels
	sb.Egress = egress
	sb.Limits = limits
	sb.Gateway = req.Gateway
	sb.CreatedAt, sb.UpdatedAt = now, now
	sb.Timeouts = m.initialTimeouts(req.Timeouts, now)
	sb.Template = co.Template
	// From this write on the box is the claimer's: a daemon that dies
	// before the claim ends rolls it back as an unfinished create.
	if err := m.putCreating(ctx, sb); err != nil {
		return wire.Sandbox{}, fmt.Errorf("%w: record claim: %w", errStale, err)
	}
	clock.step("record")
	log := m.log.With("sandbox", id)
	fail := func(err error) (wire.Sandbox, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		log.Warn("claim failed, cleaning up", "err", err)
		m.Event(cctx, id, wire.SandboxEventError, "create failed: "+err.Error(), nil)
		if cerr := m.teardown(cctx, id); cerr != nil {
			log.Error("clean up after failed claim", "err", cerr)
		}
		return wire.Sandbox{}, err
	}

	env := maps.Clone(req.Env)
	if len(req.Gateway) > 0 {
		if m.opts.Gateway == nil {
			return fail(errdefs.Invalid("gateway", "the LLM gateway is not enabled on this daemon"))
		}
		vars, err := m.opts.Gateway.Grant(ctx, id, req.Gateway)
		if err != nil {
			return fail(fmt.Errorf("grant gateway access: %w", err))
		}
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, vars)
		clock.step("gateway")
	}
	// The env and the egress policy are independent: they go at once.
	// No process runs in the box until both are in (the claimer has not
	// had its answer), and the box can reach nothing meanwhile (its
	// pooled rules allow nothing).
	envDone := make(chan error, 1)
	began := time.Now()
	go func() {
		if len(env) == 0 {
			envDone <- nil
			return
		}
		// Kept in the store, not in the record the API shows, and sent
		// again each time the agent connects (sendEnv).
		if err := m.store.PutSandboxEnv(ctx, id, env); err != nil {
			envDone <- err
			return
		}
		if err := putEnv(ctx, conn.Transport(), env); err != nil {
			envDone <- fmt.Errorf("set the sandbox's env: %w", err)
			return
		}
		traceParallel(ctx, "env_parallel", time.Since(began))
		envDone <- nil
	}()
	egressErr := m.claimEgress(ctx, sb)
	traceParallel(ctx, "egress_parallel", time.Since(began))
	envErr := <-envDone
	if err := errors.Join(egressErr, envErr); err != nil {
		return fail(err)
	}
	clock.step("egress_env")
	m.Touch(id)
	var spec driver.Spec
	m.prepareEgress(&spec, sb)
	if err := m.fillWorkspace(ctx, &sb, req, co, conn, spec.DNS, progress); err != nil {
		return fail(err)
	}
	clock.step("workspace")
	sb.State = wire.StateRunning
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return fail(fmt.Errorf("record sandbox: %w", err))
	}
	clock.step("record_running")
	log.Info("sandbox created from a pool", "template", pool, "image", sb.Image, "runtime", sb.Runtime)
	m.Event(ctx, id, wire.SandboxEventCreated, "", map[string]string{"image": sb.Image, "runtime": sb.Runtime, "pool": pool})
	clock.step("event")
	return m.withDeadlines(sb), nil
}

// legacyEnvFile is where a daemon before the env moved to the store kept
// the env a claimed box's agent lays over the box's own (sendEnv moves it).
func (m *Manager) legacyEnvFile(id string) string {
	return filepath.Join(m.opts.DataDir, "sandboxes", id, "env.json")
}

// sendEnv is the connect hook of sandbox id's agent: a sandbox's env (a
// claimed box's owner env, the gateway's tokens) is set before the
// session serves, so no process starts without it, also after the box
// restarted (stop/start) or the daemon did, and on whichever daemon of a
// set accepts the session: the env is in the store.
func (m *Manager) sendEnv(id string) agentconn.ConnectHook {
	return func(ctx context.Context, rt http.RoundTripper) error {
		env, err := m.store.SandboxEnv(ctx, id)
		if err != nil {
			return err
		}
		if env == nil {
			if env, err = m.moveLegacyEnv(ctx, id); err != nil {
				return err
			}
		}
		if len(env) == 0 {
			return nil
		}
		return putEnv(ctx, rt, env)
	}
}

// moveLegacyEnv moves the env file an older daemon left in sandbox id's
// dir into the store, once, and returns it (nil without one).
func (m *Manager) moveLegacyEnv(ctx context.Context, id string) (map[string]string, error) {
	path := m.legacyEnvFile(id)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read env file: %w", err)
	}
	var env map[string]string
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode env file %s: %w", path, err)
	}
	if err := m.store.PutSandboxEnv(ctx, id, env); err != nil {
		return nil, fmt.Errorf("move env file into the store: %w", err)
	}
	if err := os.Remove(path); err != nil {
		// The store's copy is read first from now on: a file left
		// behind is only not cleaned up until the sandbox goes.
		m.log.Warn("remove the env file moved into the store", "sandbox", id, "err", err)
	} else {
		m.log.Info("moved the sandbox's env file into the store", "sandbox", id)
	}
	return env, nil
}

func putEnv(ctx context.Context, rt http.RoundTripper, env map[string]string) error {
	body, err := json.Marshal(wire.SetEnvRequest{Env: env})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/env", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("agent answered HTTP %d to its env", resp.StatusCode)
	}
	return nil
}

// createPooled makes a box for pool name from template t: its image and
// defaults, no owner, egress that allows nothing until a claim, no
// timeouts, no events. It returns once the box is ready to exec.
func (m *Manager) createPooled(ctx context.Context, name string, t wire.Template) (string, error) {
	var req wire.CreateSandboxRequest
	templates.Apply(&req, t)
	limits, err := ResolveLimits(req.Limits, m.opts.DefaultLimits, m.opts.MaxLimits)
	if err != nil {
		return "", err
	}
	runtime, err := m.ResolveRuntime(ctx, req.Runtime)
	if err != nil {
		return "", err
	}
	if err := m.drv.EnsureImage(ctx, t.Image, func(string) {}); err != nil {
		return "", err
	}
	// The box waits under the policy a create from the template gets by
	// default (the template's, else the daemon's default mode): a claim
	// that asks for it changes no rule, one that asks for another
	// switches the rules in one iptables-restore (egress Claim). Nothing
	// runs in the box meanwhile but its agent, which opens no connection.
	egress, err := m.egressPolicy(req.Egress)
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	sb := wire.Sandbox{
		ID: newID(), State: wire.StateCreating, Image: t.Image, Env: req.Env,
		Limits: limits, Persist: true, Egress: egress, CreatedAt: now, UpdatedAt: now,
		Runtime: runtime, Template: &wire.TemplateRef{Name: t.Name, Version: t.Version}, Pool: name,
	}
	ps := m.pools
	ps.mu.Lock()
	ps.members[sb.ID] = true
	ps.mu.Unlock()
	unlock, err := m.lock(ctx, sb.ID)
	if err != nil {
		ps.mu.Lock()
		delete(ps.members, sb.ID)
		ps.mu.Unlock()
		return "", err
	}
	defer unlock()
	fail := func(err error) (string, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if cerr := m.teardown(cctx, sb.ID); cerr != nil {
			m.log.Error("clean up after a failed refill", "sandbox", sb.ID, "err", cerr)
		}
		ps.mu.Lock()
		delete(ps.members, sb.ID)
		ps.mu.Unlock()
		return "", err
	}
	if err := m.putCreating(ctx, sb); err != nil {
		return fail(fmt.Errorf("record sandbox: %w", err))
	}
	conn, err := m.listen(sb.ID)
	if err != nil {
		return fail(err)
	}
	spec := driver.Spec{
		ID: sb.ID, Image: t.Image, Env: req.Env, Limits: limits, Persist: true,
		HostRunDir: m.runDir(sb.ID), HostAgentPath: m.opts.AgentBinary,
		Instance: m.life.instance, Runtime: runtime, AgentDial: m.agentDial(sb.ID),
	}
	m.prepareEgress(&spec, sb)
	if err := m.drv.Create(ctx, spec); err != nil {
		return fail(fmt.Errorf("create box: %w", err))
	}
	if err := m.drv.Start(ctx, sb.ID); err != nil {
		return fail(fmt.Errorf("start box: %w", err))
	}
	if err := m.applyEgress(ctx, sb); err != nil {
		return fail(err)
	}
	if err := m.waitAgent(ctx, sb.ID, conn); err != nil {
		return fail(err)
	}
	sb.State = wire.StateRunning
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return fail(fmt.Errorf("record sandbox: %w", err))
	}
	m.log.Debug("pooled box ready", "sandbox", sb.ID, "template", name, "version", t.Version)
	return sb.ID, nil
}

// recoverPooled re-adopts a box a pool held before the daemon restarted,
// or removes it when it is not running or its pool is gone.
func (m *Manager) recoverPooled(ctx context.Context, sb wire.Sandbox) error {
	if sb.State == wire.StateRunning {
		st, err := m.drv.Inspect(ctx, sb.ID)
		if err != nil {
			return fmt.Errorf("inspect pooled box %s: %w", sb.ID, err)
		}
		if st.State == driver.BoxRunning && m.pools.adoptPooled(sb, time.Now().Add(m.opts.ReadyTimeout)) {
			m.refreshAgentDial(ctx, sb.ID) // before the socket: see Recover
			if _, err := m.listen(sb.ID); err != nil {
				return fmt.Errorf("listen for the agent of %s: %w", sb.ID, err)
			}
			return nil
		}
	}
	m.log.Info("removing a pooled box the daemon cannot re-adopt", "sandbox", sb.ID, "pool", sb.Pool, "state", sb.State)
	if err := m.teardown(ctx, sb.ID); err != nil {
		m.log.Error("remove pooled box", "sandbox", sb.ID, "err", err)
	}
	return nil
}
