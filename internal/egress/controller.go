package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-iptables/iptables"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Config configures a Controller.
type Config struct {
	// Network is the bridge network sandboxes join; Subnet its addresses.
	Network string
	Subnet  netip.Prefix
	// Upstreams are the host:port resolvers allowed names are forwarded to.
	Upstreams []string
	// GatewayPort is the LLM gateway's TCP port on the network's gateway
	// address, reachable from every sandbox; 0 for none.
	GatewayPort int
	// AgentPort is the TCP agent channel's port, reachable from every
	// sandbox on the network's gateway address (its agent dials it); 0
	// for none.
	AgentPort int
	// DefaultMode is the mode of a sandbox created without one.
	DefaultMode string
	// AllowPrivate are the private networks (IPv4 CIDRs) sandboxes may
	// reach; every other address of PrivateRanges is dropped in all modes.
	AllowPrivate []netip.Prefix
	// MinTTL is the least time an answered address stays allowed; 30s if 0.
	MinTTL time.Duration
	// VerifyInterval is how often the rules are checked and restored (after
	// a firewall reload or an engine restart); 10s if 0.
	VerifyInterval time.Duration
	// MaxLearned caps the addresses (with their ports) the resolver holds
	// open for one allowlist sandbox; DefaultMaxLearned if 0.
	MaxLearned int
	// QueryRate and QueryBurst bound one sandbox's DNS queries a second;
	// DefaultQueryRate and twice it if 0. Queries above are REFUSED
	// without being forwarded.
	QueryRate, QueryBurst float64
	// Node runs the controller on a Kubernetes node (hotcell egress-node)
	// rather than beside Docker: forwarded traffic is caught in FORWARD,
	// not DOCKER-USER; sandboxes are matched by a set of their addresses,
	// not by Subnet, which is the cluster's pod range and holds other pods
	// too (it is still what "other sandboxes" refuses); the jumps are kept
	// first in their chains; and a box cannot leave the network, so mode
	// none is a chain that refuses everything but Allowed.
	Node bool
	// ForwardChain overrides the chain forwarded traffic is caught in
	// (DOCKER-USER; FORWARD with Node).
	ForwardChain string
	// Allowed are TCP endpoints every sandbox reaches in every mode, none
	// included: on a cluster, the daemon's agent channel.
	Allowed []netip.AddrPort
	Log     *slog.Logger
}

// maxDenied bounds each sandbox's log of denied attempts.
const maxDenied = 100

// Defaults of Config.
const (
	DefaultMaxLearned = 1024
	DefaultQueryRate  = 100
)

// Controller puts sandboxes on the egress network and keeps their firewall
// rules and resolver state. Its methods are safe for concurrent use.
type Controller struct {
	cfg     Config
	drv     driver.Networker
	log     *slog.Logger
	fw      *firewall
	dns     *resolver
	gateway netip.Addr

	// v6 drops IPv6 from the bridge; nil on a host without IPv6.
	v6 *v6Guard

	// nfl reads the denial log; nil when NFLOG is not available here.
	nfl *nflogConn
	// debugLog bounds the debug lines of logged denials.
	debugLog logLimiter

	// verifyMu keeps Release and verify's restoring of missing rules
	// apart: verify would put back rules Release just removed.
	verifyMu sync.Mutex

	mu     sync.Mutex
	sbs    map[string]*sandboxState
	byAddr map[netip.Addr]*sandboxState
	byKey  map[string]*sandboxState // sandboxKey → state, for NFLOG prefixes
}

type learnKey struct {
	name string
	rule dynRule
}

type sandboxState struct {
	id       string
	policy   Policy
	addr     netip.Addr
	enforced bool
	learned  map[learnKey]time.Time // → expiry
	dropBase counters               // drops of chains already replaced
	lastSeen int64                  // drop packets already logged as denials
	refused  int64
	answered int64 // DNS answers forwarded to the sandbox
	logged   int64 // packets the denial log recorded
	denied   []wire.EgressDenial
	// queries bounds the sandbox's DNS query rate; logLines the log
	// lines it causes.
	queries  tokenBucket
	logLines lineLimiter
	capped   int64 // answered addresses not learned: the cap was reached
}

