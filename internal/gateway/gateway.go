// Package gateway is the LLM gateway: a reverse proxy on the sandbox
// network's gateway address that takes a sandbox-scoped token, swaps it for
// the provider's real key and forwards to the configured upstream, streaming
// both ways. It owns the tokens (minted per sandbox and provider, stored
// hashed), the per-sandbox metering, budgets and rate limits, and the audit
// log of every request. Keys never leave it: not to a sandbox, not to the
// API, not to a log line.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/loglimit"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// Store is what the gateway keeps in the database.
type Store interface {
	PutGatewayToken(ctx context.Context, t store.GatewayToken) error
	DeleteGatewayTokens(ctx context.Context, sandboxID, provider string) error
	ListGatewayTokens(ctx context.Context) ([]store.GatewayToken, error)
	AddGatewayUsage(ctx context.Context, us []store.GatewayUsage) ([]store.GatewayUsage, error)
	ListGatewayUsage(ctx context.Context) ([]store.GatewayUsage, error)
	DeleteGatewayUsage(ctx context.Context, sandboxID string) error
	// For Options.Shared: the daemons' reservations, and a call's
	// admission in one transaction (store.AdmitGatewayCall).
	AdmitGatewayCall(ctx context.Context, a store.GatewayAdmission) (store.GatewayCounters, bool, error)
	SetGatewayReservation(ctx context.Context, sandboxID, provider, daemon string, tokens int64) error
	DeleteGatewayReservations(ctx context.Context, daemon string) error
}

// Options configure a Gateway.
type Options struct {
	Providers []config.Provider
	// Getenv reads key_env keys; os.Getenv if nil.
	Getenv func(string) string
	Store  Store
	// SandboxURL is the gateway's address as sandboxes reach it, without a
	// path: http://host.docker.internal:8090.
	SandboxURL string
	// Subnet and SandboxAt, when set, tie a token to its sandbox's address:
	// a request from an address in Subnet must come from the box of the
	// token's sandbox. SandboxAt returns the sandbox at an address.
	// HostAddr, the host's own address on that network, is let through,
	// and so are the host's other addresses (IsHostAddr; the host's
	// interface addresses if nil); every other source is refused.
	Subnet     netip.Prefix
	HostAddr   netip.Addr
	SandboxAt  func(netip.Addr) (string, bool)
	IsHostAddr func(netip.Addr) bool
	// SandboxAddr, when set, ties a token to its sandbox's address the
	// other way round, for sandboxes with no subnet of their own (pods of
	// the Kubernetes driver, on the cluster's pod network): a request
	// from an address that is not the host's (IsHostAddr) must come from
	// the address SandboxAddr reports for the token's sandbox, its box's
	// address now; an invalid address (no running box) or an error
	// refuses it. It takes precedence over Subnet and SandboxAt.
	SandboxAddr func(ctx context.Context, id string) (netip.Addr, error)
	// MaxConcurrent caps one sandbox's requests in flight, all providers
	// together; config.DefaultGatewayMaxConcurrent if 0.
	MaxConcurrent int
	// FlushInterval is how often usage counters are written; 2s if 0.
	FlushInterval time.Duration
	// Recheck, on a store several daemons share (PostgreSQL), is how long
	// a token this gateway knows is taken on its word: a call after that
	// looks its hash up in the store again (tokenFinder), so a token
	// revoked or rotated away on another daemon is refused here within
	// Recheck. 0 never looks again: a daemon alone on its store sees
	// every revocation itself.
	Recheck time.Duration
	// Shared says other daemons add their counts to the same store (a set
	// on PostgreSQL): a call of a provider with a budget or a rate limit
	// is admitted in one store transaction, on the set's total, the
	// tokens the other daemons' calls in flight hold and the set's rate
	// bucket (admitShared).
	Shared bool
	// Daemon is this daemon's id in the store's daemon registry, under
	// which its calls' reservations are recorded; Shared needs it.
	Daemon string
	// LiveFor is how recent a daemon's heartbeat must be for its
	// reservations to count: a daemon killed with calls in flight holds
	// nothing after it. DefaultLiveFor if 0.
	LiveFor time.Duration
	Log     *slog.Logger
}

