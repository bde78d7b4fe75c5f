package egress

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-iptables/iptables"

	"github.com/hotcell/hotcell/internal/wire"
)

// The host firewall layout (iptables, which on Debian 12 is the nf_tables
// backend; Docker 20.10 programs the same tables):
//
//	DOCKER-USER (forwarded) and INPUT (to the host itself):
//	  -s <subnet> -j HCN-<net>          one jump each, inserted first
//	HCN-<net>:                          one per egress network
//	  -s <sandbox ip>/32 -g HCE-<sb>-<gen>   per sandbox, newest first
//	  -d <gateway> --dport <agent port> -j ACCEPT   the TCP agent channel
//	                                    (agentAccept), when there is one
//	  -j DROP                           an address of no known sandbox
//	HCE-<sb>-<gen>:                     the sandbox's policy
//	  established/related → RETURN; gateway DNS and LLM-gateway ports → ACCEPT;
//	  the host's own addresses, broadcast and multicast, link-local, the
//	  metadata set, the subnet (other sandboxes), the private set → DROP;
//	  open: RETURN; allowlist: CIDR entries → RETURN, -g HCD-<sb>-<gen>
//	HCD-<sb>-<gen>:                     addresses the resolver learned → RETURN
//	  -j DROP                           last: not allowed
//
// The address lists of those drops are ipsets of the network, made with its
// chain: HCN-<net>-m (metadata services) and HCN-<net>-p (private ranges
// less the operator's egress_allow_private), so that they cost one rule
// each in a sandbox's chain. The addresses the resolver learned are in
// HCN-<net>-l (sandbox, proto:port, address) and, for entries without a
// port, in the sandbox's own HCS-<sb> (the kernel here has no hash:net,net
// to key them by sandbox in one set; and its table of sets grows past
// CONFIG_IP_SET_MAX as sets are made, up to 65534).
//
// With the denial log on, every DROP of HCE and HCD is preceded by a
// rate-limited NFLOG rule with the same match (see logged and nflog.go).
//
// Allowed traffic RETURNs (through the gotos, straight back to DOCKER-USER
// or INPUT) rather than being ACCEPTed, so Docker's own rules still apply
// to it: a sandbox does not reach containers on other Docker networks.
//
// A new policy is built in chains under a new generation, then its jump is
// inserted above the old one, then the old jump and chains go: a failure at
// any step leaves the old rules in force, and an address without rules is
// dropped by HCN's final rule, never let through.

const (
	table        = "filter"
	chainForward = "DOCKER-USER"
	// chainFilterForward and chainDockerIsolation are FORWARD and
	// Docker's first jump in it.
	chainFilterForward   = "FORWARD"
	chainDockerIsolation = "DOCKER-ISOLATION-STAGE-1"
	// prefixNetwork starts the name of a network's chain (firewall.base).
	prefixNetwork = "HCN-"
	chainInput    = "INPUT"
	prefixMain    = "HCE-"
	prefixDyn     = "HCD-"
	linkLocal     = "169.254.0.0/16"
	dnsPort       = 53
	commentPrefix = "hotcell: "
)

// restorer is an iptablesAPI that can also apply many changes in one
// iptables-restore --noflush run.
type restorer interface {
	Restore(rules string) error
}

// restoreLine renders one rule for iptables-restore, quoting arguments
// with spaces (comments, NFLOG prefixes).
func restoreLine(op, chain string, spec []string) string {
	var b strings.Builder
	b.WriteString(op + " " + chain)
	for _, a := range spec {
		a = strings.ReplaceAll(a, `"`, "")
		if strings.ContainsAny(a, " \t") {
			a = `"` + a + `"`
		}
		b.WriteString(" " + a)
	}
	b.WriteString("\n")
	return b.String()
}

// iptablesCmd is go-iptables with Restore.
type iptablesCmd struct{ *iptables.IPTables }