// New returns a controller; Start it before use.
func New(drv driver.Networker, cfg Config) *Controller {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = 30 * time.Second
	}
	if cfg.VerifyInterval <= 0 {
		cfg.VerifyInterval = 10 * time.Second
	}
	if cfg.DefaultMode == "" {
		cfg.DefaultMode = wire.EgressOpen
	}
	if cfg.MaxLearned <= 0 {
		cfg.MaxLearned = DefaultMaxLearned
	}
	if cfg.QueryRate <= 0 {
		cfg.QueryRate = DefaultQueryRate
	}
	if cfg.QueryBurst < 1 {
		cfg.QueryBurst = 2 * cfg.QueryRate
	}
	log := cfg.Log.With("component", "egress")
	c := &Controller{
		cfg:    cfg,
		drv:    drv,
		log:    log,
		sbs:    map[string]*sandboxState{},
		byAddr: map[netip.Addr]*sandboxState{},
		byKey:  map[string]*sandboxState{},
	}
	c.dns = &resolver{src: c, upstreams: cfg.Upstreams, minTTL: cfg.MinTTL, log: log, blocked: c.blockedAddr}
	return c
}

// ErrNetworkInUse says that another daemon serves the egress network.
var ErrNetworkInUse = errors.New("egress network in use")

// Start makes the network, the base firewall rules and the resolver. Call
// Close also when it fails: it releases what it took.
func (c *Controller) Start(ctx context.Context) error {
	gw, err := c.drv.EnsureNetwork(ctx, c.cfg.Network, c.cfg.Subnet)
	if err != nil {
		return fmt.Errorf("egress network: %w", err)
	}
	c.gateway = gw
	// The resolver's address first, before any rule changes: a daemon
	// already on this network holds it, and its rules must stay its own.
	dnsAddr := netip.AddrPortFrom(gw, dnsPort).String()
	if err := c.dns.bind(dnsAddr); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("the egress network %s (subnet %s) is in use: its DNS address %s is taken, most likely by another hotcell daemon on this host; give this daemon a network of its own with --egress-network and --egress-subnet (HOTCELL_EGRESS_NETWORK, HOTCELL_EGRESS_SUBNET): %w",
				c.cfg.Network, c.cfg.Subnet, dnsAddr, ErrNetworkInUse)
		}
		return fmt.Errorf("egress resolver: %w", err)
	}
	ipt, err := iptables.New()
	if err != nil {
		return fmt.Errorf("egress firewall: iptables: %w", err)
	}
	var ports []int
	if c.cfg.GatewayPort > 0 {
		ports = append(ports, c.cfg.GatewayPort)
	}
	if c.cfg.AgentPort > 0 {
		ports = append(ports, c.cfg.AgentPort)
	}
	c.fw = c.cfg.firewall(iptablesCmd{ipt}, gw, ports)
	if hostHasIPv6() {
		bridge, err := c.drv.NetworkBridge(ctx, c.cfg.Network)
		if err != nil {
			return fmt.Errorf("egress network: %w", err)
		}
		if bridge == "" {
			return fmt.Errorf("egress network %s: no bridge to drop IPv6 from", c.cfg.Network)
		}
		ip6, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv6))
		if err != nil {
			return fmt.Errorf("egress firewall: ip6tables: %w", err)
		}
		c.v6 = newV6Guard(ip6, bridge, c.fw.base)
		if err := c.v6.ensure(); err != nil {
			return fmt.Errorf("egress firewall: %w", err)
		}
	}
	// Without NFLOG (no nfnetlink_log, or every group taken) the drops are
	// still counted, just not itemised; the API says which.
	if nfl, err := openNflog(nflogGroups(c.cfg.Network, c.cfg.Subnet)); err != nil {
		c.log.Warn("egress denial log unavailable: drops are counted, their destinations not recorded", "err", err)
	} else {
		c.nfl = nfl
		c.fw.logGroup = nfl.group
	}
	if _, err := c.fw.ensureBase(); err != nil {
		return fmt.Errorf("egress firewall: %w", err)
	}
	if err := c.fw.resetLearned(); err != nil {
		return fmt.Errorf("egress firewall: %w", err)
	}
	if err := c.fw.takeInventory(); err != nil {
		return fmt.Errorf("egress firewall: %w", err)
	}
	if err := c.dns.serve(); err != nil {
		return fmt.Errorf("egress resolver: %w", err)
	}
	c.log.Info("egress ready", "network", c.cfg.Network, "subnet", c.cfg.Subnet, "gateway", gw,
		"chain", c.fw.base, "upstreams", c.cfg.Upstreams, "defaultMode", c.cfg.DefaultMode, "nflogGroup", c.fw.logGroup,
		"allowPrivate", c.cfg.AllowPrivate)
	return nil
}