// DefaultRecheck is Options.Recheck for the daemons of a set.
const DefaultRecheck = 2 * time.Second

// DefaultLiveFor is Options.LiveFor when it is 0.
const DefaultLiveFor = 15 * time.Second

// TokenDir is where a rotated token is written inside a sandbox, as
// <provider>.token.
const TokenDir = "/.hotcell-state/gateway"

// Gateway is the LLM gateway. Its methods are safe for concurrent use.
type Gateway struct {
	opts      Options
	log       *slog.Logger
	providers map[string]*provider
	names     []string // sorted

	mu     sync.RWMutex
	byHash map[[32]byte]key // token hash → whose it is
	// checked is when each token of byHash was last found in the store
	// (or minted here), for Options.Recheck.
	checked map[[32]byte]time.Time
	grants  map[key][32]byte // whose → current token hash
	usage   map[key]*counters

	// flushMu orders usage writes against Forget, so that a write cannot
	// bring back the counters of a destroyed sandbox.
	flushMu sync.Mutex

	maxConcurrent int
	inflightMu    sync.Mutex
	inflight      map[string]int // sandbox → requests in flight

	reloadMu sync.Mutex // one Reload at a time

	// refusedLog rate-limits the audit lines of refused requests.
	refusedLog *loglimit.Limiter
}

// Refusal audit lines per sandbox (or source address) and minute; the
// next line let through carries droppedLines.
const refusedLinesPerMinute = 30

// key names one sandbox's access to one provider.
type key struct{ sandbox, provider string }

// New reads the providers' keys, loads the tokens and usage from the
// store, and revokes the tokens of providers that are no longer
// configured.
func New(ctx context.Context, opts Options) (*Gateway, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 2 * time.Second
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = config.Config{GatewayMaxConcurrent: config.DefaultGatewayMaxConcurrent}.MaxConcurrent()
	}
	if opts.LiveFor <= 0 {
		opts.LiveFor = DefaultLiveFor
	}
	if opts.Shared && (opts.Daemon == "" || opts.Store == nil) {
		return nil, errors.New("gateway: a store shared by a set needs the daemon's id (Options.Daemon) and the store")
	}
	g := &Gateway{
		opts:      opts,
		log:       opts.Log.With("component", "gateway"),
		providers: map[string]*provider{},
		byHash:    map[[32]byte]key{},
		checked:   map[[32]byte]time.Time{},
		grants:    map[key][32]byte{},
		usage:     map[key]*counters{},

		maxConcurrent: opts.MaxConcurrent,
		inflight:      map[string]int{},
		refusedLog:    loglimit.New(refusedLinesPerMinute, time.Minute),
	}
	for _, pc := range opts.Providers {
		p, err := newProvider(pc, opts.Getenv, g.log)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		g.providers[p.name] = p
		g.names = append(g.names, p.name)
	}
	slices.Sort(g.names)
	if opts.Store == nil {
		return g, nil
	}
	toks, err := opts.Store.ListGatewayTokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	for _, t := range toks {
		h, ok := parseHash(t.Hash)
		if !ok {
			continue
		}
		if _, known := g.providers[t.Provider]; !known {
			// The provider was removed from the config: its tokens go too.
			g.log.Info("revoking tokens of a provider no longer configured", "sandbox", t.SandboxID, "provider", t.Provider)
			if err := opts.Store.DeleteGatewayTokens(ctx, t.SandboxID, t.Provider); err != nil {
				return nil, fmt.Errorf("gateway: %w", err)
			}
			continue
		}
		k := key{t.SandboxID, t.Provider}
		g.byHash[h] = k
		g.checked[h] = time.Now()
		g.grants[k] = h
	}
	if opts.Shared {
		// A daemon starting has no call in flight: what it reserved
		// before it was killed holds nothing now.
		if err := opts.Store.DeleteGatewayReservations(ctx, opts.Daemon); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	us, err := opts.Store.ListGatewayUsage(ctx)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	for _, u := range us {
		g.usage[key{u.SandboxID, u.Provider}] = &counters{c: u.GatewayCounters, stored: u.GatewayCounters}
	}
	return g, nil
}

