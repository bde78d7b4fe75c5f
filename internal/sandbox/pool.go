package sandbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/templates"
	"github.com/hotcell/hotcell/internal/wire"
)

// Warm pools: per template, boxes made ahead from its latest version with
// its defaults and no owner, kept running and hidden (no listing, count or
// event shows them) until a create from the template claims one. The claim
// gives the box its owner's identity (claim.go); the pool loop here keeps
// each pool at its size, replaces boxes that failed or whose template
// moved on, and drains pools that were removed.
//
// The in-memory ready list is what a claim takes from, under one mutex,
// so no box is handed out twice. The store holds the configurations and
// each waiting box's record (its "pool" field), so a restarted daemon
// re-adopts the boxes it had instead of leaking them.

// PoolStore keeps the pool configurations (internal/store).
type PoolStore interface {
	PutPool(ctx context.Context, name string, cfg wire.PoolConfig) error
	DeletePool(ctx context.Context, name string) error
	Pools(ctx context.Context) (map[string]wire.PoolConfig, error)
}

// TemplateSource gives the latest version of a template (internal/templates).
type TemplateSource interface {
	Get(ctx context.Context, name string) (wire.Template, error)
}

const (
	// DefaultRefillPerSecond is a pool's refill rate when its config gives none.
	DefaultRefillPerSecond = 2.0
	// MaxPoolSize bounds a pool's min and max.
	MaxPoolSize        = 1000
	maxRefillPerSecond = 100
	// poolDemandWindow is how far back claims count as demand that grows
	// a pool from min towards max.
	poolDemandWindow = time.Minute
	// poolTick is how often the pool loop looks at every pool.
	poolTick = 200 * time.Millisecond
	// poolRefillParallel bounds the pooled boxes being made at once, over
	// all pools: refills must leave the engine to the API's creates.
	poolRefillParallel = 2
	// poolQuiet is how long refills wait after a create from the API
	// (unless the pool is empty): the claimer's first requests come then.
	poolQuiet = 250 * time.Millisecond
	// poolFailureBackoff delays a pool's next refill after one failed.
	poolFailureBackoff = 5 * time.Second
)

// ValidatePoolConfig checks a pool configuration, naming the bad field.
func ValidatePoolConfig(cfg wire.PoolConfig) error {
	if cfg.Min < 0 || cfg.Min > MaxPoolSize {
		return errdefs.Invalid("min", "must be between 0 and %d, got %d", MaxPoolSize, cfg.Min)
	}
	if cfg.Max < 0 || cfg.Max > MaxPoolSize {
		return errdefs.Invalid("max", "must be between 0 (same as min) and %d, got %d", MaxPoolSize, cfg.Max)
	}
	if cfg.Max != 0 && cfg.Max < cfg.Min {
		return errdefs.Invalid("max", "must be at least min (%d), got %d", cfg.Min, cfg.Max)
	}
	if math.IsNaN(cfg.RefillPerSecond) || cfg.RefillPerSecond < 0 || cfg.RefillPerSecond > maxRefillPerSecond {
		return errdefs.Invalid("refillPerSecond", "must be between 0 (the default, %g) and %d, got %g", DefaultRefillPerSecond, maxRefillPerSecond, cfg.RefillPerSecond)
	}
	return nil
}

// poolKey is what a request must match to claim a box: what the box was
// made with and cannot change while it runs. Env, labels, egress, gateway
// tokens and timeouts are applied at claim, and so are limits where the
// driver can change them on a running box (take's adjust).
type poolKey struct {
	version int
	image   string
	runtime string
	limits  wire.Limits
	persist bool
}

type pooledBox struct {
	id  string
	key poolKey
}

// pool is one template's pool.
type pool struct {
	name    string
	cfg     wire.PoolConfig
	removed bool // drained, then forgotten
	// fromConfig pools wait for a template that does not exist yet
	// instead of being removed with it.
	fromConfig bool
	version    int // the template version boxes are made from
	ready      []pooledBox
	adopting   map[string]time.Time // re-adopted at start, waiting for their agent until
	creating   int
	claims     int64
	misses     int64
	recent     []time.Time // claims within poolDemandWindow
	lastErr    string
	next       time.Time // rate limit: no refill starts before
	refill     histogram
}

