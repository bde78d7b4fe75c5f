package egress

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the tests produce")

// fakeIPT is an in-memory filter table that records every change: the
// firewall's logic against it, without root or a kernel. The rules are
// kept as the specs were given (real iptables normalises them when it
// lists them; the firewall only parses -s, -j and -g back).
type fakeIPT struct {
	mu     sync.Mutex
	chains map[string][]string
	sets   map[string][]string // ipset name → members, see fakeSets
	calls  []string
	// failAt makes the change whose log line starts with it fail, once.
	failAt string
}

func newFakeIPT() *fakeIPT {
	return &fakeIPT{chains: map[string][]string{chainForward: nil, chainInput: nil, "FORWARD": nil, "OUTPUT": nil}, sets: map[string][]string{}}
}

var errFake = errors.New("fake iptables: refused")

// change logs a change and says whether it is to fail.
func (f *fakeIPT) change(format string, args ...any) error {
	line := fmt.Sprintf(format, args...)
	if f.failAt != "" && strings.HasPrefix(line, f.failAt) {
		f.failAt = ""
		f.calls = append(f.calls, line+"  # failed")
		return errFake
	}
	f.calls = append(f.calls, line)
	return nil
}

func (f *fakeIPT) ChainExists(table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.chains[chain]
	return ok, nil
}

func (f *fakeIPT) NewChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.chains[chain]; ok {
		return fmt.Errorf("fake iptables: chain %s exists", chain)
	}
	if err := f.change("-N %s", chain); err != nil {
		return err
	}
	f.chains[chain] = []string{}
	return nil
}

func (f *fakeIPT) ClearAndDeleteChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.chains[chain]; !ok {
		return nil // as go-iptables: a missing chain is not an error
	}
	for c, rules := range f.chains {
		for _, r := range rules {
			if slices.Contains(strings.Fields(r), chain) {
				return fmt.Errorf("fake iptables: chain %s is referenced from %s", chain, c)
			}
		}
	}
	if err := f.change("-X %s", chain); err != nil {
		return err
	}
	delete(f.chains, chain)
	return nil
}

func (f *fakeIPT) ListChains(table string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for c := range f.chains {
		out = append(out, c)
	}
	sort.Strings(out)
	return out, nil
}

func (f *fakeIPT) target(chain string, spec []string) error {
	for i, s := range spec {
		if (s == "-j" || s == "-g") && i+1 < len(spec) {
			t := spec[i+1]
			if strings.HasPrefix(t, "HC") {
				if _, ok := f.chains[t]; !ok {
					return fmt.Errorf("fake iptables: %s jumps to missing chain %s", chain, t)
				}
			}
		}
	}
	return nil
}

func (f *fakeIPT) Insert(table, chain string, pos int, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.chains[chain]
	if !ok || pos < 1 || pos > len(rules)+1 {
		return fmt.Errorf("fake iptables: insert into %s at %d", chain, pos)
	}
	if err := f.target(chain, spec); err != nil {
		return err
	}
	r := strings.Join(spec, " ")
	if err := f.change("-I %s %d %s", chain, pos, r); err != nil {
		return err
	}
	f.chains[chain] = slices.Insert(rules, pos-1, r)
	return nil
}

func (f *fakeIPT) Append(table, chain string, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.chains[chain]; !ok {
		return fmt.Errorf("fake iptables: no chain %s", chain)
	}
	if err := f.target(chain, spec); err != nil {
		return err
	}
	r := strings.Join(spec, " ")
	if err := f.change("-A %s %s", chain, r); err != nil {
		return err
	}
	f.chains[chain] = append(f.chains[chain], r)
	return nil
}

func (f *fakeIPT) Exists(table, chain string, spec ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.chains[chain]
	if !ok {
		return false, fmt.Errorf("fake iptables: no chain %s", chain)
	}
	return slices.Contains(rules, strings.Join(spec, " ")), nil
}

func (f *fakeIPT) DeleteIfExists(table, chain string, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := strings.Join(spec, " ")
	i := slices.Index(f.chains[chain], r)
	if i < 0 {
		return nil
	}
	if err := f.change("-D %s %s", chain, r); err != nil {
		return err
	}
	f.chains[chain] = slices.Delete(f.chains[chain], i, i+1)
	return nil
}

func (f *fakeIPT) List(table, chain string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.chains[chain]
	if !ok {
		return nil, fmt.Errorf("fake iptables: no chain %s", chain)
	}
	out := []string{"-N " + chain}
	for _, r := range rules {
		out = append(out, "-A "+chain+" "+r)
	}
	return out, nil
}

