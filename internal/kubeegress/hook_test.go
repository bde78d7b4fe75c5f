package kubeegress_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/kubeegress"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

var _ sandbox.EgressHook = (*kubeegress.Hook)(nil)

// TestHookPolicy: the hook validates policies as the Docker controller
// does and puts them, and the node's resolver, in the box's spec.
func TestHookPolicy(t *testing.T) {
	h := &kubeegress.Hook{DefaultMode: wire.EgressNone, Resolver: netip.MustParseAddr("10.244.0.1")}
	p, err := h.Resolve(wire.EgressPolicy{})
	if err != nil || p.Mode != wire.EgressNone {
		t.Errorf("resolve of an empty policy: got %+v, %v; want the default mode none", p, err)
	}
	if _, err := h.Resolve(wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"ok.example", "not ok"}}); err == nil || !strings.Contains(err.Error(), "egress.allow[1]") {
		t.Errorf("resolve of a bad entry: got %v, want an error naming egress.allow[1]", err)
	}
	var spec driver.Spec
	h.Prepare(&spec, wire.EgressPolicy{Mode: wire.EgressOpen})
	if spec.Egress == nil || spec.Egress.Mode != wire.EgressOpen || len(spec.DNS) != 1 || spec.DNS[0].String() != "10.244.0.1" || spec.Network != "" {
		t.Errorf("prepared spec: egress %+v, dns %v, network %q; want the policy, the node's resolver and the pod network", spec.Egress, spec.DNS, spec.Network)
	}
}
