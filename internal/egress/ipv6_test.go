package egress

import (
	"slices"
	"testing"
)

// TestV6Guard: the IPv6 drops go first in INPUT and FORWARD once, are
// found missing and restored, and Teardown's removal finds them by the
// network's tag alone.
func TestV6Guard(t *testing.T) {
	t.Parallel()
	ipt := newFakeIPT()
	ipt.chains["INPUT"] = []string{"-j ACCEPT"}
	g := newV6Guard(ipt, "br-0123456789ab", "HCN-2f27e8f4")
	other := newV6Guard(ipt, "br-other", "HCN-other")
	for _, x := range []*v6Guard{g, g, other} {
		if err := x.ensure(); err != nil {
			t.Fatal(err)
		}
	}
	want := "-i br-0123456789ab -m comment --comment hotcell: HCN-2f27e8f4 ipv6 -j DROP"
	for _, c := range v6Chains {
		got := ipt.chains[c]
		if slices.Index(got, want) != 1 || slices.Index(got[2:], want) >= 0 {
			t.Errorf("%s: got %q, want the drop once (below the other network's, inserted later)", c, got)
		}
	}
	if !g.ok() {
		t.Error("ok: got false with the rules in place")
	}
	ipt.chains["FORWARD"] = slices.DeleteFunc(ipt.chains["FORWARD"], func(r string) bool { return r == want })
	if g.ok() {
		t.Error("ok: got true with a rule missing")
	}
	if err := removeV6Guard(ipt, "HCN-2f27e8f4"); err != nil {
		t.Fatal(err)
	}
	for _, c := range v6Chains {
		if slices.Contains(ipt.chains[c], want) || len(ipt.chains[c]) == 0 {
			t.Errorf("%s after removal: %q, want only the other network's and the rest", c, ipt.chains[c])
		}
	}
}