func (f *fakeIPT) StructuredStats(table, chain string) ([]iptables.Stat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.chains[chain]
	if !ok {
		return nil, fmt.Errorf("fake iptables: no chain %s", chain)
	}
	var out []iptables.Stat
	for _, r := range rules {
		fs := strings.Fields(r)
		st := iptables.Stat{}
		for i := 0; i+1 < len(fs); i++ {
			if fs[i] == "-j" || fs[i] == "-g" {
				st.Target = fs[i+1]
			}
		}
		out = append(out, st)
	}
	return out, nil
}

var _ iptablesAPI = (*fakeIPT)(nil)

// fakeSets are the ipsets, kept with the fake table so that one log has
// every change in order.
type fakeSets struct{ f *fakeIPT }

var _ ipsetAPI = fakeSets{}

func (s fakeSets) Create(name, typ string, opts ...string) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if _, ok := s.f.sets[name]; ok {
		return nil
	}
	if err := s.f.change("ipset create %s %s", name, strings.Join(append([]string{typ}, opts...), " ")); err != nil {
		return err
	}
	s.f.sets[name] = []string{}
	return nil
}

func (s fakeSets) Add(name string, members ...string) error {
	if len(members) == 0 {
		return nil
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	m, ok := s.f.sets[name]
	if !ok {
		return fmt.Errorf("fake ipset: no set %s", name)
	}
	if err := s.f.change("ipset add %s %s", name, strings.Join(members, " ")); err != nil {
		return err
	}
	for _, member := range members {
		if !slices.Contains(m, member) {
			m = append(m, member)
		}
	}
	s.f.sets[name] = m
	return nil
}

func (s fakeSets) Del(name string, members ...string) error {
	if len(members) == 0 {
		return nil
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if err := s.f.change("ipset del %s %s", name, strings.Join(members, " ")); err != nil {
		return err
	}
	s.f.sets[name] = slices.DeleteFunc(s.f.sets[name], func(m string) bool { return slices.Contains(members, m) })
	return nil
}

func (s fakeSets) Replace(name, typ string, members []string, opts ...string) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if err := s.f.change("ipset replace %s %s: %s", name, strings.Join(append([]string{typ}, opts...), " "), strings.Join(members, " ")); err != nil {
		return err
	}
	s.f.sets[name] = slices.Clone(members)
	return nil
}

func (s fakeSets) Destroy(name string) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if _, ok := s.f.sets[name]; !ok {
		return nil
	}
	for c, rules := range s.f.chains {
		for _, r := range rules {
			if slices.Contains(strings.Fields(r), name) {
				return fmt.Errorf("fake ipset: set %s is referenced from %s", name, c)
			}
		}
	}
	if err := s.f.change("ipset destroy %s", name); err != nil {
		return err
	}
	delete(s.f.sets, name)
	return nil
}

func (s fakeSets) List() ([]string, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	var out []string
	for n := range s.f.sets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// generation matches a sandbox chain's random generation suffix.
var generation = regexp.MustCompile(`\b(HC[ED]-[a-z0-9]+)-([0-9a-f]{4})\b`)

// dump is the changes so far and the table as it is now, with generations
// numbered in order of appearance so that the text is stable.
func (f *fakeIPT) dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	b.WriteString("# changes\n")
	for _, c := range f.calls {
		b.WriteString(c + "\n")
	}
	b.WriteString("\n# table\n")
	var names []string
	for c := range f.chains {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		fmt.Fprintf(&b, "-N %s\n", c)
		for _, r := range f.chains[c] {
			fmt.Fprintf(&b, "-A %s %s\n", c, r)
		}
	}
	var sets []string
	for n := range f.sets {
		sets = append(sets, n)
	}
	sort.Strings(sets)
	if len(sets) > 0 {
		b.WriteString("\n# sets\n")
	}
	for _, n := range sets {
		fmt.Fprintf(&b, "%s: %s\n", n, strings.Join(f.sets[n], " "))
	}
	gens := map[string]string{}
	return generation.ReplaceAllStringFunc(b.String(), func(s string) string {
		m := generation.FindStringSubmatch(s)
		g, ok := gens[m[2]]
		if !ok {
			g = fmt.Sprintf("g%d", len(gens)+1)
			gens[m[2]] = g
		}
		return m[1] + "-" + g
	})
}

// golden compares got with testdata/name, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s\nIf the change is meant, run go test -update and review the diff.", path, diff)
	}
}

// fakeNet is the driver's network side: it knows box addresses.
type fakeNet struct {
	mu    sync.Mutex
	addrs map[string]netip.Addr
	on    map[string]bool
}