// Reload re-reads the keys of the configured providers from where ps, the
// providers as the config now has them, say they are (key_env, key_file)
// and swaps them in: the next request upstream carries the new key;
// requests in flight keep theirs. All keys are read before any is
// swapped, so a key that cannot be read changes nothing. Other changes to
// the providers (added, removed, new budgets or URLs) wait for a restart
// and are listed as such.
func (g *Gateway) Reload(ps []config.Provider) (wire.GatewayReload, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	byName := map[string]config.Provider{}
	for _, pc := range ps {
		byName[pc.Name] = pc
	}
	res := wire.GatewayReload{Changed: []string{}, Unchanged: []string{}}
	keys := map[string]string{}
	for _, n := range g.names {
		p := g.providers[n]
		pc, ok := byName[n]
		if !ok {
			res.NeedsRestart = append(res.NeedsRestart, fmt.Sprintf("provider %s was removed from the config", n))
			continue
		}
		delete(byName, n)
		key, err := pc.ReadKey(g.opts.Getenv)
		if err != nil {
			return wire.GatewayReload{}, fmt.Errorf("reload gateway keys: %w", err)
		}
		keys[n] = key
		if !sameSettings(p.cfg, pc) {
			res.NeedsRestart = append(res.NeedsRestart, fmt.Sprintf("provider %s: settings other than its key changed", n))
		}
	}
	for n := range byName {
		res.NeedsRestart = append(res.NeedsRestart, fmt.Sprintf("provider %s was added to the config", n))
	}
	slices.Sort(res.NeedsRestart)
	for _, n := range g.names {
		key, ok := keys[n]
		if !ok {
			continue
		}
		p := g.providers[n]
		old := *p.keyValue.Load()
		p.setKey(key)
		if *p.keyValue.Load() != old {
			res.Changed = append(res.Changed, n)
		} else {
			res.Unchanged = append(res.Unchanged, n)
		}
	}
	g.log.Info("reloaded gateway keys", "changed", res.Changed, "unchanged", res.Unchanged, "needsRestart", res.NeedsRestart)
	return res, nil
}

// sameSettings compares two provider configs but for where the key is.
func sameSettings(a, b config.Provider) bool {
	a.KeyEnv, a.KeyFile, b.KeyEnv, b.KeyFile = "", "", "", ""
	return a.Name == b.Name && a.Kind == b.Kind && a.BaseURL == b.BaseURL && a.Header == b.Header && a.Format == b.Format &&
		a.BudgetRequests == b.BudgetRequests && a.BudgetTokens == b.BudgetTokens && a.RatePerMinute == b.RatePerMinute &&
		a.Timeout == b.Timeout && a.DefaultMaxTokens == b.DefaultMaxTokens && slices.Equal(a.Paths, b.Paths)
}

// Enabled reports whether any provider is configured.
func (g *Gateway) Enabled() bool { return len(g.providers) > 0 }

// Providers lists the configured providers, without their keys.
func (g *Gateway) Providers() []wire.GatewayProvider {
	out := make([]wire.GatewayProvider, 0, len(g.names))
	for _, n := range g.names {
		p := g.providers[n]
		out = append(out, wire.GatewayProvider{Name: p.name, Kind: p.kind, BaseURL: p.base.String(), Budget: p.budget()})
	}
	return out
}

// Validate checks the provider names of a create request; field names the
// request field ("gateway") in errors.
func (g *Gateway) Validate(field string, names []string) error {
	if len(names) > 0 && len(g.providers) == 0 {
		return errdefs.Invalid(field, "no LLM gateway providers are configured on this daemon (see [[provider]] in docs/gateway.md)")
	}
	for i, n := range names {
		if _, ok := g.providers[n]; !ok {
			return errdefs.Invalid(fmt.Sprintf("%s[%d]", field, i), "unknown provider %q (configured: %s)", n, strings.Join(g.names, ", "))
		}
		if slices.Index(names, n) != i {
			return errdefs.Invalid(fmt.Sprintf("%s[%d]", field, i), "provider %q is listed twice", n)
		}
	}
	return nil
}