// target is how many boxes the pool wants: min, grown by recent demand up
// to max.
func (p *pool) target(now time.Time) int {
	if p.removed {
		return 0
	}
	cut := 0
	for cut < len(p.recent) && now.Sub(p.recent[cut]) > poolDemandWindow {
		cut++
	}
	p.recent = p.recent[cut:]
	max := p.cfg.Max
	if max < p.cfg.Min {
		max = p.cfg.Min
	}
	return min(p.cfg.Min+len(p.recent), max)
}

func (p *pool) rate() float64 {
	if p.cfg.RefillPerSecond > 0 {
		return p.cfg.RefillPerSecond
	}
	return DefaultRefillPerSecond
}

func (p *pool) status() wire.PoolStatus {
	return wire.PoolStatus{
		Template: p.name, Config: p.cfg, Version: p.version,
		Ready: len(p.ready), Creating: p.creating + len(p.adopting),
		Claims: p.claims, Misses: p.misses, LastError: p.lastErr,
	}
}

// poolSet is the manager's pools.
type poolSet struct {
	st   PoolStore
	tpls TemplateSource

	mu     sync.Mutex
	byName map[string]*pool
	// members are the ids of every box a pool holds (ready, being made or
	// re-adopted): their events are not logged, as no user owns them.
	members  map[string]bool
	refiling int // pooled boxes being made, over all pools

	kick chan struct{}
	// cold counts the creates from the API (claims and the boxes they
	// make): refills wait while any runs, so the API's creates have the
	// engine, the firewall and the store first.
	cold atomic.Int64
	// lastCreate is when the last of them ended (UnixNano): refills also
	// wait poolQuiet after it, for the claimer's first requests.
	lastCreate atomic.Int64
	wg         sync.WaitGroup
}

// createEnded notes the end of a create from the API.
func (ps *poolSet) createEnded() {
	ps.lastCreate.Store(time.Now().UnixNano())
	ps.cold.Add(-1)
}

// quiet reports whether refills may start: no create from the API runs,
// and none ended within poolQuiet. A box's start takes the engine, runc
// and the firewall for a few hundred ms of the host's CPU; right after a
// claim the claimer's first exec, upload or clone would wait behind it
// (on two cores, a claim's first exec took 13 ms instead of 1-2).
func (ps *poolSet) quiet(now time.Time) bool {
	return ps.cold.Load() == 0 && now.Sub(time.Unix(0, ps.lastCreate.Load())) >= poolQuiet
}

func newPoolSet(st PoolStore, tpls TemplateSource) *poolSet {
	if st == nil || tpls == nil {
		return nil
	}
	return &poolSet{st: st, tpls: tpls, byName: map[string]*pool{}, members: map[string]bool{}, kick: make(chan struct{}, 1)}
}

func (ps *poolSet) wake() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// member reports whether id is a box a pool holds (unclaimed).
func (ps *poolSet) member(id string) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.members[id]
}

// take removes and returns a ready box of pool name that matches key, with
// the limits it was made with; the box is the caller's alone from then on.
// A box that matches but for its limits is taken when there is none that
// matches whole and adjust says its limits can be changed to key's.
func (ps *poolSet) take(name string, key poolKey, adjust func(from wire.Limits) bool) (string, wire.Limits, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[name]
	if p == nil || p.removed {
		return "", wire.Limits{}, false
	}
	i := slices.IndexFunc(p.ready, func(b pooledBox) bool { return b.key == key })
	if i < 0 && adjust != nil {
		i = slices.IndexFunc(p.ready, func(b pooledBox) bool {
			k := b.key
			k.limits = key.limits
			return k == key && adjust(b.key.limits)
		})
	}
	if i < 0 {
		return "", wire.Limits{}, false
	}
	b := p.ready[i]
	p.ready = slices.Delete(p.ready, i, i+1)
	delete(ps.members, b.id)
	return b.id, b.key.limits, true
}