// firewall makes the firewall cfg describes.
func (cfg Config) firewall(ipt iptablesAPI, gw netip.Addr, ports []int) *firewall {
	f := newFirewall(ipt, ipsetCmd{}, cfg.Network, cfg.Subnet, gw, ports, cfg.AllowPrivate)
	f.node = cfg.Node
	if cfg.Node {
		f.forward = "FORWARD"
	} else {
		f.agentPort = cfg.AgentPort
	}
	if cfg.ForwardChain != "" {
		f.forward = cfg.ForwardChain
	}
	f.allowed = cfg.Allowed
	return f
}

// Close stops the resolver and the denial log reader. The rules stay:
// sandboxes outlive the daemon, and so does what confines them.
func (c *Controller) Close() {
	c.dns.shutdown()
	if c.nfl != nil {
		_ = c.nfl.close()
	}
}

// blockedAddr says whether the firewall drops a in every mode; the
// firewall is there once Start made it.
func (c *Controller) blockedAddr(a netip.Addr) bool {
	return c.fw != nil && c.fw.blockedAddr(a)
}

// Gateway is the host's address on the egress network.
func (c *Controller) Gateway() netip.Addr { return c.gateway }

// DefaultMode is the mode of a sandbox created without one.
func (c *Controller) DefaultMode() string { return c.cfg.DefaultMode }

// Resolve validates p against the daemon's default mode.
func (c *Controller) Resolve(p wire.EgressPolicy) (wire.EgressPolicy, error) {
	pol, err := ParsePolicy("egress", p, c.cfg.DefaultMode)
	if err != nil {
		return wire.EgressPolicy{}, err
	}
	return pol.Wire(), nil
}

// Prepare sets the network fields of a new box's spec for policy p. Every
// box starts with no network, whatever its mode: Apply, after the start,
// connects it (the Docker driver with a veth of its own, which spares the
// start the engine's attach: bench/README.md) or leaves it without.
func (c *Controller) Prepare(spec *driver.Spec, p wire.EgressPolicy) {
	spec.Network = driver.NetworkNone
	spec.DNS = []netip.Addr{c.gateway}
	spec.HostGateway = c.gateway
}

func (c *Controller) state(id string) *sandboxState {
	st, ok := c.sbs[id]
	if !ok {
		st = &sandboxState{id: id, learned: map[learnKey]time.Time{}}
		c.sbs[id] = st
		c.byKey[sandboxKey(id)] = st
	}
	return st
}