// EnvVars returns the names of the variables Grant sets for names, so
// that a create request cannot set them too.
func (g *Gateway) EnvVars(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		p, ok := g.providers[n]
		if !ok {
			continue
		}
		for _, v := range p.envNames(!seen[p.kind]) {
			out = append(out, v)
		}
		seen[p.kind] = true
	}
	return out
}

// Grant mints a token per provider for a new sandbox and returns the env
// vars that point the sandbox's SDKs at the gateway: HOTCELL_<NAME>_BASE_URL
// and HOTCELL_<NAME>_TOKEN for every provider, and OPENAI_BASE_URL +
// OPENAI_API_KEY or ANTHROPIC_BASE_URL + ANTHROPIC_API_KEY for the first
// provider of each of those kinds. The sandbox's record must exist.
func (g *Gateway) Grant(ctx context.Context, id string, names []string) (map[string]string, error) {
	if err := g.Validate("gateway", names); err != nil {
		return nil, err
	}
	env := map[string]string{}
	seen := map[string]bool{}
	for _, n := range names {
		p := g.providers[n]
		tok, err := g.mint(ctx, key{id, n})
		if err != nil {
			if ferr := g.Forget(ctx, id); ferr != nil {
				g.log.Warn("revoke the tokens of a failed grant", "sandbox", id, "err", ferr)
			}
			return nil, err
		}
		url := g.baseURL(n)
		for i, v := range p.envNames(!seen[p.kind]) {
			if i%2 == 0 {
				env[v] = url
			} else {
				env[v] = tok
			}
		}
		seen[p.kind] = true
	}
	if len(names) > 0 {
		g.log.Info("granted gateway access", "sandbox", id, "providers", names)
	}
	return env, nil
}

func (g *Gateway) baseURL(provider string) string {
	return strings.TrimSuffix(g.opts.SandboxURL, "/") + "/" + provider
}

// mint makes a new token for k, records its hash and makes it current; a
// previous token of k stops working.
func (g *Gateway) mint(ctx context.Context, k key) (string, error) {
	tok, h := newToken()
	if g.opts.Store != nil {
		if err := g.opts.Store.PutGatewayToken(ctx, store.GatewayToken{SandboxID: k.sandbox, Provider: k.provider, Hash: formatHash(h), CreatedAt: time.Now().UTC()}); err != nil {
			return "", err
		}
	}
	g.mu.Lock()
	if old, ok := g.grants[k]; ok {
		delete(g.byHash, old)
		delete(g.checked, old)
	}
	g.grants[k] = h
	g.byHash[h] = k
	g.checked[h] = time.Now()
	g.mu.Unlock()
	return tok, nil
}

// Rotate replaces a sandbox's token for provider and returns the new one;
// the old one is refused from now on.
func (g *Gateway) Rotate(ctx context.Context, id, provider string) (wire.GatewayCredential, error) {
	k := key{id, provider}
	g.mu.RLock()
	_, ok := g.grants[k]
	g.mu.RUnlock()
	if !ok {
		return wire.GatewayCredential{}, fmt.Errorf("sandbox %s has no token for provider %q: %w", id, provider, errdefs.ErrNotFound)
	}
	tok, err := g.mint(ctx, k)
	if err != nil {
		return wire.GatewayCredential{}, fmt.Errorf("rotate token of sandbox %s for %q: %w", id, provider, err)
	}
	g.log.Info("rotated gateway token", "sandbox", id, "provider", provider)
	return wire.GatewayCredential{Provider: provider, Token: tok, BaseURL: g.baseURL(provider)}, nil
}