// count records a claim or a miss of pool name, if it has a pool.
func (ps *poolSet) count(name string, claimed bool, now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[name]
	if p == nil || p.removed {
		return
	}
	if claimed {
		p.claims++
	} else {
		p.misses++
	}
	// A miss is demand too: the pool grows towards max under either.
	p.recent = append(p.recent, now)
	ps.wake()
}

// has reports whether template name has a pool.
func (ps *poolSet) has(name string) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[name]
	return p != nil && !p.removed
}

// poolKeyOf is the key of a box made from a resolved create.
func poolKeyOf(version int, image, runtime string, limits wire.Limits, persist bool) poolKey {
	return poolKey{version: version, image: image, runtime: runtime, limits: limits, persist: persist}
}

// SetPool configures the pool of template name (which must exist); min 0
// removes it, as DeletePool does. The configuration is stored, so the pool
// comes back with the daemon.
func (m *Manager) SetPool(ctx context.Context, name string, cfg wire.PoolConfig) (wire.PoolStatus, error) {
	ps := m.pools
	if ps == nil {
		return wire.PoolStatus{}, fmt.Errorf("warm pools are not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	if err := ValidatePoolConfig(cfg); err != nil {
		return wire.PoolStatus{}, err
	}
	t, err := ps.tpls.Get(ctx, name)
	if err != nil {
		return wire.PoolStatus{}, err
	}
	if cfg.Min == 0 {
		if err := m.DeletePool(ctx, name); err != nil {
			return wire.PoolStatus{}, err
		}
		return wire.PoolStatus{Template: name, Config: cfg, Version: t.Version}, nil
	}
	if err := ps.st.PutPool(ctx, name, cfg); err != nil {
		return wire.PoolStatus{}, err
	}
	ps.mu.Lock()
	p := ps.configure(name, cfg)
	if p.version == 0 {
		p.version = t.Version
	}
	st := p.status()
	ps.mu.Unlock()
	ps.wake()
	m.log.Info("pool configured", "template", name, "min", cfg.Min, "max", cfg.Max, "refillPerSecond", cfg.RefillPerSecond)
	return st, nil
}

// configure sets (or revives) pool name's config; ps.mu is held.
func (ps *poolSet) configure(name string, cfg wire.PoolConfig) *pool {
	p := ps.byName[name]
	if p == nil {
		p = &pool{name: name, adopting: map[string]time.Time{}}
		ps.byName[name] = p
	}
	p.cfg, p.removed = cfg, false
	return p
}

// DeletePool removes the pool of template name: its configuration at
// once, its boxes in the background. A template without a pool is a
// not-found.
func (m *Manager) DeletePool(ctx context.Context, name string) error {
	ps := m.pools
	if ps == nil {
		return fmt.Errorf("warm pools are not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	if !ps.has(name) {
		return fmt.Errorf("template %q has no pool: %w", name, errdefs.ErrNotFound)
	}
	if err := ps.st.DeletePool(ctx, name); err != nil {
		return err
	}
	ps.mu.Lock()
	if p := ps.byName[name]; p != nil {
		p.removed = true
	}
	ps.mu.Unlock()
	ps.wake()
	m.log.Info("pool removed; its boxes are drained", "template", name)
	return nil
}

// PoolStatus reports the pool of template name, and false if it has none.
func (m *Manager) PoolStatus(name string) (wire.PoolStatus, bool) {
	ps := m.pools
	if ps == nil {
		return wire.PoolStatus{}, false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[name]
	if p == nil || p.removed {
		return wire.PoolStatus{}, false
	}
	return p.status(), true
}

// Pools reports every pool, by template name.
func (m *Manager) Pools() []wire.PoolStatus {
	ps := m.pools
	if ps == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]wire.PoolStatus, 0, len(ps.byName))
	for _, p := range ps.byName {
		if !p.removed {
			out = append(out, p.status())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out
}

// ConfigurePools stores the pools of the daemon's config (they win over
// what the API set before for the same template) and loads every stored
// one. Call it before Recover.
func (m *Manager) ConfigurePools(ctx context.Context, fromConfig map[string]wire.PoolConfig) error {
	ps := m.pools
	if ps == nil {
		if len(fromConfig) > 0 {
			return errors.New("pools are configured but the daemon has no templates")
		}
		return nil
	}
	for name, cfg := range fromConfig {
		if err := templates.ValidateName("pools."+name, name); err != nil {
			return err
		}
		if err := ValidatePoolConfig(cfg); err != nil {
			return fmt.Errorf("pools.%s.%w", name, err)
		}
		if cfg.Min == 0 {
			if err := ps.st.DeletePool(ctx, name); err != nil {
				return err
			}
			continue
		}
		if err := ps.st.PutPool(ctx, name, cfg); err != nil {
			return err
		}
	}
	stored, err := ps.st.Pools(ctx)
	if err != nil {
		return err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for name, cfg := range stored {
		p := ps.configure(name, cfg)
		_, p.fromConfig = fromConfig[name]
	}
	return nil
}

// adoptPooled takes a box a pool held before the daemon restarted back
// into its pool once its agent redials; false when it has no pool any
// more (the caller removes it).
func (ps *poolSet) adoptPooled(sb wire.Sandbox, deadline time.Time) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.byName[sb.Pool]
	if p == nil || p.removed || sb.Template == nil {
		return false
	}
	p.adopting[sb.ID] = deadline
	ps.members[sb.ID] = true
	return true
}

// poolLoop keeps every pool at its size until ctx ends, then waits for
// the refills and drains it started.
func (m *Manager) poolLoop(ctx context.Context) {
	ps := m.pools
	tick := time.NewTicker(poolTick)
	defer tick.Stop()
	defer ps.wg.Wait()
	for {
		m.poolPass(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-ps.kick:
		}
	}
}

// poolPass looks at every pool once: it moves re-adopted boxes whose agent
// is back to ready, removes boxes that failed or are of an old version,
// drains removed pools and starts refills within the rate and the
// engine's share.
func (m *Manager) poolPass(ctx context.Context, now time.Time) {
	ps := m.pools
	ps.mu.Lock()
	names := make([]string, 0, len(ps.byName))
	for name := range ps.byName {
		names = append(names, name)
	}
	ps.mu.Unlock()
	sort.Strings(names)
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		// The template's latest version, outside the lock: a store read.
		version, gone := 0, false
		if t, err := ps.tpls.Get(ctx, name); errors.Is(err, errdefs.ErrNotFound) {
			gone = true
		} else if err == nil {
			version = t.Version
		} else {
			continue
		}
		var drop []string
		start := false
		var tpl wire.Template
		ps.mu.Lock()
		p := ps.byName[name]
		if gone && p.fromConfig && !p.removed && len(p.ready)+len(p.adopting) == 0 {
			ps.mu.Unlock()
			continue // the daemon's config names it: it waits for its build
		}
		if gone && !p.removed {
			m.log.Warn("the template of a pool is gone; draining the pool", "template", name)
			p.removed = true
			_ = ps.st.DeletePool(context.WithoutCancel(ctx), name)
		}
		if version > 0 {
			p.version = version
		}
		for id, until := range p.adopting {
			switch {
			case m.agentUp(id):
				delete(p.adopting, id)
				if sb, err := m.store.Get(ctx, id); err == nil && sb.Template != nil && sb.State == wire.StateRunning {
					p.ready = append(p.ready, pooledBox{id: id, key: poolKeyOf(sb.Template.Version, sb.Image, sb.Runtime, sb.Limits, sb.Persist)})
				} else {
					drop = append(drop, id)
				}
			case now.After(until):
				delete(p.adopting, id)
				drop = append(drop, id)
			}
		}
		keep := p.ready[:0]
		for _, b := range p.ready {
			// A box of an older version, or whose agent is gone (its
			// container died or was killed), is replaced.
			if p.removed || b.key.version != p.version || !m.agentUp(b.id) {
				drop = append(drop, b.id)
				continue
			}
			keep = append(keep, b)
		}
		p.ready = keep
		// Over target (demand fell, min lowered): the newest boxes go.
		if extra := len(p.ready) + p.creating - max(p.target(now), 0); extra > 0 && !p.removed {
			for range min(extra, len(p.ready)) {
				last := p.ready[len(p.ready)-1]
				p.ready = p.ready[:len(p.ready)-1]
				drop = append(drop, last.id)
			}
		}
		if !p.removed && len(p.ready)+p.creating+len(p.adopting) < p.target(now) &&
			!now.Before(p.next) && ps.refiling < poolRefillParallel && version > 0 &&
			(ps.quiet(now) || len(p.ready) == 0 && ps.cold.Load() == 0) {
			start = true
			p.creating++
			ps.refiling++
			p.next = now.Add(time.Duration(float64(time.Second) / p.rate()))
		}
		if p.removed && len(p.ready) == 0 && p.creating == 0 && len(p.adopting) == 0 {
			delete(ps.byName, name)
		}
		ps.mu.Unlock()

		for _, id := range drop {
			ps.wg.Add(1)
			go func() {
				defer ps.wg.Done()
				m.removePooled(context.WithoutCancel(ctx), id)
			}()
		}
		if start {
			t, err := ps.tpls.Get(ctx, name)
			if err == nil {
				tpl = t
			}
			ps.wg.Add(1)
			go func() {
				defer ps.wg.Done()
				m.refillOne(ctx, name, tpl, err)
			}()
		}
	}
}

// agentUp reports whether box id's agent session is up.
func (m *Manager) agentUp(id string) bool {
	m.mu.Lock()
	c, ok := m.conns[id]
	m.mu.Unlock()
	return ok && c.Connected()
}

// refillOne makes one box for pool name from template t and adds it to
// the pool's ready boxes.
func (m *Manager) refillOne(ctx context.Context, name string, t wire.Template, terr error) {
	ps := m.pools
	began := time.Now()
	var id string
	err := terr
	if err == nil {
		id, err = m.createPooled(ctx, name, t)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.refiling--
	p := ps.byName[name]
	if p == nil {
		// Drained and forgotten meanwhile.
		if err == nil {
			ps.wg.Add(1)
			go func() { defer ps.wg.Done(); m.removePooled(context.WithoutCancel(ctx), id) }()
		}
		return
	}
	p.creating--
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("refill pool", "template", name, "err", err)
			p.lastErr = err.Error()
			p.next = time.Now().Add(poolFailureBackoff)
		}
		return
	}
	p.lastErr = ""
	p.refill.observe(time.Since(began).Seconds())
	p.ready = append(p.ready, pooledBox{id: id, key: poolKeyOf(t.Version, t.Image, "", wire.Limits{}, true)})
	// The key as the box was made: read back from its record, which holds
	// the resolved runtime and limits.
	if sb, gerr := m.store.Get(context.WithoutCancel(ctx), id); gerr == nil {
		p.ready[len(p.ready)-1].key = poolKeyOf(t.Version, sb.Image, sb.Runtime, sb.Limits, sb.Persist)
	}
	ps.wake()
}

// removePooled destroys a box a pool held, logging no event: no user
// ever owned it.
func (m *Manager) removePooled(ctx context.Context, id string) {
	unlock, err := m.lock(ctx, id)
	if err != nil {
		m.log.Warn("remove a pooled box", "sandbox", id, "err", err)
		return
	}
	defer unlock()
	if err := m.teardown(ctx, id); err != nil {
		m.log.Warn("remove a pooled box", "sandbox", id, "err", err)
	}
	m.pools.mu.Lock()
	delete(m.pools.members, id)
	m.pools.mu.Unlock()
}

// histogram is a Prometheus histogram kept by hand, so that the collector
// can export it per pool as a const metric.
type histogram struct {
	counts []uint64 // per refillBuckets, cumulative at export
	count  uint64
	sum    float64
}

var refillBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(refillBuckets))
	}
	for i, b := range refillBuckets {
		if v <= b {
			h.counts[i]++
		}
	}
	h.count++
	h.sum += v
}