func (t iptablesCmd) Restore(rules string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "iptables-restore", "--noflush", "-w")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// iptablesAPI is the part of go-iptables the firewall uses; tests fake it.
type iptablesAPI interface {
	ChainExists(table, chain string) (bool, error)
	NewChain(table, chain string) error
	ClearAndDeleteChain(table, chain string) error
	ListChains(table string) ([]string, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Append(table, chain string, rulespec ...string) error
	Exists(table, chain string, rulespec ...string) (bool, error)
	DeleteIfExists(table, chain string, rulespec ...string) error
	List(table, chain string) ([]string, error)
	StructuredStats(table, chain string) ([]iptables.Stat, error)
}

// dynRule is one address the resolver allowed, with the entry's port.
type dynRule struct {
	Addr netip.Addr
	Port int
}

// members are r's entries in the sets for a sandbox at src: an any-port
// address goes to the sandbox's own hash:ip set, an address with a port
// to the network's hash:ip,port,ip set, once for tcp and once for udp.
func (r dynRule) members(src netip.Addr) (anyPort bool, ms []string) {
	if r.Port == 0 {
		return true, []string{r.Addr.String()}
	}
	p := strconv.Itoa(r.Port)
	return false, []string{
		src.String() + ",tcp:" + p + "," + r.Addr.String(),
		src.String() + ",udp:" + p + "," + r.Addr.String(),
	}
}

// firewall owns the rules of one egress network.
type firewall struct {
	ipt     iptablesAPI
	sets    ipsetAPI
	base    string
	subnet  netip.Prefix
	gateway netip.Addr
	// gatewayPorts are the TCP ports on the gateway a sandbox may reach
	// besides DNS (the LLM gateway).
	gatewayPorts []int
	// agentPort is the TCP agent channel's port on the gateway (0: none),
	// which the network's chain accepts from any of its addresses
	// (agentAccept).
	agentPort int
	// logGroup is the nfnetlink_log group the NFLOG rules in front of a
	// sandbox's drops send to; 0 puts no NFLOG rules in.
	logGroup uint16
	// private are the private ranges dropped in every mode: PrivateRanges
	// less the networks the operator allowed.
	private []netip.Prefix
	// forward is the chain forwarded traffic is caught in: DOCKER-USER on
	// Docker, FORWARD on a Kubernetes node (nodeMode).
	forward string
	// node matches sandboxes by the network's set of their addresses
	// (srcSet) instead of the whole subnet, and keeps the jumps first in
	// their chains: on a Kubernetes node the pod range holds other
	// workloads' pods too, and the CNI's own FORWARD rules accept pod
	// traffic if they come first.
	node bool
	// allowed are TCP endpoints every sandbox reaches in every mode (on a
	// cluster, the daemon's agent channel).
	allowed []netip.AddrPort

	mu      sync.Mutex
	current map[string]string // sandbox key → generation in force
	addrs   map[string]netip.Addr
	// dyn are the learned addresses in the sets, per sandbox key.
	dyn map[string]map[dynRule]bool
	// Once inventoried (takeInventory, at start), a sandbox's rules are
	// removed by name, the generation in current, in one iptables-restore:
	// listing every chain of the table costs time that grows with the
	// number of sandboxes. unsure are the keys that may have chains
	// current does not name (found at start, or left by a removal that
	// failed); theirs are found by listing, as are everyone's before the
	// inventory.
	inventoried bool
	unsure      map[string]bool
	// hasAny are the keys whose any-port set (anySet) this daemon made.
	// Such a set holds exactly the any-port members of dyn[key].
	hasAny map[string]bool

	// pending are the switches (switchTo) waiting for the next batch.
	pendMu  sync.Mutex
	pending []*switchReq
}

func newFirewall(ipt iptablesAPI, sets ipsetAPI, network string, subnet netip.Prefix, gateway netip.Addr, gatewayPorts []int, allowPrivate []netip.Prefix) *firewall {
	h := sha256.Sum256([]byte(network + "|" + subnet.String()))
	return &firewall{
		ipt:          ipt,
		sets:         sets,
		private:      blockedPrivate(allowPrivate),
		base:         prefixNetwork + hex.EncodeToString(h[:4]),
		subnet:       subnet,
		gateway:      gateway,
		gatewayPorts: gatewayPorts,
		forward:      chainForward,
		current:      map[string]string{},
		addrs:        map[string]netip.Addr{},
		dyn:          map[string]map[dynRule]bool{},
		unsure:       map[string]bool{},
		hasAny:       map[string]bool{},
	}
}

// takeInventory notes every sandbox that has chains now (a previous
// daemon's): their next change lists the table; everyone else's rules are
// known by name from then on.
func (f *firewall) takeInventory() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	chains, err := f.ipt.ListChains(table)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		for _, prefix := range []string{prefixMain, prefixDyn} {
			rest, ok := strings.CutPrefix(c, prefix)
			if i := strings.LastIndexByte(rest, '-'); ok && i > 0 {
				f.unsure[rest[:i]] = true
			}
		}
	}
	f.inventoried = true
	return nil
}

var plainKey = regexp.MustCompile(`^[a-z0-9]{1,12}$`)

// sandboxKey names a sandbox in chain names, which iptables caps at 28
// characters: the hex of a usual "sb-" id, else a hash of the id.
func sandboxKey(id string) string {
	if k, ok := strings.CutPrefix(id, "sb-"); ok && plainKey.MatchString(k) {
		return k
	}
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:6])
}

// metaSet and privSet name the network's sets of blocked addresses.
func (f *firewall) metaSet() string { return f.base + "-m" }
func (f *firewall) privSet() string { return f.base + "-p" }

// learnedSet holds every sandbox's learned addresses with a port, as
// (sandbox, proto:port, address); anySet is a sandbox's own set of learned
// addresses without a port (ipset has no "any port" in a hash:ip,port,ip).
func (f *firewall) learnedSet() string { return f.base + "-l" }
func anySet(key string) string         { return "HCS-" + key }

// srcSet holds the addresses of the sandboxes (node mode): the jumps to
// the network's chain match it, so other pods on the node are not touched.
func (f *firewall) srcSet() string { return f.base + "-a" }

// mayHaveAny reports whether sandbox key may have an anySet.
func (f *firewall) mayHaveAny(key string) bool {
	return !f.inventoried || f.unsure[key] || f.hasAny[key]
}

// destroyAny removes sandbox key's anySet if it may have one.
func (f *firewall) destroyAny(key string, may bool) error {
	if !may {
		return nil
	}
	if err := f.sets.Destroy(anySet(key)); err != nil {
		return err
	}
	delete(f.hasAny, key)
	return nil
}

// maxLearnedSet bounds the network's learned set; the controller's
// per-sandbox cap keeps each sandbox's share of it small.
const maxLearnedSet = 1 << 20

// resetLearned empties the network's learned sets: at start the daemon has
// learned nothing, and what a previous run learned may name addresses
// that boxes no longer have.
func (f *firewall) resetLearned() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.sets.Replace(f.learnedSet(), "hash:ip,port,ip", nil, "maxelem", strconv.Itoa(maxLearnedSet)); err != nil {
		return fmt.Errorf("learned address set: %w", err)
	}
	return nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// ensureSets puts the current lists in the network's sets; a daemon
// restarted with another egress_allow_private replaces the old list.
func (f *firewall) ensureSets() error {
	if err := f.sets.Replace(f.metaSet(), "hash:net", prefixStrings(MetadataAddrs)); err != nil {
		return fmt.Errorf("metadata address set: %w", err)
	}
	if err := f.sets.Replace(f.privSet(), "hash:net", prefixStrings(f.private)); err != nil {
		return fmt.Errorf("private range set: %w", err)
	}
	if f.node {
		// Made, never emptied: the sandboxes in it stay confined across
		// a restart of the controller.
		if err := f.sets.Create(f.srcSet(), "hash:ip", "maxelem", "65536"); err != nil {
			return fmt.Errorf("sandbox address set: %w", err)
		}
	}
	return nil
}

// destroySets removes the network's sets, once no rule refers to them.
func (f *firewall) destroySets() {
	for _, s := range []string{f.metaSet(), f.privSet(), f.learnedSet(), f.srcSet()} {
		_ = f.sets.Destroy(s)
	}
}