// Revoke ends a sandbox's access to one provider. Its usage is kept.
func (g *Gateway) Revoke(ctx context.Context, id, provider string) error {
	k := key{id, provider}
	g.mu.Lock()
	if h, ok := g.grants[k]; ok {
		delete(g.byHash, h)
		delete(g.checked, h)
		delete(g.grants, k)
	}
	g.mu.Unlock()
	if g.opts.Store != nil {
		if err := g.opts.Store.DeleteGatewayTokens(ctx, id, provider); err != nil {
			return err
		}
	}
	g.log.Info("revoked gateway token", "sandbox", id, "provider", provider)
	return nil
}

// Forget revokes every token of a destroyed sandbox and drops its usage.
// It is idempotent.
func (g *Gateway) Forget(ctx context.Context, id string) error {
	g.flushMu.Lock()
	defer g.flushMu.Unlock()
	g.mu.Lock()
	for k, h := range g.grants {
		if k.sandbox == id {
			delete(g.byHash, h)
			delete(g.checked, h)
			delete(g.grants, k)
		}
	}
	for k := range g.usage {
		if k.sandbox == id {
			delete(g.usage, k)
		}
	}
	g.mu.Unlock()
	g.refusedLog.Forget(id)
	if g.opts.Store == nil {
		return nil
	}
	if err := g.opts.Store.DeleteGatewayTokens(ctx, id, ""); err != nil {
		return err
	}
	return g.opts.Store.DeleteGatewayUsage(ctx, id)
}

// Usage reports a sandbox's use of every provider it holds a token for or
// has used.
func (g *Gateway) Usage(id string) []wire.GatewayUsage {
	g.mu.RLock()
	names := map[string]*counters{}
	for k := range g.grants {
		if k.sandbox == id {
			names[k.provider] = nil
		}
	}
	for k, c := range g.usage {
		if k.sandbox == id {
			names[k.provider] = c
		}
	}
	g.mu.RUnlock()
	out := make([]wire.GatewayUsage, 0, len(names))
	for n, c := range names {
		u := wire.GatewayUsage{Provider: n}
		if c != nil {
			u = c.wire(n)
		}
		if p, ok := g.providers[n]; ok {
			u.Budget = p.budget()
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b wire.GatewayUsage) int { return strings.Compare(a.Provider, b.Provider) })
	return out
}

// counter returns (making it) the counters of k.
func (g *Gateway) counter(k key) *counters {
	g.mu.RLock()
	c, ok := g.usage[k]
	g.mu.RUnlock()
	if ok {
		return c
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok = g.usage[k]; !ok {
		c = &counters{}
		g.usage[k] = c
	}
	return c
}

// Run writes changed usage counters every FlushInterval until ctx ends,
// then once more.
func (g *Gateway) Run(ctx context.Context) error {
	t := time.NewTicker(g.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return g.Flush(context.WithoutCancel(ctx))
		case <-t.C:
			if err := g.Flush(ctx); err != nil {
				g.log.Warn("write gateway usage", "err", err)
			}
		}
	}
}

// Flush writes the counters that changed since the last flush, and the
// reservations the store does not have as they are (a write at a call's
// end that failed).
func (g *Gateway) Flush(ctx context.Context) error {
	if g.opts.Store == nil {
		return nil
	}
	g.flushMu.Lock()
	defer g.flushMu.Unlock()
	g.mu.RLock()
	var (
		us    []store.GatewayUsage
		cs    []*counters
		ats   []store.GatewayCounters
		stale []key
	)
	for k, c := range g.usage {
		if delta, at, ok := c.unwritten(); ok {
			us = append(us, store.GatewayUsage{SandboxID: k.sandbox, Provider: k.provider, GatewayCounters: delta})
			cs = append(cs, c)
			ats = append(ats, at)
		}
		if _, differs := c.reservation(); g.opts.Shared && differs {
			stale = append(stale, k)
		}
	}
	g.mu.RUnlock()
	err := g.add(ctx, us, cs, ats)
	for _, k := range stale {
		g.mu.RLock()
		c, ok := g.usage[k]
		g.mu.RUnlock()
		if ok {
			err = errors.Join(err, g.writeReservation(ctx, k, c))
		}
	}
	return err
}