func (n *fakeNet) EnsureNetwork(ctx context.Context, name string, subnet netip.Prefix) (netip.Addr, error) {
	return subnet.Addr().Next(), nil
}
func (n *fakeNet) NetworkBridge(ctx context.Context, name string) (string, error) {
	return "br-test", nil
}
func (n *fakeNet) RemoveNetwork(ctx context.Context, name string) error { return nil }
func (n *fakeNet) Connect(ctx context.Context, id, network string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.on[id] = true
	return nil
}
func (n *fakeNet) Disconnect(ctx context.Context, id, network string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.on[id] = false
	return nil
}
func (n *fakeNet) BoxAddress(ctx context.Context, id, network string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.on[id] {
		return netip.Addr{}, nil
	}
	return n.addrs[id], nil
}

var testSubnet = netip.MustParsePrefix("10.214.5.0/24")

// testController is a Controller on a fake firewall and fake network, as
// Start would set it up, with the denial log on (group 7) if logGroup.
func testController(t *testing.T, logGroup uint16) (*Controller, *fakeIPT) {
	t.Helper()
	net := &fakeNet{on: map[string]bool{}, addrs: map[string]netip.Addr{
		"sb-aaaaaaaaaaaa": netip.MustParseAddr("10.214.5.2"),
		"sb-bbbbbbbbbbbb": netip.MustParseAddr("10.214.5.3"),
	}}
	c := New(net, Config{Network: "hc-test", Subnet: testSubnet, GatewayPort: 8089, Log: slog.New(slog.DiscardHandler)})
	gw, _ := net.EnsureNetwork(t.Context(), "hc-test", testSubnet)
	c.gateway = gw
	ipt := newFakeIPT()
	c.fw = newFirewall(ipt, fakeSets{ipt}, "hc-test", testSubnet, gw, []int{8089}, nil)
	c.fw.logGroup = logGroup
	if _, err := c.fw.ensureBase(); err != nil {
		t.Fatal(err)
	}
	if err := c.fw.resetLearned(); err != nil {
		t.Fatal(err)
	}
	if err := c.fw.takeInventory(); err != nil {
		t.Fatal(err)
	}
	return c, ipt
}

func mustApply(t *testing.T, c *Controller, id string, p wire.EgressPolicy) {
	t.Helper()
	if err := c.Apply(t.Context(), id, p); err != nil {
		t.Fatalf("apply %+v to %s: %v", p, id, err)
	}
}

// checkInvariants holds for every table the firewall leaves: the jumps to
// the network's chain come first in DOCKER-USER and INPUT, the network's
// chain ends in DROP, and every sandbox chain ends in DROP or goes to one
// that does (an open sandbox's RETURN is its policy's last word).
func checkInvariants(t *testing.T, c *Controller, ipt *fakeIPT) {
	t.Helper()
	ipt.mu.Lock()
	defer ipt.mu.Unlock()
	for _, ch := range []string{chainForward, chainInput} {
		if rules := ipt.chains[ch]; len(rules) == 0 || !strings.HasSuffix(rules[0], "-j "+c.fw.base) {
			t.Errorf("%s does not start with the jump to %s: %q", ch, c.fw.base, rules)
		}
	}
	base := ipt.chains[c.fw.base]
	if len(base) == 0 || !strings.HasSuffix(base[len(base)-1], "-j DROP") {
		t.Errorf("%s does not end in DROP: %q", c.fw.base, base)
	}
	for name, rules := range ipt.chains {
		if !strings.HasPrefix(name, prefixDyn) {
			continue
		}
		if len(rules) == 0 || !strings.HasSuffix(rules[len(rules)-1], "-j REJECT --reject-with icmp-admin-prohibited") {
			t.Errorf("%s does not end in DROP: %q", name, rules)
		}
	}
}

const (
	idA = "sb-aaaaaaaaaaaa"
	idB = "sb-bbbbbbbbbbbb"
)