func chainNames(key, gen string) (main, dyn string) {
	return prefixMain + key + "-" + gen, prefixDyn + key + "-" + gen
}

func newGen() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// baseJump is the rule that sends a sandbox's packets from chain c to the
// network's chain. The host's own connections to its gateway address come
// from that address too, but over lo, so INPUT leaves lo out.
func (f *firewall) baseJump(c string) []string {
	src := []string{"-s", f.subnet.String()}
	if f.node {
		src = []string{"-m", "set", "--match-set", f.srcSet(), "src"}
	}
	if c == chainInput {
		return append(src, "!", "-i", "lo", "-j", f.base)
	}
	return append(src, "-j", f.base)
}

// hooks are the chains that jump to the network's chain. On Docker that
// is DOCKER-USER, which Docker keeps first in FORWARD, and FORWARD itself:
// whenever a network is made on the host, Docker moves its jump to
// DOCKER-USER back on top by deleting it and inserting it again (two
// iptables processes, each waiting on the xtables lock), and in between a
// box's packets would meet Docker's accept of its bridge's traffic with
// none of hotcell's rules (TestEgressWithoutDockerUser).
func (f *firewall) hooks() []string {
	if f.forward == chainForward {
		return []string{f.forward, chainFilterForward, chainInput}
	}
	return []string{f.forward, chainInput}
}

// keptFirst reports whether the jump from chain c must stay above the
// rules that accept traffic (see jumpFirst): FORWARD's on Docker, whose
// accepts of a network's bridge go on top when the engine makes the
// network (at its restart too); the node's forward chain in node mode,
// where a CNI's accept of pod traffic may be put above it.
func (f *firewall) keptFirst(c string) bool {
	return c == chainFilterForward || f.node && c == f.forward
}

// jumpFirst reports whether the jump to the network's chain comes before
// every rule of chain c that may accept traffic. It passes over Docker's
// jumps to DOCKER-USER and DOCKER-ISOLATION-STAGE-1, which Docker puts back
// on top whenever it makes a network and which accept nothing of their own
// (moving above them would be a fight every few seconds), and other hotcell
// networks' jumps (each daemon keeps its own above the accepts; none needs
// to be above the others).
func (f *firewall) jumpFirst(c string) (bool, error) {
	lines, err := f.ipt.List(table, c)
	if err != nil {
		return false, err
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		if strings.HasSuffix(l, " -j "+f.base) {
			return true, nil
		}
		if l == "-A "+c+" -j "+chainForward || l == "-A "+c+" -j "+chainDockerIsolation || strings.Contains(l, " -j "+prefixNetwork) {
			continue
		}
		return false, nil
	}
	return false, nil
}

var baseDrop = []string{"-m", "comment", "--comment", commentPrefix + "unknown sandbox address", "-j", "DROP"}

// agentComment marks the network chain's accept of the agent channel.
const agentComment = commentPrefix + "agent channel, before a box has rules"

var dportRule = regexp.MustCompile(`--dport (\d+)`)

// agentAccept is the network chain's rule, just above its final drop, that
// lets an address of no known sandbox reach the TCP agent channel's port
// on the gateway. A Docker box starts with no network and gets its veth,
// then its rules, just after: an agent dialing in between met the drop and
// connected only when its SYN was sent again, a second later. The port is
// every sandbox's already (its chain accepts it) and answers only a TLS
// handshake and a credential of one sandbox's; a box with rules goes to
// its chain (-g) and never reaches this rule.
func (f *firewall) agentAccept(port int) []string {
	return []string{"-d", netip.PrefixFrom(f.gateway, 32).String(), "-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(port),
		"-m", "comment", "--comment", agentComment, "-j", "ACCEPT"}
}

// ensureAgentAccept puts agentAccept in the network's chain above its
// final drop (or last, before the drop is added), and removes those of
// other ports (an earlier start's agent_listen). Called with f.mu held.
func (f *firewall) ensureAgentAccept() (changed bool, err error) {
	lines, err := f.ipt.List(table, f.base)
	if err != nil {
		return false, fmt.Errorf("list chain %s: %w", f.base, err)
	}
	have, rule, drop := false, 0, 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "-A ") {
			continue
		}
		rule++
		if strings.HasSuffix(l, "-j DROP") && strings.Contains(l, baseDrop[3]) && drop == 0 {
			drop = rule
		}
		if !strings.Contains(l, agentComment) {
			continue
		}
		m := dportRule.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		port, _ := strconv.Atoi(m[1])
		if port == f.agentPort && f.agentPort > 0 {
			have = true
			continue
		}
		if err := f.ipt.DeleteIfExists(table, f.base, f.agentAccept(port)...); err != nil {
			return changed, fmt.Errorf("remove the agent channel's old port %d from %s: %w", port, f.base, err)
		}
		changed = true
		// The rules after it move up one; a drop found already is above
		// it and keeps its number.
		rule--
	}
	if have || f.agentPort == 0 {
		return changed, nil
	}
	if drop > 0 {
		err = f.ipt.Insert(table, f.base, drop, f.agentAccept(f.agentPort)...)
	} else {
		err = f.ipt.Append(table, f.base, f.agentAccept(f.agentPort)...)
	}
	if err != nil {
		return changed, fmt.Errorf("add the agent channel's accept to %s: %w", f.base, err)
	}
	return true, nil
}