// admitShared decides a call's admission on a store the daemons of a set
// share: in one transaction the store adds what this daemon has not
// written, locks the sandbox's total, and sums the tokens the other live
// daemons' calls hold; the budgets and the rate limit are checked on
// those and on the rate bucket the set's last admission left, and the
// call's count, this daemon's reservation and the bucket are written
// before the total is let go. So two daemons admitting at once are
// ordered, the set's calls pass the token budget by at most one
// reservation, as one daemon's do, and the rate is the set's, not each
// daemon's. ok is false when it could not decide (the store did not
// answer, or the sandbox is gone): the caller then decides on this
// daemon's counts.
func (g *Gateway) admitShared(ctx context.Context, k key, c *counters, p *provider, reserve int64) (rej *rejection, ok bool) {
	g.flushMu.Lock()
	defer g.flushMu.Unlock()
	delta, at, _ := c.unwritten()
	now := time.Now()
	var (
		add      store.GatewayCounters
		reserved int64
		decided  bool
	)
	total, found, err := g.opts.Store.AdmitGatewayCall(ctx, store.GatewayAdmission{
		SandboxID: k.sandbox, Provider: k.provider, Daemon: g.opts.Daemon,
		Pending: delta, Reservations: p.budgetTokens > 0, Rate: p.rate > 0, LiveAfter: now.Add(-g.opts.LiveFor),
		Decide: func(total store.GatewayCounters, others int64, rate store.GatewayRate) (store.GatewayCounters, int64, store.GatewayRate) {
			var after store.GatewayRate
			rej, add, reserved, after = c.admitOn(p, now, reserve, total, at, others, rate)
			decided = true
			return add, reserved, after
		},
	})
	switch {
	case err == nil && found:
		c.written(addCounters(at, add), total)
		if p.budgetTokens > 0 {
			c.reservationWritten(reserved)
		}
	case err != nil:
		g.log.Warn("admit a gateway call in the store; checking the budget on this daemon's counts", "sandbox", k.sandbox, "err", err)
	}
	// Decided but not written (the commit failed): the count stays
	// unwritten here, for the next write, and Flush writes the
	// reservation.
	return rej, decided
}

// syncReservation writes the tokens k's calls in flight on this daemon
// hold to the store, if the store records them and has another number.
func (g *Gateway) syncReservation(ctx context.Context, k key, c *counters) error {
	if !g.opts.Shared {
		return nil
	}
	g.flushMu.Lock()
	defer g.flushMu.Unlock()
	return g.writeReservation(ctx, k, c)
}

// writeReservation is syncReservation under flushMu.
func (g *Gateway) writeReservation(ctx context.Context, k key, c *counters) error {
	n, stale := c.reservation()
	if !stale {
		return nil
	}
	if err := g.opts.Store.SetGatewayReservation(ctx, k.sandbox, k.provider, g.opts.Daemon, n); err != nil {
		return err
	}
	c.reservationWritten(n)
	return nil
}

// writeThrough adds what k's counters hold unwritten to the store as a
// call of k's ends, so that a daemon killed the moment after loses none of
// it (Flush would have written it up to FlushInterval later, and a SIGKILL
// before that lost it). A failed write is left to the next Flush.
func (g *Gateway) writeThrough(ctx context.Context, k key, c *counters) {
	if err := g.addOne(ctx, k, c); err != nil {
		g.log.Warn("write gateway usage as the call ended; the next flush writes it", "sandbox", k.sandbox, "err", err)
	}
	if err := g.syncReservation(ctx, k, c); err != nil {
		g.log.Warn("release a gateway call's reservation in the store; the next flush writes it", "sandbox", k.sandbox, "err", err)
	}
}