// TestFirewallRules: the rules each policy puts in, and the order of the
// changes that get there, as golden files.
func TestFirewallRules(t *testing.T) {
	t.Parallel()
	t.Run("open", func(t *testing.T) {
		c, ipt := testController(t, 0)
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
		checkInvariants(t, c, ipt)
		golden(t, "firewall-open.golden", ipt.dump())
	})
	t.Run("none", func(t *testing.T) {
		// Open first, then none: the box leaves the network and its
		// rules go.
		c, ipt := testController(t, 0)
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressNone})
		checkInvariants(t, c, ipt)
		if st := c.Status(idA, wire.EgressPolicy{}); !st.Enforced || st.Address != "" {
			t.Errorf("status after none: %+v, want enforced without an address", st)
		}
		golden(t, "firewall-none.golden", ipt.dump())
	})
	t.Run("allowlist", func(t *testing.T) {
		c, ipt := testController(t, 7)
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{
			"pkg.test", "*.example.test:443", "203.0.113.0/24", "198.51.100.5:8080", "2001:db8::/32",
		}})
		// The resolver learned two names; one address expires.
		p, _ := ParsePolicy("egress", wire.EgressPolicy{Allow: []string{"pkg.test", "*.example.test:443"}}, wire.EgressOpen)
		c.learn(t.Context(), idA, "pkg.test", p.MatchName("pkg.test"), []learnedAddr{{netip.MustParseAddr("203.0.113.10"), time.Minute}})
		c.learn(t.Context(), idA, "www.example.test", p.MatchName("www.example.test"), []learnedAddr{
			{netip.MustParseAddr("203.0.113.33"), time.Minute}, {netip.MustParseAddr("203.0.113.34"), time.Second},
		})
		c.expire(time.Now().Add(30 * time.Second))
		checkInvariants(t, c, ipt)
		golden(t, "firewall-allowlist.golden", ipt.dump())
	})
	t.Run("replace", func(t *testing.T) {
		// A policy change builds the new chains, puts their jump above the
		// old one, and only then removes the old ones.
		c, ipt := testController(t, 0)
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"203.0.113.0/24"}})
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
		checkInvariants(t, c, ipt)
		golden(t, "firewall-replace.golden", ipt.dump())
	})
	t.Run("prune", func(t *testing.T) {
		c, ipt := testController(t, 0)
		mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
		mustApply(t, c, idB, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test"}})
		if err := c.Prune(t.Context(), []string{idA}); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, c, ipt)
		golden(t, "firewall-prune.golden", ipt.dump())
	})
}

// TestFirewallAgentAccept: with a TCP agent channel the network's chain
// accepts its port on the gateway just above the final drop (so a box's
// agent connects before the box has rules), below every sandbox's jump;
// a start on another port replaces it, verify's check misses it when it
// is gone, and a chain made by a daemon without the channel loses it.
func TestFirewallAgentAccept(t *testing.T) {
	t.Parallel()
	c, ipt := testController(t, 0)
	gw := c.gateway
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
	base := func() []string {
		ipt.mu.Lock()
		defer ipt.mu.Unlock()
		return slices.Clone(ipt.chains[c.fw.base])
	}
	accepts := func() (ports []string, at []int) {
		for i, r := range base() {
			if strings.Contains(r, agentComment) {
				ports = append(ports, dportRule.FindStringSubmatch(r)[1])
				at = append(at, i)
			}
		}
		return ports, at
	}
	if p, _ := accepts(); p != nil {
		t.Fatalf("without an agent port: accepts of ports %v", p)
	}

	restart := func(port int) {
		t.Helper()
		f := newFirewall(ipt, fakeSets{ipt}, "hc-test", testSubnet, gw, []int{8089, port}, nil)
		f.agentPort = port
		if _, err := f.ensureBase(); err != nil {
			t.Fatal(err)
		}
		c.fw = f
	}
	for _, port := range []int{7443, 7444} {
		restart(port)
		ports, at := accepts()
		rules := base()
		if !slices.Equal(ports, []string{strconv.Itoa(port)}) || at[0] != len(rules)-2 {
			t.Fatalf("port %d: accepts of ports %v at %v in %q, want one of %d just above the drop", port, ports, at, rules, port)
		}
		if !strings.HasPrefix(rules[0], "-s 10.214.5.2/32 -g ") {
			t.Errorf("port %d: the sandbox's jump is not first: %q", port, rules)
		}
		if want := "-d " + gw.String() + "/32 -p tcp -m tcp --dport " + strconv.Itoa(port); !strings.HasPrefix(rules[at[0]], want) {
			t.Errorf("port %d: the accept is %q, want it to begin %q", port, rules[at[0]], want)
		}
		checkInvariants(t, c, ipt)
	}
	if !c.fw.baseOK() {
		t.Fatal("baseOK is false with every base rule in place")
	}
	if err := ipt.DeleteIfExists(table, c.fw.base, c.fw.agentAccept(7444)...); err != nil {
		t.Fatal(err)
	}
	if c.fw.baseOK() {
		t.Error("baseOK misses the agent channel's accept")
	}
	restart(7444)
	if p, _ := accepts(); !slices.Equal(p, []string{"7444"}) {
		t.Errorf("after a restore: accepts of ports %v, want 7444", p)
	}
	restart(0)
	if p, _ := accepts(); p != nil {
		t.Errorf("a daemon without the channel left accepts of ports %v", p)
	}
	checkInvariants(t, c, ipt)
}