// Apply puts policy p in force for the running box id: it attaches or
// detaches the box and replaces its rules. A failure leaves the previous
// rules in force.
func (c *Controller) Apply(ctx context.Context, id string, wp wire.EgressPolicy) error {
	p, err := ParsePolicy("egress", wp, c.cfg.DefaultMode)
	if err != nil {
		return err
	}
	if c.cfg.Node {
		if err := c.ensureBaseFirst(); err != nil {
			return fmt.Errorf("apply egress of %s: %w", id, err)
		}
	}
	// On a node a box cannot be detached: mode none is a chain of its own.
	if p.Mode == wire.EgressNone && !c.cfg.Node {
		if err := c.drv.Disconnect(ctx, id, c.cfg.Network); err != nil {
			return fmt.Errorf("apply egress of %s: %w", id, err)
		}
		old, ferr := c.fw.remove(id, true)
		c.mu.Lock()
		st := c.state(id)
		c.setAddr(st, netip.Addr{})
		st.policy, st.enforced = p, true
		st.dropBase.add(old)
		clear(st.learned)
		c.mu.Unlock()
		if ferr != nil {
			c.log.Warn("tidy up rules of a sandbox without network", "sandbox", id, "err", ferr)
		}
		return nil
	}
	// A box on the network (one whose mode changes, or after a daemon
	// restart) has its address already; a new one is connected.
	addr, err := c.drv.BoxAddress(ctx, id, c.cfg.Network)
	if err != nil {
		return fmt.Errorf("apply egress of %s: %w", id, err)
	}
	if !addr.IsValid() {
		if err := c.drv.Connect(ctx, id, c.cfg.Network); err != nil {
			return fmt.Errorf("apply egress of %s: %w", id, err)
		}
		if addr, err = c.drv.BoxAddress(ctx, id, c.cfg.Network); err != nil {
			return fmt.Errorf("apply egress of %s: %w", id, err)
		}
	}
	if !addr.IsValid() {
		return fmt.Errorf("apply egress of %s: the box has no address on network %s (is it running?): %w", id, c.cfg.Network, errdefs.ErrConflict)
	}

	c.mu.Lock()
	st := c.state(id)
	now := time.Now()
	var dyn []dynRule
	for k, exp := range st.learned {
		// Learned addresses survive a policy change only while their name
		// is still allowed with the same port.
		if exp.Before(now) || p.Mode != wire.EgressAllowlist || !slices.ContainsFunc(p.MatchName(k.name), func(e Entry) bool { return e.Port == k.rule.Port }) {
			delete(st.learned, k)
			continue
		}
		if !slices.Contains(dyn, k.rule) {
			dyn = append(dyn, k.rule)
		}
	}
	c.mu.Unlock()

	old, err := c.fw.apply(id, addr, p, dyn)
	if err != nil && !errors.Is(err, errTidy) {
		return fmt.Errorf("apply egress of %s: %w", id, err)
	}
	if err != nil {
		c.log.Warn("tidy up old rules", "sandbox", id, "err", err)
	}
	c.mu.Lock()
	st.policy, st.enforced = p, true
	st.dropBase.add(old)
	c.setAddr(st, addr)
	c.mu.Unlock()
	c.log.Info("egress applied", "sandbox", id, "mode", p.Mode, "address", addr, "entries", len(p.Entries))
	return nil
}