// ensureBase makes the network's chain and the jumps to it; it is
// idempotent and reports whether it had to change anything.
func (f *firewall) ensureBase() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The sets first: the sandbox chains refer to them.
	if err := f.ensureSets(); err != nil {
		return false, err
	}
	ok, err := f.ipt.ChainExists(table, f.base)
	if err != nil {
		return false, fmt.Errorf("check chain %s: %w", f.base, err)
	}
	if !ok {
		if err := f.ipt.NewChain(table, f.base); err != nil {
			return false, fmt.Errorf("create chain %s: %w", f.base, err)
		}
		changed = true
	}
	if ch, err := f.ensureAgentAccept(); err != nil {
		return changed, err
	} else if ch {
		changed = true
	}
	if ok, err := f.ipt.Exists(table, f.base, baseDrop...); err != nil {
		return changed, fmt.Errorf("check chain %s: %w", f.base, err)
	} else if !ok {
		if err := f.ipt.Append(table, f.base, baseDrop...); err != nil {
			return changed, fmt.Errorf("add final drop to %s: %w", f.base, err)
		}
		changed = true
	}
	// The first INPUT jump of this layout matched lo too, cutting the host
	// off from its own gateway address.
	_ = f.ipt.DeleteIfExists(table, chainInput, "-s", f.subnet.String(), "-j", f.base)
	for _, c := range f.hooks() {
		ok, err := f.ipt.Exists(table, c, f.baseJump(c)...)
		if err != nil {
			return changed, fmt.Errorf("check jump from %s (is Docker running? it makes %s): %w", c, chainForward, err)
		}
		if ok && f.keptFirst(c) {
			// Anything above the jump (a CNI's accept of pod traffic,
			// Docker's accepts of the bridge's traffic at an engine
			// restart) would let sandboxes past: move it up. INPUT has
			// no such rules (the kubelet's are off).
			first, err := f.jumpFirst(c)
			if err != nil {
				return changed, fmt.Errorf("list chain %s: %w", c, err)
			}
			if !first {
				// One transaction where it can: between a delete and an
				// insert the boxes' traffic would meet no jump at all.
				if r, can := f.ipt.(restorer); can {
					rules := "*" + table + "\n" + restoreLine("-D", c, f.baseJump(c)) + restoreLine("-I", c+" 1", f.baseJump(c)) + "COMMIT\n"
					if err := r.Restore(rules); err == nil {
						changed = true
						continue
					}
				}
				if err := f.ipt.DeleteIfExists(table, c, f.baseJump(c)...); err != nil {
					return changed, fmt.Errorf("move jump from %s to %s: %w", c, f.base, err)
				}
				ok = false
			}
		}
		if !ok {
			if err := f.ipt.Insert(table, c, 1, f.baseJump(c)...); err != nil {
				return changed, fmt.Errorf("add jump from %s to %s: %w", c, f.base, err)
			}
			changed = true
		}
	}
	return changed, nil
}