// TestFirewallFailureKeepsOldRules: a change that fails half way leaves the
// rules in force as they were and no half-built chains behind.
func TestFirewallFailureKeepsOldRules(t *testing.T) {
	t.Parallel()
	for _, failAt := range []string{"-N HCE-", "-A HCD-", "-A HCE-", "-I "} {
		t.Run(failAt, func(t *testing.T) {
			c, ipt := testController(t, 7)
			mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"203.0.113.0/24"}})
			before := tableOf(ipt)
			ipt.mu.Lock()
			ipt.failAt = failAt
			ipt.mu.Unlock()
			err := c.Apply(t.Context(), idA, wire.EgressPolicy{Mode: wire.EgressOpen})
			if !errors.Is(err, errFake) {
				t.Fatalf("apply: got %v, want the fake's failure", err)
			}
			if diff := cmp.Diff(before, tableOf(ipt)); diff != "" {
				t.Errorf("the table changed (-before +after):\n%s", diff)
			}
			if !c.fw.sandboxOK(idA) {
				t.Error("the sandbox's jump is gone")
			}
		})
	}
}

func tableOf(ipt *fakeIPT) map[string][]string {
	ipt.mu.Lock()
	defer ipt.mu.Unlock()
	out := map[string][]string{}
	for c, r := range ipt.chains {
		out[c] = slices.Clone(r)
	}
	return out
}

// restoringIPT is the fake table with Restore: it records the payload and
// makes the chains and the jump it names, so that the rest of the
// firewall's logic runs on.
type restoringIPT struct {
	*fakeIPT
	payloads []string
	listings int // ListChains and List calls
}