// Claim puts policy wp in force for the pooled box id at its claim. The
// box has run since this controller put its rules in (its pooled policy)
// at the address it knows, so it asks the engine nothing, and the rules
// change with those of concurrent claims in one iptables-restore
// (firewall.switchTo). Its drop counters, denials and learned addresses
// start anew: what the box met while pooled is not the claimer's. A box
// the controller does not know so (its rules are not in force, it learned
// addresses) takes Apply's way, as does a policy of mode none, which
// detaches the box.
func (c *Controller) Claim(ctx context.Context, id string, wp wire.EgressPolicy) error {
	p, err := ParsePolicy("egress", wp, c.cfg.DefaultMode)
	if err != nil {
		return err
	}
	c.mu.Lock()
	st, ok := c.sbs[id]
	known := ok && st.enforced && len(st.learned) == 0
	var addr netip.Addr
	var same bool
	if known {
		addr = st.addr
		was, now := st.policy.Wire(), p.Wire()
		same = was.Mode == now.Mode && slices.Equal(was.Allow, now.Allow) && (addr.IsValid() || p.Mode == wire.EgressNone)
	}
	c.mu.Unlock()
	switch {
	case same:
		// The box waited under the policy its claimer asks for: its
		// rules stay as they are.
	case !known || !addr.IsValid() || p.Mode == wire.EgressNone && !c.cfg.Node:
		err = c.Apply(ctx, id, wp)
	default:
		err = c.fw.switchTo(id, addr, p)
		if err != nil && !errors.Is(err, errTidy) {
			return fmt.Errorf("apply egress of %s: %w", id, err)
		}
		if err != nil {
			c.log.Warn("tidy up old rules", "sandbox", id, "err", err)
		}
		err = nil
		c.mu.Lock()
		st.policy, st.enforced = p, true
		c.mu.Unlock()
		c.log.Info("egress applied", "sandbox", id, "mode", p.Mode, "address", addr, "entries", len(p.Entries))
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	if st, ok := c.sbs[id]; ok {
		st.dropBase, st.lastSeen = counters{}, 0
		st.refused, st.answered, st.logged, st.capped = 0, 0, 0, 0
		st.denied = nil
		st.queries = tokenBucket{}
	}
	c.mu.Unlock()
	return nil
}

func (c *Controller) setAddr(st *sandboxState, addr netip.Addr) {
	if st.addr.IsValid() && c.byAddr[st.addr] == st {
		delete(c.byAddr, st.addr)
	}
	st.addr = addr
	if addr.IsValid() {
		c.byAddr[addr] = st
	}
}

// Release removes the sandbox's rules (its box stopped or is going away);
// the counters are kept until Forget.
func (c *Controller) Release(ctx context.Context, id string) error {
	return c.release(id, true)
}

// release is Release; counts keeps the drop counters of the removed rules
// (reading them costs a process per chain).
func (c *Controller) release(id string, counts bool) error {
	c.verifyMu.Lock()
	defer c.verifyMu.Unlock()
	old, err := c.fw.remove(id, counts)
	c.mu.Lock()
	if st, ok := c.sbs[id]; ok {
		c.setAddr(st, netip.Addr{})
		st.enforced = false
		st.dropBase.add(old)
		clear(st.learned)
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("remove egress rules of %s: %w", id, err)
	}
	return nil
}

// Forget removes the sandbox's rules and everything known about it.
func (c *Controller) Forget(ctx context.Context, id string) error {
	err := c.release(id, false) // its counters go with it
	c.mu.Lock()
	if st, ok := c.sbs[id]; ok && c.byKey[sandboxKey(id)] == st {
		delete(c.byKey, sandboxKey(id))
	}
	delete(c.sbs, id)
	c.mu.Unlock()
	return err
}

// Prune removes the rules of every sandbox on this network not in keep.
func (c *Controller) Prune(ctx context.Context, keep []string) error {
	return c.fw.prune(keep)
}

// Status reports the sandbox's policy, counters and recent denials.
func (c *Controller) Status(id string, p wire.EgressPolicy) wire.EgressStatus {
	c.pollDrops(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	out := wire.EgressStatus{Policy: p, Resolved: []wire.EgressResolved{}, Denied: []wire.EgressDenial{}, DenialLogAvailable: c.nfl != nil}
	st, ok := c.sbs[id]
	if !ok {
		return out
	}
	out.Enforced = st.enforced
	if st.addr.IsValid() {
		out.Address = st.addr.String()
	}
	drops := st.dropBase
	if cur, ok := c.fw.sandboxDrops(id); ok {
		drops.add(cur)
	}
	out.DroppedPackets, out.DroppedBytes = drops.packets, drops.bytes
	out.RefusedQueries = st.refused
	for k, exp := range st.learned {
		out.Resolved = append(out.Resolved, wire.EgressResolved{Name: k.name, Address: k.rule.Addr.String(), Port: k.rule.Port, ExpiresAt: exp.UTC()})
	}
	slices.SortFunc(out.Resolved, func(a, b wire.EgressResolved) int {
		if a.Name != b.Name {
			return compare(a.Name, b.Name)
		}
		return compare(a.Address+":"+strconv.Itoa(a.Port), b.Address+":"+strconv.Itoa(b.Port))
	})
	out.Denied = append(out.Denied, st.denied...)
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pollDrops turns new drops of the sandbox's chain into a denial entry
// when there is no denial log to itemise them.
func (c *Controller) pollDrops(id string) {
	if c.nfl != nil {
		return
	}
	cur, ok := c.fw.sandboxDrops(id)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.sbs[id]
	if !ok {
		return
	}
	total := st.dropBase.packets + cur.packets
	if total > st.lastSeen {
		st.addDenial(wire.EgressDenial{Time: time.Now().UTC(), Kind: wire.DenialConnect, Packets: total - st.lastSeen})
		st.lastSeen = total
	}
}

func (st *sandboxState) addDenial(d wire.EgressDenial) {
	st.denied = append(st.denied, d)
	if len(st.denied) > maxDenied {
		st.denied = slices.Delete(st.denied, 0, len(st.denied)-maxDenied)
	}
}

// decide implements policySource for the resolver.
func (c *Controller) decide(src netip.Addr, name string) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.byAddr[src]
	if !ok || !st.enforced {
		return Decision{}
	}
	d := Decision{Sandbox: st.id}
	if !st.queries.allow(time.Now(), c.cfg.QueryRate, c.cfg.QueryBurst) {
		d.Limited = true
		return d
	}
	switch st.policy.Mode {
	case wire.EgressOpen:
		d.Forward = true
	case wire.EgressAllowlist:
		d.Learn = st.policy.MatchName(name)
		d.Forward = len(d.Learn) > 0
	}
	return d
}

// refused implements policySource.
func (c *Controller) refused(id, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.sbs[id]; ok {
		st.refused++
		st.addDenial(wire.EgressDenial{Time: time.Now().UTC(), Kind: wire.DenialDNS, Name: name})
	}
}

// logLine implements policySource.
func (c *Controller) logLine(id string) (bool, int) {
	c.mu.Lock()
	st, ok := c.sbs[id]
	c.mu.Unlock()
	if !ok {
		return false, 0
	}
	return st.logLines.allow(time.Now())
}

// answered implements policySource.
func (c *Controller) answered(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.sbs[id]; ok {
		st.answered++
	}
}

// learn implements policySource: it allows the answered addresses before
// the answer goes out, up to the sandbox's cap of learned addresses.
func (c *Controller) learn(ctx context.Context, id, name string, entries []Entry, addrs []learnedAddr) map[netip.Addr]bool {
	now := time.Now()
	var add []dynRule
	allowed := map[netip.Addr]bool{}
	c.mu.Lock()
	st, ok := c.sbs[id]
	if !ok {
		c.mu.Unlock()
		return allowed
	}
	ports := map[int]bool{}
	for _, e := range entries {
		ports[e.Port] = true
	}
	rules := map[dynRule]bool{}
	for k := range st.learned {
		rules[k.rule] = true
	}
	var capped int
	for _, a := range addrs {
		ok := true
		for port := range ports {
			k := learnKey{name: name, rule: dynRule{Addr: a.addr, Port: port}}
			exp := now.Add(a.ttl)
			if old, ok := st.learned[k]; ok {
				if exp.After(old) {
					st.learned[k] = exp
				}
				continue
			}
			if !rules[k.rule] {
				if len(rules) >= c.cfg.MaxLearned {
					ok = false
					continue
				}
				rules[k.rule] = true
				add = append(add, k.rule)
			}
			st.learned[k] = exp
		}
		if ok {
			allowed[a.addr] = true
		} else {
			capped++
		}
	}
	st.capped += int64(capped)
	c.mu.Unlock()
	if capped > 0 {
		if ok, held := c.logLine(id); ok {
			c.log.Warn("sandbox reached its cap of learned addresses; answered addresses not allowed",
				"sandbox", id, "name", clip(name), "notLearned", capped, "cap", c.cfg.MaxLearned, "heldBack", held)
		}
	}
	for _, r := range add {
		if err := c.fw.addDyn(id, r); err != nil {
			c.log.Warn("allow resolved address", "sandbox", id, "name", name, "address", r.Addr, "err", err)
		}
	}
	return allowed
}

// ruleUsedLocked says whether another learned name already holds rule.
func (c *Controller) ruleUsedLocked(st *sandboxState, r dynRule) bool {
	for k := range st.learned {
		if k.rule == r {
			return true
		}
	}
	return false
}

// expire withdraws learned addresses whose TTL ran out.
func (c *Controller) expire(now time.Time) {
	type del struct {
		id string
		r  dynRule
	}
	var dels []del
	c.mu.Lock()
	for _, st := range c.sbs {
		for k, exp := range st.learned {
			if exp.After(now) {
				continue
			}
			delete(st.learned, k)
			if !c.ruleUsedLocked(st, k.rule) {
				dels = append(dels, del{st.id, k.rule})
			}
		}
	}
	c.mu.Unlock()
	for _, d := range dels {
		if err := c.fw.delDyn(d.id, d.r); err != nil {
			c.log.Warn("withdraw expired address", "sandbox", d.id, "address", d.r.Addr, "err", err)
		}
	}
}

// Run expires learned addresses and restores rules that vanished (a host
// firewall reload, an engine restart) until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	exp := time.NewTicker(time.Second)
	defer exp.Stop()
	verify := time.NewTicker(c.cfg.VerifyInterval)
	defer verify.Stop()
	nflDone := make(chan struct{})
	if c.nfl != nil {
		go func() {
			defer close(nflDone)
			c.readDenials()
		}()
	}
	for {
		select {
		case <-ctx.Done():
			if c.nfl != nil {
				// Wakes the reader blocked in recvfrom.
				_ = c.nfl.close()
				<-nflDone
			}
			return nil
		case now := <-exp.C:
			c.expire(now)
		case <-verify.C:
			c.verify(ctx)
		}
	}
}

// ensureBaseFirst puts the base jumps back on top when something went
// above them, before a policy is said to be in force. On a node a CNI
// inserts its accept of pod traffic at the top of FORWARD whenever it
// finds its own jump missing (the node's first pod after a boot or a
// flush of its rules), when the pod's network is set up, just before that
// pod's policy is applied: verify would find it only at its next round,
// and the pod's traffic would pass until then. A failure fails the apply:
// no policy is in force above an accept.
func (c *Controller) ensureBaseFirst() error {
	if c.fw.baseOK() {
		return nil
	}
	c.log.Warn("egress base rules missing or not first; restoring them before applying a policy")
	if _, err := c.fw.ensureBase(); err != nil {
		return fmt.Errorf("restore the base rules: %w", err)
	}
	return nil
}

// verify restores the base rules and every enforced sandbox's rules if
// they are gone.
func (c *Controller) verify(ctx context.Context) {
	if c.v6 != nil && !c.v6.ok() {
		c.log.Warn("egress IPv6 drops missing; restoring them", "bridge", c.v6.bridge)
		if err := c.v6.ensure(); err != nil {
			c.log.Error("restore egress IPv6 drops", "err", err)
		}
	}
	if !c.fw.baseOK() {
		c.log.Warn("egress base rules missing; restoring them")
		if _, err := c.fw.ensureBase(); err != nil {
			c.log.Error("restore egress base rules", "err", err)
			return
		}
	}
	c.mu.Lock()
	var redo []*sandboxState
	for _, st := range c.sbs {
		if st.enforced && st.addr.IsValid() {
			redo = append(redo, st)
		}
	}
	c.mu.Unlock()
	ids := make([]string, len(redo))
	for i, st := range redo {
		ids[i] = st.id
	}
	inPlace, err := c.fw.sandboxesOK(ids)
	for _, st := range redo {
		if err == nil && inPlace[st.id] || err != nil && c.fw.sandboxOK(st.id) {
			continue
		}
		c.restore(ctx, st)
	}
}

// restore puts back the missing rules of st, unless they went because the
// sandbox was released (stopped, destroyed) since verify listed it.
func (c *Controller) restore(ctx context.Context, st *sandboxState) {
	c.verifyMu.Lock()
	defer c.verifyMu.Unlock()
	c.mu.Lock()
	still := c.sbs[st.id] == st && st.enforced && st.addr.IsValid()
	p := st.policy.Wire()
	c.mu.Unlock()
	if !still || c.fw.sandboxOK(st.id) {
		return
	}
	c.log.Warn("egress rules of sandbox missing; restoring them", "sandbox", st.id)
	if err := c.Apply(ctx, st.id, p); err != nil {
		c.log.Error("restore egress rules", "sandbox", st.id, "err", err)
	}
}

// Teardown removes every rule of the egress network with subnet: the
// sandbox chains, the jumps and the network's chain. It is for tests and
// for uninstalling; a running daemon's sandboxes lose their confinement
// to the default drop of nothing (their traffic is then Docker's).
func Teardown(network string, subnet netip.Prefix) error {
	return TeardownConfig(Config{Network: network, Subnet: subnet})
}

// TeardownConfig is Teardown for the network of cfg (Network, Subnet,
// Node, ForwardChain).
func TeardownConfig(cfg Config) error {
	ipt, err := iptables.New()
	if err != nil {
		return fmt.Errorf("egress teardown: %w", err)
	}
	f := cfg.firewall(ipt, netip.Addr{}, nil)
	if hostHasIPv6() {
		ip6, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv6))
		if err == nil {
			err = removeV6Guard(ip6, f.base)
		}
		if err != nil {
			return fmt.Errorf("egress teardown: %w", err)
		}
	}
	if ok, err := ipt.ChainExists(table, f.base); err != nil || !ok {
		return err
	}
	defer f.destroySets()
	var errs []error
	if err := f.prune(nil); err != nil {
		errs = append(errs, err)
	}
	for _, c := range f.hooks() {
		if err := ipt.DeleteIfExists(table, c, f.baseJump(c)...); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ipt.ClearAndDeleteChain(table, f.base); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