// addOne adds what k's counters hold unwritten to the store and takes its
// total back, under flushMu.
func (g *Gateway) addOne(ctx context.Context, k key, c *counters) error {
	if g.opts.Store == nil {
		return nil
	}
	g.flushMu.Lock()
	defer g.flushMu.Unlock()
	delta, at, ok := c.unwritten()
	if !ok {
		return nil
	}
	us := []store.GatewayUsage{{SandboxID: k.sandbox, Provider: k.provider, GatewayCounters: delta}}
	return g.add(ctx, us, []*counters{c}, []store.GatewayCounters{at})
}

// add adds the deltas us (of counters cs, as they were at ats) to the
// store, under flushMu. Added, not written over: the daemons of a set each
// add what they counted, and each learns the sum from the answer. A failed
// write changes nothing here: its counts are added at the next.
func (g *Gateway) add(ctx context.Context, us []store.GatewayUsage, cs []*counters, ats []store.GatewayCounters) error {
	if len(us) == 0 {
		return nil
	}
	totals, err := g.opts.Store.AddGatewayUsage(ctx, us)
	if err != nil {
		return err
	}
	byKey := make(map[key]store.GatewayCounters, len(totals))
	for _, t := range totals {
		byKey[key{t.SandboxID, t.Provider}] = t.GatewayCounters
	}
	for i, u := range us {
		total, ok := byKey[key{u.SandboxID, u.Provider}]
		if !ok {
			// The sandbox is gone (another daemon destroyed it): its
			// counts went with it.
			total = ats[i]
		}
		cs[i].written(ats[i], total)
	}
	return nil
}

// Handler is the gateway's HTTP handler, for its own listener.
func (g *Gateway) Handler() http.Handler { return http.HandlerFunc(g.serve) }

// lookup returns whose token tok is. A token this gateway does not know
// is looked up in the store when it can find one (tokenFinder): another
// daemon of a set on the same store may have minted it after this one
// loaded its tokens, and a pod whose base URL leads to any daemon of the
// set (a Service in front of them) then reaches this one.
//
// With Options.Recheck a known token is looked up again once it was last
// found longer ago than that: another daemon of the set may have revoked
// it (or rotated it away, or destroyed its sandbox), which deletes it
// from the store. A token no longer there is forgotten and refused; so is
// one the store cannot be asked about then, as a revocation may be what
// this gateway cannot see.
func (g *Gateway) lookup(ctx context.Context, tok string) (key, bool) {
	if tok == "" {
		return key{}, false
	}
	h := hashToken(tok)
	g.mu.RLock()
	k, ok := g.byHash[h]
	at := g.checked[h]
	g.mu.RUnlock()
	f, canFind := g.opts.Store.(tokenFinder)
	if ok && (!canFind || g.opts.Recheck <= 0 || time.Since(at) < g.opts.Recheck) {
		return k, true
	}
	if !canFind || !wellFormed(tok) {
		return key{}, false
	}
	t, found, err := f.GatewayTokenByHash(ctx, formatHash(h))
	if err != nil {
		g.log.Warn("look up a gateway token in the store", "err", err)
		return key{}, false
	}
	if _, known := g.providers[t.Provider]; !found || !known {
		if ok {
			g.mu.Lock()
			if g.byHash[h] == k {
				delete(g.byHash, h)
				delete(g.checked, h)
				if g.grants[k] == h {
					delete(g.grants, k)
				}
			}
			g.mu.Unlock()
			g.log.Info("refusing a gateway token revoked on another daemon", "sandbox", k.sandbox, "provider", k.provider)
		}
		return key{}, false
	}
	k = key{t.SandboxID, t.Provider}
	g.mu.Lock()
	if old, ok := g.grants[k]; ok && old != h {
		delete(g.byHash, old) // rotated on another daemon
		delete(g.checked, old)
	}
	g.grants[k] = h
	g.byHash[h] = k
	g.checked[h] = time.Now()
	g.mu.Unlock()
	return k, true
}

// tokenFinder is a store that finds a token's record by its hash.
type tokenFinder interface {
	GatewayTokenByHash(ctx context.Context, hash string) (store.GatewayToken, bool, error)
}