func (r *restoringIPT) Restore(rules string) error {
	r.payloads = append(r.payloads, rules)
	// All or nothing, as iptables-restore: what the deletions name must
	// be there.
	for _, l := range strings.Split(rules, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		r.mu.Lock()
		rules, ok := r.chains[f[1]]
		r.mu.Unlock()
		switch {
		case (f[0] == "-F" || f[0] == "-X" || f[0] == "-D") && !ok:
			return fmt.Errorf("fake iptables-restore: no chain %s", f[1])
		case f[0] == "-D" && !slices.Contains(rules, strings.Join(f[2:], " ")):
			return fmt.Errorf("fake iptables-restore: no rule %q in %s", strings.Join(f[2:], " "), f[1])
		}
	}
	for _, l := range strings.Split(rules, "\n") {
		f := strings.Fields(l)
		var err error
		switch {
		case strings.HasPrefix(l, ":"):
			err = r.NewChain(table, strings.Fields(l[1:])[0])
		case strings.HasPrefix(l, "-A "):
			args := restoreFields(l)
			err = r.Append(table, args[1], args[2:]...)
		case strings.HasPrefix(l, "-I "):
			err = r.Insert(table, f[1], 1, f[3:]...)
		case strings.HasPrefix(l, "-D "):
			err = r.DeleteIfExists(table, f[1], f[2:]...)
		case strings.HasPrefix(l, "-X "):
			// -F then -X of the same chain is what ClearAndDeleteChain does.
			err = r.ClearAndDeleteChain(table, f[1])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// restoreFields splits a restore line as iptables-restore does: quoted
// arguments keep their spaces.
func restoreFields(l string) []string {
	var out []string
	for i, part := range strings.Split(l, `"`) {
		if i%2 == 1 {
			out = append(out, part)
			continue
		}
		out = append(out, strings.Fields(part)...)
	}
	return out
}

func (r *restoringIPT) ListChains(table string) ([]string, error) {
	r.listings++
	return r.fakeIPT.ListChains(table)
}

func (r *restoringIPT) List(table, chain string) ([]string, error) {
	r.listings++
	return r.fakeIPT.List(table, chain)
}

// TestFirewallRemoveByName: once the firewall has taken its inventory, a
// policy change and a removal delete the sandbox's generation by name in
// one restore, without listing the table (which grows with the number of
// sandboxes); the learned addresses leave the shared sets; a sandbox
// whose rules changed behind the firewall's back, or that a previous
// daemon left, is still cleaned up whole, by a listing.
func TestFirewallRemoveByName(t *testing.T) {
	t.Parallel()
	c, ipt := testController(t, 7)
	// A previous daemon's sandbox: in the inventory taken anew below.
	ipt.chains["HCE-cccccccccccc-beef"] = []string{"-j RETURN"}
	r := &restoringIPT{fakeIPT: ipt}
	c.fw.ipt = r
	if err := c.fw.takeInventory(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test", "*.example.test:443"}})
	mustApply(t, c, idB, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test"}})
	p, _ := ParsePolicy("egress", wire.EgressPolicy{Allow: []string{"pkg.test", "*.example.test:443"}}, wire.EgressOpen)
	c.learn(ctx, idA, "pkg.test", p.MatchName("pkg.test"), []learnedAddr{{netip.MustParseAddr("203.0.113.10"), time.Minute}})
	c.learn(ctx, idA, "www.example.test", p.MatchName("www.example.test"), []learnedAddr{{netip.MustParseAddr("203.0.113.33"), time.Minute}})
	c.learn(ctx, idB, "pkg.test", p.MatchName("pkg.test"), []learnedAddr{{netip.MustParseAddr("203.0.113.10"), time.Minute}})
	if got := learnedMembers(ipt, "203.0.113.10"); len(got) != 2 {
		t.Fatalf("members for 203.0.113.10: got %q, want one for each sandbox", got)
	}

	r.listings = 0
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
	if err := c.Forget(ctx, idA); err != nil {
		t.Fatal(err)
	}
	if r.listings != 0 {
		t.Errorf("a policy change and a removal listed the table %d times, want none", r.listings)
	}
	chainsOf := func(key string) []string {
		ipt.mu.Lock()
		defer ipt.mu.Unlock()
		var out []string
		for name, rules := range ipt.chains {
			if strings.Contains(name, key) {
				out = append(out, name)
			}
			for _, rule := range rules {
				if strings.Contains(rule, key) {
					out = append(out, name+": "+rule)
				}
			}
		}
		return out
	}
	if left := chainsOf("aaaaaaaaaaaa"); len(left) > 0 {
		t.Errorf("sandbox A's rules are left: %q", left)
	}
	if got := learnedMembers(ipt, "203.0.113.10"); !slices.Equal(got, []string{anySet(sandboxKey(idB)) + " 203.0.113.10"}) {
		t.Errorf("members for 203.0.113.10: got %q, want B's alone", got)
	}
	ipt.mu.Lock()
	_, anyLeft := ipt.sets[anySet(sandboxKey(idA))]
	ipt.mu.Unlock()
	if anyLeft {
		t.Error("sandbox A's any-port set is left")
	}
	if got := learnedMembers(ipt, "203.0.113.33"); len(got) != 0 {
		t.Errorf("A's learned address with a port is left: %q", got)
	}
	if !c.fw.sandboxOK(idB) {
		t.Error("sandbox B lost its jump")
	}

	// B's main chain vanishes behind the firewall's back: removing B
	// falls back to a listing and still leaves nothing.
	c.fw.mu.Lock()
	mainB, _ := chainNames(sandboxKey(idB), c.fw.current[sandboxKey(idB)])
	c.fw.mu.Unlock()
	ipt.mu.Lock()
	delete(ipt.chains, mainB)
	ipt.mu.Unlock()
	if err := c.Forget(ctx, idB); err != nil {
		t.Fatal(err)
	}
	if left := chainsOf("bbbbbbbbbbbb"); len(left) > 0 {
		t.Errorf("sandbox B's rules are left: %q", left)
	}
	// The previous daemon's sandbox is in the inventory: its removal
	// lists the table and finds its chain.
	if !c.fw.unsure["cccccccccccc"] {
		t.Error("the inventory missed a previous daemon's sandbox")
	}
	if err := c.Forget(ctx, "sb-cccccccccccc"); err != nil {
		t.Fatal(err)
	}
	if left := chainsOf("cccccccccccc"); len(left) > 0 {
		t.Errorf("the previous daemon's sandbox's rules are left: %q", left)
	}
	checkInvariants(t, c, ipt)
}

// TestFirewallRestore: with iptables-restore at hand, a sandbox's chains,
// rules and jump go in as one payload (one process, one transaction),
// arguments with spaces quoted.
func TestFirewallRestore(t *testing.T) {
	t.Parallel()
	c, ipt := testController(t, 7)
	r := &restoringIPT{fakeIPT: ipt}
	c.fw.ipt = r
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test", "203.0.113.0/24"}})
	if len(r.payloads) != 1 {
		t.Fatalf("got %d restores, want 1", len(r.payloads))
	}
	if !c.fw.sandboxOK(idA) {
		t.Error("the sandbox's jump is not in place")
	}
	golden(t, "firewall-restore.golden", generation.ReplaceAllString(r.payloads[0], "$1-gen"))
}

func TestRestoreLine(t *testing.T) {
	t.Parallel()
	got := restoreLine("-A", "HCE-x", []string{"-m", "comment", "--comment", `hotcell: a "b"`, "-j", "DROP"})
	if want := "-A HCE-x -m comment --comment \"hotcell: a b\" -j DROP\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestFirewallClaimBatch: claims that come together switch their boxes'
// rules in one iptables-restore, each box's new chains, jump and the
// removal of its old ones in that one transaction; a claim of the policy
// the box waited under changes nothing; a box whose rules changed behind
// the firewall's back makes the batch fail whole, and each claim then
// takes apply's way and still ends with its rules alone in force.
func TestFirewallClaimBatch(t *testing.T) {
	t.Parallel()
	c, ipt := testController(t, 7)
	r := &restoringIPT{fakeIPT: ipt}
	c.fw.ipt = r
	ctx := t.Context()
	pooled := wire.EgressPolicy{Mode: wire.EgressAllowlist}
	mustApply(t, c, idA, pooled)
	mustApply(t, c, idB, pooled)
	gens := func() (string, string) {
		c.fw.mu.Lock()
		defer c.fw.mu.Unlock()
		return c.fw.current[sandboxKey(idA)], c.fw.current[sandboxKey(idB)]
	}
	oldA, oldB := gens()

	// The same policy: nothing to do.
	r.payloads = nil
	if err := c.Claim(ctx, idA, pooled); err != nil {
		t.Fatal(err)
	}
	if a, _ := gens(); len(r.payloads) != 0 || a != oldA {
		t.Fatalf("a claim of the box's own policy changed its rules: %d restores, generation %s to %s", len(r.payloads), oldA, a)
	}

	// Two claims while the firewall is busy: one batch.
	c.fw.mu.Lock()
	errs := make(chan error, 2)
	go func() { errs <- c.Claim(ctx, idA, wire.EgressPolicy{Mode: wire.EgressOpen}) }()
	go func() {
		errs <- c.Claim(ctx, idB, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test", "203.0.113.0/24"}})
	}()
	for {
		c.fw.pendMu.Lock()
		n := len(c.fw.pending)
		c.fw.pendMu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c.fw.mu.Unlock()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if len(r.payloads) != 1 {
		t.Fatalf("two claims together: got %d restores, want 1", len(r.payloads))
	}
	newA, newB := gens()
	mainA, _ := chainNames(sandboxKey(idA), newA)
	mainB, dynB := chainNames(sandboxKey(idB), newB)
	payload := r.payloads[0]
	for _, want := range []string{
		"-A " + mainA + " -j RETURN\n",                   // open
		"-A " + mainB + " -d 203.0.113.0/24 -j RETURN\n", // the allowed network
		"-A " + dynB + " -m set --match-set " + anySet(sandboxKey(idB)) + " dst -j RETURN\n",
		"-D " + c.fw.base + " -s 10.214.5.2/32 -g HCE-aaaaaaaaaaaa-" + oldA + "\n",
		"-X HCE-bbbbbbbbbbbb-" + oldB + "\n",
		"-X HCD-bbbbbbbbbbbb-" + oldB + "\n",
	} {
		if !strings.Contains(payload, want) {
			t.Errorf("the batch lacks %q:\n%s", want, payload)
		}
	}
	for _, id := range []string{idA, idB} {
		if !c.fw.sandboxOK(id) {
			t.Errorf("%s: its new jump is not in place", id)
		}
	}
	ipt.mu.Lock()
	for _, gone := range []string{"HCE-aaaaaaaaaaaa-" + oldA, "HCD-aaaaaaaaaaaa-" + oldA, "HCE-bbbbbbbbbbbb-" + oldB, "HCD-bbbbbbbbbbbb-" + oldB} {
		if _, ok := ipt.chains[gone]; ok {
			t.Errorf("the old chain %s is left", gone)
		}
	}
	ipt.mu.Unlock()

	// B's jump vanishes behind the firewall's back: the batch fails,
	// apply's way finds what is left and replaces it.
	ipt.mu.Lock()
	base := ipt.chains[c.fw.base]
	ipt.chains[c.fw.base] = slices.DeleteFunc(slices.Clone(base), func(rule string) bool { return strings.Contains(rule, mainB) })
	ipt.mu.Unlock()
	if err := c.Claim(ctx, idB, wire.EgressPolicy{Mode: wire.EgressOpen}); err != nil {
		t.Fatal(err)
	}
	_, nowB := gens()
	if nowB == newB || !c.fw.sandboxOK(idB) {
		t.Errorf("after the failed batch: generation %s (was %s), jump in place %v", nowB, newB, c.fw.sandboxOK(idB))
	}
	ipt.mu.Lock()
	for name := range ipt.chains {
		if strings.Contains(name, "bbbbbbbbbbbb") && !strings.HasSuffix(name, "-"+nowB) {
			t.Errorf("chain %s of an older generation is left", name)
		}
	}
	ipt.mu.Unlock()
	checkInvariants(t, c, ipt)
}

// TestVerifyRestoresRules: the periodic check finds, from one listing of
// the network's chain, the sandbox whose jump vanished (a host firewall
// reload) and puts its rules back; the others' rules stay as they are.
func TestVerifyRestoresRules(t *testing.T) {
	t.Parallel()
	c, ipt := testController(t, 7)
	mustApply(t, c, idA, wire.EgressPolicy{Mode: wire.EgressOpen})
	mustApply(t, c, idB, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"pkg.test"}})
	gen := func(id string) string {
		c.fw.mu.Lock()
		defer c.fw.mu.Unlock()
		return c.fw.current[sandboxKey(id)]
	}
	genA, genB := gen(idA), gen(idB)
	mainA, _ := chainNames(sandboxKey(idA), genA)
	ipt.mu.Lock()
	ipt.chains[c.fw.base] = slices.DeleteFunc(slices.Clone(ipt.chains[c.fw.base]), func(rule string) bool { return strings.Contains(rule, mainA) })
	ipt.mu.Unlock()
	if c.fw.sandboxOK(idA) {
		t.Fatal("the jump removed behind the firewall's back is still seen")
	}
	c.verify(t.Context())
	if !c.fw.sandboxOK(idA) {
		t.Error("verify did not put A's rules back")
	}
	if got := gen(idB); got != genB || !c.fw.sandboxOK(idB) {
		t.Errorf("verify changed B's rules: generation %s, was %s", got, genB)
	}
	checkInvariants(t, c, ipt)
}

// TestFirewallNodeSharedAddress: on a node the sandboxes' jumps match the
// network's set of their addresses, and a pod's address can be a new
// sandbox's while the old one's rules are still in (the old pod has not
// left the API server). The old one's going, by its removal, by a change
// of its address, or by a prune at start, leaves the address in the set
// while another sandbox's rules judge it: taken out, the new pod would be
// confined by nothing.
func TestFirewallNodeSharedAddress(t *testing.T) {
	t.Parallel()
	shared := netip.MustParseAddr("10.214.5.9")
	open := wire.EgressPolicy{Mode: wire.EgressOpen}
	nodeController := func(t *testing.T) (*Controller, *fakeIPT, *fakeNet) {
		c, ipt := testController(t, 0)
		c.fw.node, c.fw.forward = true, "FORWARD"
		if _, err := c.fw.ensureBase(); err != nil {
			t.Fatal(err)
		}
		n := c.drv.(*fakeNet)
		n.addrs[idA], n.addrs[idB] = shared, shared
		n.on[idA], n.on[idB] = true, true
		mustApply(t, c, idA, open)
		mustApply(t, c, idB, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"198.51.100.7/32:443"}})
		return c, ipt, n
	}
	inSet := func(c *Controller, ipt *fakeIPT, a netip.Addr) bool {
		ipt.mu.Lock()
		defer ipt.mu.Unlock()
		return slices.Contains(ipt.sets[c.fw.srcSet()], a.String())
	}

	t.Run("Forget", func(t *testing.T) {
		c, ipt, _ := nodeController(t)
		if err := c.Forget(t.Context(), idA); err != nil {
			t.Fatal(err)
		}
		if !inSet(c, ipt, shared) {
			t.Errorf("the old sandbox's removal took %s, which the new one has, out of %s", shared, c.fw.srcSet())
		}
		if err := c.Forget(t.Context(), idB); err != nil {
			t.Fatal(err)
		}
		if inSet(c, ipt, shared) {
			t.Errorf("%s is still in %s with no sandbox at it", shared, c.fw.srcSet())
		}
	})
	t.Run("AddressChange", func(t *testing.T) {
		c, ipt, n := nodeController(t)
		moved := netip.MustParseAddr("10.214.5.10")
		n.mu.Lock()
		n.addrs[idA] = moved
		n.mu.Unlock()
		mustApply(t, c, idA, open)
		if !inSet(c, ipt, shared) || !inSet(c, ipt, moved) {
			t.Errorf("after the old sandbox moved to %s, %s: %v", moved, c.fw.srcSet(), ipt.sets[c.fw.srcSet()])
		}
	})
	t.Run("Prune", func(t *testing.T) {
		// What a restarted controller's first pass does: it knows none
		// of the rules it finds, keeps the new sandbox's and removes the
		// old one's.
		c, ipt, _ := nodeController(t)
		c.fw.current, c.fw.addrs = map[string]string{}, map[string]netip.Addr{}
		if err := c.fw.prune([]string{idB}); err != nil {
			t.Fatal(err)
		}
		if !inSet(c, ipt, shared) {
			t.Errorf("a prune of the old sandbox took %s, which the kept one's jump is from, out of %s", shared, c.fw.srcSet())
		}
		if err := c.fw.prune(nil); err != nil {
			t.Fatal(err)
		}
		if inSet(c, ipt, shared) {
			t.Errorf("%s is still in %s after a prune of every sandbox", shared, c.fw.srcSet())
		}
	})
}