// policyRules are the rules of a sandbox's main chain.
func (f *firewall) policyRules(id string, p Policy, dynChain string) [][]string {
	gw := netip.PrefixFrom(f.gateway, 32).String()
	rules := [][]string{
		{"-m", "comment", "--comment", commentPrefix + "sandbox " + id, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN"},
		{"-d", gw, "-p", "udp", "-m", "udp", "--dport", strconv.Itoa(dnsPort), "-j", "ACCEPT"},
		{"-d", gw, "-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(dnsPort), "-j", "ACCEPT"},
	}
	for _, port := range f.gatewayPorts {
		rules = append(rules, []string{"-d", gw, "-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(port), "-j", "ACCEPT"})
	}
	for _, ap := range f.allowed {
		rules = append(rules, []string{"-d", netip.PrefixFrom(ap.Addr(), 32).String(), "-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(int(ap.Port())), "-j", "ACCEPT"})
	}
	key := sandboxKey(id)
	rules = append(rules, f.logged(key, reasonHost, []string{"-m", "addrtype", "--dst-type", "LOCAL"}, "host")...)
	// Broadcast and multicast reach the host's services on 0.0.0.0 (the
	// first rule) and whatever listens on the LAN; 224/3 also holds the
	// reserved 240/4 and 255.255.255.255.
	rules = append(rules, f.logged(key, reasonBroadcast, []string{"-m", "addrtype", "--dst-type", "BROADCAST"}, "broadcast")...)
	rules = append(rules, f.logged(key, reasonBroadcast, []string{"-d", multicastReserved.String()}, "multicast and reserved")...)
	rules = append(rules, f.logged(key, reasonLinkLocal, []string{"-d", linkLocal}, "link-local")...)
	rules = append(rules, f.logged(key, reasonMetadata, []string{"-m", "set", "--match-set", f.metaSet(), "dst"}, "metadata")...)
	rules = append(rules, f.logged(key, reasonSandbox, []string{"-d", f.subnet.String()}, "other sandboxes")...)
	rules = append(rules, f.logged(key, reasonPrivate, []string{"-m", "set", "--match-set", f.privSet(), "dst"}, "private range")...)
	if p.Mode == wire.EgressOpen {
		return append(rules, []string{"-j", "RETURN"})
	}
	for _, e := range p.Entries {
		if e.Domain != "" || !e.Prefix.Addr().Is4() {
			continue // names go through the resolver; the network has no IPv6
		}
		d := []string{"-d", e.Prefix.String()}
		if e.Port == 0 {
			rules = append(rules, append(d, "-j", "RETURN"))
			continue
		}
		p := strconv.Itoa(e.Port)
		rules = append(rules,
			append(append([]string{}, d...), "-p", "tcp", "-m", "tcp", "--dport", p, "-j", "RETURN"),
			append(append([]string{}, d...), "-p", "udp", "-m", "udp", "--dport", p, "-j", "RETURN"))
	}
	return append(rules, []string{"-g", dynChain})
}

// Reasons of a drop, in NFLOG prefixes and the denial log.
const (
	reasonHost       = "host"
	reasonBroadcast  = "broadcast"
	reasonLinkLocal  = "link-local"
	reasonMetadata   = "metadata"
	reasonSandbox    = "sandbox"
	reasonPrivate    = "private"
	reasonNotAllowed = "not-allowed"
)

// logged returns the rule that refuses packets matching match: a REJECT
// with ICMP administratively prohibited, so that the sandbox's connect (a
// TCP SYN too: Linux takes that ICMP code as a hard error) fails at once
// with "No route to host" instead of hanging until its own timeout, as a
// DROP made it (a git clone of a blocked host waited minutes). The kernel
// rate-limits the ICMP it sends. It is preceded, when the denial log is on,
// by an NFLOG rule with the same match. The NFLOG rule is rate-limited
// (each rule its own bucket) so that a flood costs the daemon at most that
// many messages a second; the REJECT counts all.
func (f *firewall) logged(key, reason string, match []string, comment string) [][]string {
	drop := append(append([]string{}, match...), "-m", "comment", "--comment", commentPrefix+comment, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited")
	if f.logGroup == 0 {
		return [][]string{drop}
	}
	log := append(append([]string{}, match...),
		"-m", "limit", "--limit", "20/second", "--limit-burst", "40",
		"-j", "NFLOG", "--nflog-group", strconv.Itoa(int(f.logGroup)),
		"--nflog-prefix", nflogPrefix(key, reason), "--nflog-size", strconv.Itoa(nflogCopy))
	return [][]string{log, drop}
}

// dynDrop ends a dynamic chain: what no rule allowed.
func (f *firewall) dynDrop(key string) [][]string {
	return f.logged(key, reasonNotAllowed, nil, "not allowed")
}

// apply puts policy p in force for the sandbox at addr, with the learned
// addresses dyn. It is transactional from the sandbox's view; it returns
// the drop counters of the chains it replaced.
func (f *firewall) apply(id string, addr netip.Addr, p Policy, dyn []dynRule) (old counters, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applyLocked(id, addr, p, dyn, true)
}

// applyLocked is apply under f.mu; counts reads the replaced chains' drop
// counters (a process per chain).
func (f *firewall) applyLocked(id string, addr netip.Addr, p Policy, dyn []dynRule, counts bool) (old counters, err error) {
	key := sandboxKey(id)
	gen := newGen()
	for gen == f.current[key] {
		gen = newGen()
	}
	mainC, dynC := chainNames(key, gen)
	undo := func(err error) (counters, error) {
		_ = f.ipt.ClearAndDeleteChain(table, mainC)
		_ = f.ipt.ClearAndDeleteChain(table, dynC)
		return counters{}, err
	}
	if f.node {
		// Caught from now on: without its rules (a failure below) the
		// address meets the network chain's final drop.
		if err := f.sets.Add(f.srcSet(), addr.String()); err != nil {
			return counters{}, fmt.Errorf("sandbox address set: %w", err)
		}
	}
	if p.Mode == wire.EgressAllowlist {
		// The sandbox's any-port set is made anew with what it keeps
		// (atomically, by a swap: the old chains use it until the new ones
		// are in); the network's set gets what is missing now, loses what
		// is dropped once the new rules are in.
		var anyMembers []string
		for _, r := range dyn {
			if any, ms := r.members(addr); any {
				anyMembers = append(anyMembers, ms...)
			}
		}
		if err := f.sets.Replace(anySet(key), "hash:ip", anyMembers, "maxelem", strconv.Itoa(maxLearnedSet)); err != nil {
			return undo(fmt.Errorf("learned address set of %s: %w", id, err))
		}
		f.hasAny[key] = true
		var add []string
		for _, r := range dyn {
			if any, ms := r.members(addr); !any && (!f.dyn[key][r] || f.addrs[key] != addr) {
				add = append(add, ms...)
			}
		}
		if err := f.sets.Add(f.learnedSet(), add...); err != nil {
			return undo(fmt.Errorf("learned address set: %w", err))
		}
	}
	// The chains, their rules and the jump to them.
	var dynSpecs [][]string
	if p.Mode == wire.EgressAllowlist {
		dynSpecs = f.dynRules(key)
	}
	dynSpecs = append(dynSpecs, f.dynDrop(key)...)
	mainSpecs := f.policyRules(id, p, dynC)
	jump := []string{"-s", netip.PrefixFrom(addr, 32).String(), "-g", mainC}
	if r, ok := f.ipt.(restorer); ok {
		// One iptables-restore for all of it, in one transaction: a
		// sandbox's rules cost one process, not one per rule, and a
		// failure changes nothing. Declaring the chains empties a
		// leftover of a crash under the same generation.
		var b strings.Builder
		fmt.Fprintf(&b, "*%s\n:%s - [0:0]\n:%s - [0:0]\n", table, dynC, mainC)
		for _, spec := range dynSpecs {
			b.WriteString(restoreLine("-A", dynC, spec))
		}
		for _, spec := range mainSpecs {
			b.WriteString(restoreLine("-A", mainC, spec))
		}
		b.WriteString(restoreLine("-I", f.base+" 1", jump))
		b.WriteString("COMMIT\n")
		if err := r.Restore(b.String()); err != nil {
			return undo(fmt.Errorf("add chains %s and %s: %w", mainC, dynC, err))
		}
	} else {
		for _, c := range []string{mainC, dynC} {
			// A leftover of a crash under the same generation goes
			// first; the main chain refers to the dynamic one.
			if err := f.ipt.ClearAndDeleteChain(table, c); err != nil && !isNotExist(err) {
				return undo(fmt.Errorf("clear chain %s: %w", c, err))
			}
		}
		for _, c := range []string{dynC, mainC} {
			if err := f.ipt.NewChain(table, c); err != nil {
				return undo(fmt.Errorf("create chain %s: %w", c, err))
			}
		}
		for _, spec := range dynSpecs {
			if err := f.ipt.Append(table, dynC, spec...); err != nil {
				return undo(fmt.Errorf("fill chain %s: %w", dynC, err))
			}
		}
		for _, spec := range mainSpecs {
			if err := f.ipt.Append(table, mainC, spec...); err != nil {
				return undo(fmt.Errorf("fill chain %s: %w", mainC, err))
			}
		}
		if err := f.ipt.Insert(table, f.base, 1, jump...); err != nil {
			return undo(fmt.Errorf("add jump to %s: %w", mainC, err))
		}
	}
	// The new rules are in force; what follows only tidies up.
	oldAddr, oldGen := f.addrs[key], f.current[key]
	mayAny := f.mayHaveAny(key)
	f.current[key] = gen
	f.addrs[key] = addr
	var errs []error
	if old, err = f.removeOld(key, gen, oldGen, oldAddr, counts); err != nil {
		errs = append(errs, err)
	}
	keep := map[dynRule]bool{}
	if p.Mode == wire.EgressAllowlist {
		for _, r := range dyn {
			keep[r] = true
		}
	} else if err := f.destroyAny(key, mayAny); err != nil {
		// Nothing refers to the sandbox's set any more.
		errs = append(errs, err)
	}
	var del []string
	for r := range f.dyn[key] {
		if any, ms := r.members(oldAddr); !any && (!keep[r] || oldAddr != addr) {
			del = append(del, ms...)
		}
	}
	if err := f.sets.Del(f.learnedSet(), del...); err != nil {
		errs = append(errs, err)
	}
	f.dyn[key] = keep
	if f.node && oldAddr.IsValid() && oldAddr != addr {
		if err := f.dropSrc(oldAddr); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return old, fmt.Errorf("%w: %w", errTidy, err)
	}
	return old, nil
}

// switchReq is one sandbox's change of policy waiting for a batch.
type switchReq struct {
	id   string
	addr netip.Addr
	p    Policy
	done chan struct{}
	err  error
}

// switchTo puts policy p in force for sandbox id at addr, forgetting its
// learned addresses and the drop counters of its rules: the change of a
// pooled box's policy at its claim, on the claim's path. Concurrent
// callers' changes go in together: whoever takes the firewall's lock next
// makes the changes of everyone waiting (its own included) in one
// iptables-restore, so N concurrent claims cost one process and one load
// of the table instead of N, one after the other. A box whose old rules
// this firewall put in at addr (known by name, no learned addresses) needs
// nothing else: its new chains, its jump and the removal of the old jump
// and chains are one transaction, so the old rules stay in force until
// the new ones are, and a failure changes nothing. Any other box, or a
// batch the kernel refused, takes apply's way, one box at a time.
func (f *firewall) switchTo(id string, addr netip.Addr, p Policy) error {
	r := &switchReq{id: id, addr: addr, p: p, done: make(chan struct{})}
	f.pendMu.Lock()
	f.pending = append(f.pending, r)
	f.pendMu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-r.done:
		// Made by the batch of whoever held the lock before.
		return r.err
	default:
	}
	f.pendMu.Lock()
	batch := f.pending
	f.pending = nil
	f.pendMu.Unlock()
	f.switchBatch(batch)
	return r.err
}

// switchBatch makes the switches of batch under f.mu and ends each.
func (f *firewall) switchBatch(batch []*switchReq) {
	type prepared struct {
		q                       *switchReq
		key, gen                string
		mainC, dynC, oldM, oldD string
		jump, oldJump           []string
		mainSpecs, dynSpecs     [][]string
	}
	var fast []prepared
	var slow []*switchReq
	r, canRestore := f.ipt.(restorer)
	seen := map[string]bool{}
	for _, q := range batch {
		key := sandboxKey(q.id)
		oldGen := f.current[key]
		if !canRestore || !f.inventoried || f.unsure[key] || seen[key] || oldGen == "" ||
			f.addrs[key] != q.addr || len(f.dyn[key]) > 0 || (q.p.Mode == wire.EgressAllowlist && !f.hasAny[key]) {
			slow = append(slow, q)
			continue
		}
		seen[key] = true
		gen := newGen()
		for gen == oldGen {
			gen = newGen()
		}
		pr := prepared{q: q, key: key, gen: gen}
		pr.mainC, pr.dynC = chainNames(key, gen)
		pr.oldM, pr.oldD = chainNames(key, oldGen)
		src := netip.PrefixFrom(q.addr, 32).String()
		pr.jump = []string{"-s", src, "-g", pr.mainC}
		pr.oldJump = []string{"-s", src, "-g", pr.oldM}
		if q.p.Mode == wire.EgressAllowlist {
			// The box's any-port set is there and empty (it learned
			// nothing): the new dynamic chain uses it as it is.
			pr.dynSpecs = f.dynRules(key)
		}
		pr.dynSpecs = append(pr.dynSpecs, f.dynDrop(key)...)
		pr.mainSpecs = f.policyRules(q.id, q.p, pr.dynC)
		fast = append(fast, pr)
	}
	if len(fast) > 0 {
		// Declarations first, then the rules; the old main chain refers
		// to the old dynamic one, so it is flushed first.
		var b strings.Builder
		fmt.Fprintf(&b, "*%s\n", table)
		for _, pr := range fast {
			fmt.Fprintf(&b, ":%s - [0:0]\n:%s - [0:0]\n", pr.dynC, pr.mainC)
		}
		for _, pr := range fast {
			for _, spec := range pr.dynSpecs {
				b.WriteString(restoreLine("-A", pr.dynC, spec))
			}
			for _, spec := range pr.mainSpecs {
				b.WriteString(restoreLine("-A", pr.mainC, spec))
			}
			b.WriteString(restoreLine("-I", f.base+" 1", pr.jump))
			b.WriteString(restoreLine("-D", f.base, pr.oldJump))
			fmt.Fprintf(&b, "-F %s\n-F %s\n-X %s\n-X %s\n", pr.oldM, pr.oldD, pr.oldM, pr.oldD)
		}
		b.WriteString("COMMIT\n")
		if err := r.Restore(b.String()); err != nil {
			// Nothing changed; each goes apply's way, which finds out
			// which one the kernel refused (or what changed behind
			// the firewall's back) and tidies up by listing.
			for _, pr := range fast {
				slow = append(slow, pr.q)
			}
		} else {
			for _, pr := range fast {
				f.current[pr.key] = pr.gen
				f.dyn[pr.key] = map[dynRule]bool{}
				// An open box keeps its empty any-port set until it is
				// forgotten: nothing refers to it, and removing it
				// would cost a process on the claim's path.
				close(pr.q.done)
			}
		}
	}
	for _, q := range slow {
		_, q.err = f.applyLocked(q.id, q.addr, q.p, nil, false)
		close(q.done)
	}
}

// dynRules are the rules of a sandbox's dynamic chain before its drop:
// one per set of learned addresses, however many addresses they hold.
func (f *firewall) dynRules(key string) [][]string {
	return [][]string{
		{"-m", "set", "--match-set", f.learnedSet(), "src,dst,dst", "-j", "RETURN"},
		{"-m", "set", "--match-set", anySet(key), "dst", "-j", "RETURN"},
	}
}

// errTidy marks an error after the new rules were already in force.
var errTidy = errors.New("new rules in force, but removing the old ones failed")

// counters are the drop counters of a sandbox's chains.
type counters struct{ packets, bytes int64 }

func (c *counters) add(o counters) { c.packets += o.packets; c.bytes += o.bytes }

// jumps lists the sandbox jumps in the base chain: target chain → source.
func (f *firewall) jumps() (map[string]string, error) {
	lines, err := f.ipt.List(table, f.base)
	if err != nil {
		return nil, fmt.Errorf("list chain %s: %w", f.base, err)
	}
	out := map[string]string{}
	for _, l := range lines {
		fs := strings.Fields(l)
		var src, target string
		for i := 0; i+1 < len(fs); i++ {
			switch fs[i] {
			case "-s":
				src = fs[i+1]
			case "-j", "-g":
				target = fs[i+1]
			}
		}
		if strings.HasPrefix(target, prefixMain) && src != "" {
			out[target] = src
		}
	}
	return out, nil
}

// removeOld deletes the rules of sandbox key but generation keep ("" all)
// and returns the drop counters they held when counts is set: when all its
// chains are known, exactly generation prev (the one in force before, its
// jump from prevAddr) in one iptables-restore; else, or if that fails,
// whatever a listing of the table finds (removeExcept).
func (f *firewall) removeOld(key, keep, prev string, prevAddr netip.Addr, counts bool) (counters, error) {
	var total counters
	if f.inventoried && !f.unsure[key] {
		r, ok := f.ipt.(restorer)
		if prev == "" {
			return total, f.forgetSets(key, keep)
		}
		if ok && prev != keep {
			mainC, dynC := chainNames(key, prev)
			if counts {
				for _, c := range []string{mainC, dynC} {
					if n, err := f.drops(c); err == nil {
						total.add(n)
					}
				}
			}
			// The main chain refers to the dynamic one: it is flushed first.
			var b strings.Builder
			fmt.Fprintf(&b, "*%s\n", table)
			b.WriteString(restoreLine("-D", f.base, []string{"-s", netip.PrefixFrom(prevAddr, 32).String(), "-g", mainC}))
			fmt.Fprintf(&b, "-F %s\n-F %s\n-X %s\n-X %s\nCOMMIT\n", mainC, dynC, mainC, dynC)
			if err := r.Restore(b.String()); err == nil {
				return total, f.forgetSets(key, keep)
			}
			// Something else changed the table (a host firewall reload):
			// find what is left by listing it.
		}
	}
	total, err := f.removeExcept(key, keep, counts)
	if err != nil {
		f.unsure[key] = true
	} else {
		delete(f.unsure, key)
	}
	return total, err
}

// forgetSets, when keep is "" (all the sandbox's rules went, so nothing
// uses its sets), removes its learned addresses from the network's set and
// its own set.
func (f *firewall) forgetSets(key, keep string) error {
	if keep != "" {
		return nil
	}
	var errs []error
	if addr, ok := f.addrs[key]; ok {
		var del []string
		for r := range f.dyn[key] {
			if any, ms := r.members(addr); !any {
				del = append(del, ms...)
			}
		}
		if err := f.sets.Del(f.learnedSet(), del...); err != nil {
			errs = append(errs, err)
		}
	}
	delete(f.dyn, key)
	if err := f.destroyAny(key, f.mayHaveAny(key)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeExcept deletes every jump and chain of sandbox key but generation
// keep ("" removes all), found by listing the table, and returns the drop
// counters they held when counts is set.
func (f *firewall) removeExcept(key, keep string, counts bool) (counters, error) {
	var total counters
	var errs []error
	jumps, err := f.jumps()
	if err != nil {
		return total, err
	}
	keepMain, _ := chainNames(key, keep)
	for target, src := range jumps {
		if !strings.HasPrefix(target, prefixMain+key+"-") || (keep != "" && target == keepMain) {
			continue
		}
		if err := f.ipt.DeleteIfExists(table, f.base, "-s", src, "-g", target); err != nil {
			errs = append(errs, fmt.Errorf("delete jump to %s: %w", target, err))
		}
	}
	chains, err := f.ipt.ListChains(table)
	if err != nil {
		return total, errors.Join(append(errs, fmt.Errorf("list chains: %w", err))...)
	}
	// Main chains go first: they refer to the dynamic ones.
	for _, prefix := range []string{prefixMain, prefixDyn} {
		for _, c := range chains {
			if !strings.HasPrefix(c, prefix+key+"-") || (keep != "" && strings.HasSuffix(c, "-"+keep)) {
				continue
			}
			if counts {
				if n, err := f.drops(c); err == nil {
					total.add(n)
				}
			}
			if err := f.ipt.ClearAndDeleteChain(table, c); err != nil && !isNotExist(err) {
				errs = append(errs, fmt.Errorf("delete chain %s: %w", c, err))
			}
		}
	}
	if err := f.forgetSets(key, keep); err != nil {
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

// remove deletes every rule of the sandbox and returns its drop counters
// when counts is set.
func (f *firewall) remove(id string, counts bool) (counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := sandboxKey(id)
	addr := f.addrs[key]
	c, err := f.removeOld(key, "", f.current[key], addr, counts)
	delete(f.current, key)
	delete(f.addrs, key)
	if f.node && addr.IsValid() {
		// The address may go to another pod, not a sandbox's.
		err = errors.Join(err, f.dropSrc(addr))
	}
	return c, err
}

// dropSrc takes addr out of the node's set of sandbox addresses (srcSet)
// unless another sandbox of this firewall has it, or is jumped to from it
// (also: a rule a previous run left for a sandbox still here). A pod's
// address goes to a new pod as soon as the old pod's network is torn
// down, which is before the old pod leaves the API server: the old
// sandbox's rules can go after the new one's are in, and taking the
// address out then would leave the new pod unconfined.
func (f *firewall) dropSrc(addr netip.Addr, kept ...netip.Addr) error {
	for _, a := range f.addrs {
		if a == addr {
			return nil
		}
	}
	if slices.Contains(kept, addr) {
		return nil
	}
	return f.sets.Del(f.srcSet(), addr.String())
}

// drops sums the DROP rules' counters of chain.
func (f *firewall) drops(chain string) (counters, error) {
	stats, err := f.ipt.StructuredStats(table, chain)
	if err != nil {
		return counters{}, err
	}
	var c counters
	for _, s := range stats {
		if s.Target == "DROP" || s.Target == "REJECT" {
			c.packets += int64(s.Packets)
			c.bytes += int64(s.Bytes)
		}
	}
	return c, nil
}

// sandboxDrops reads the current drop counters of a sandbox.
func (f *firewall) sandboxDrops(id string) (counters, bool) {
	f.mu.Lock()
	gen, ok := f.current[sandboxKey(id)]
	f.mu.Unlock()
	if !ok {
		return counters{}, false
	}
	mainC, dynC := chainNames(sandboxKey(id), gen)
	c, err := f.drops(mainC)
	if err != nil {
		return c, false
	}
	d, err := f.drops(dynC)
	c.add(d)
	return c, err == nil
}

// addDyn allows a learned address for the sandbox's current rules: a set
// member, not a rule.
func (f *firewall) addDyn(id string, r dynRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := sandboxKey(id)
	if _, ok := f.current[key]; !ok {
		return fmt.Errorf("sandbox %s has no rules", id)
	}
	set := f.learnedSet()
	any, ms := r.members(f.addrs[key])
	if any {
		set = anySet(key)
	}
	if err := f.sets.Add(set, ms...); err != nil {
		return fmt.Errorf("allow %s for sandbox %s: %w", r.Addr, id, err)
	}
	if f.dyn[key] == nil {
		f.dyn[key] = map[dynRule]bool{}
	}
	f.dyn[key][r] = true
	return nil
}

// delDyn withdraws a learned address.
func (f *firewall) delDyn(id string, r dynRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := sandboxKey(id)
	if _, ok := f.current[key]; !ok || !f.dyn[key][r] {
		return nil
	}
	set := f.learnedSet()
	any, ms := r.members(f.addrs[key])
	if any {
		set = anySet(key)
	}
	delete(f.dyn[key], r)
	return f.sets.Del(set, ms...)
}

// prune removes the rules of every sandbox jumped to from the base chain
// that is not in keep (sandbox ids). Only this network's base chain is
// looked at, so daemons with other networks on the same host are safe.
func (f *firewall) prune(keep []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := map[string]bool{}
	for _, id := range keep {
		keys[sandboxKey(id)] = true
	}
	jumps, err := f.jumps()
	if err != nil {
		return err
	}
	var errs []error
	var kept []netip.Addr // the addresses of the kept sandboxes' jumps
	for target, src := range jumps {
		if key, ok := jumpKey(target); ok && keys[key] {
			if p, err := netip.ParsePrefix(src); err == nil {
				kept = append(kept, p.Addr())
			}
		}
	}
	for target := range jumps {
		key, ok := jumpKey(target)
		if !ok || keys[key] {
			continue
		}
		if _, err := f.removeExcept(key, "", false); err != nil {
			errs = append(errs, err)
		}
		delete(f.current, key)
		delete(f.addrs, key)
		if src, perr := netip.ParsePrefix(jumps[target]); f.node && perr == nil {
			errs = append(errs, f.dropSrc(src.Addr(), kept...))
		}
	}
	return errors.Join(errs...)
}

// jumpKey is the sandbox key of a jump's target, a sandbox's main chain.
func jumpKey(target string) (string, bool) {
	rest := strings.TrimPrefix(target, prefixMain)
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return "", false
	}
	return rest[:i], true
}

// baseOK reports whether the jumps to the base chain are in place: a host
// firewall reload or an engine restart can remove them.
func (f *firewall) baseOK() bool {
	for _, c := range f.hooks() {
		if ok, err := f.ipt.Exists(table, c, f.baseJump(c)...); err != nil || !ok {
			return false
		}
		if f.keptFirst(c) {
			if first, err := f.jumpFirst(c); err != nil || !first {
				return false
			}
		}
	}
	if f.agentPort > 0 {
		if ok, err := f.ipt.Exists(table, f.base, f.agentAccept(f.agentPort)...); err != nil || !ok {
			return false
		}
	}
	ok, err := f.ipt.Exists(table, f.base, baseDrop...)
	return err == nil && ok
}

// sandboxesOK returns which of ids have their jump in place, from one
// listing of the network's chain: verify looks at every enforced sandbox
// every few seconds, and a check per sandbox is a process each, under the
// lock the claims and creates wait for.
func (f *firewall) sandboxesOK(ids []string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	jumps, err := f.jumps()
	if err != nil {
		return nil, err
	}
	ok := make(map[string]bool, len(ids))
	for _, id := range ids {
		key := sandboxKey(id)
		gen, known := f.current[key]
		if !known {
			continue
		}
		mainC, _ := chainNames(key, gen)
		ok[id] = jumps[mainC] == netip.PrefixFrom(f.addrs[key], 32).String()
	}
	return ok, nil
}

// sandboxOK reports whether the sandbox's jump is still in place.
func (f *firewall) sandboxOK(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := sandboxKey(id)
	gen, ok := f.current[key]
	if !ok {
		return false
	}
	mainC, _ := chainNames(key, gen)
	ok, err := f.ipt.Exists(table, f.base, "-s", netip.PrefixFrom(f.addrs[key], 32).String(), "-g", mainC)
	return err == nil && ok
}

func isNotExist(err error) bool {
	var e *iptables.Error
	if errors.As(err, &e) {
		return e.IsNotExist()
	}
	return false
}
