package kubeegress_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/kubeegress"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
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

// TestDaemonSetManifest: deploy/kubernetes/egress-node.yaml is accepted by
// the real API server (a server-side dry run in a namespace of the test's:
// schema, defaults and admission), and its RBAC is exactly what the node
// controller calls.
func TestDaemonSetManifest(t *testing.T) {
	t.Parallel()
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := env.MustKubectl(t, "-n", ns, "apply", "--dry-run=server", "-f", filepath.Join(root, "deploy/kubernetes/egress-node.yaml"), "-o", "name")
	for _, want := range []string{"serviceaccount/hotcell-egress-node", "role.rbac.authorization.k8s.io/hotcell-egress-node",
		"rolebinding.rbac.authorization.k8s.io/hotcell-egress-node", "daemonset.apps/hotcell-egress-node"} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run did not make %s:\n%s", want, out)
		}
	}
	out = env.MustKubectl(t, "-n", ns, "apply", "--dry-run=server", "-f", filepath.Join(root, "deploy/kubernetes/egress-node-teardown.yaml"), "-o", "name")
	if !strings.Contains(out, "daemonset.apps/hotcell-egress-node-teardown") {
		t.Errorf("the teardown's dry run did not make its DaemonSet:\n%s", out)
	}
	// The service account may do what the controller does, and no more.
	// Only the account and its RBAC are made: a DaemonSet would have the
	// kubelet pull its image from a registry.
	manifest, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/egress-node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rbac []string
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		if !strings.Contains(doc, "\nkind: DaemonSet\n") {
			rbac = append(rbac, doc)
		}
	}
	if len(rbac) != 3 {
		t.Fatalf("the manifest has %d objects besides the DaemonSet, want 3", len(rbac))
	}
	if _, err := env.Kubectl(t.Context(), strings.NewReader(strings.Join(rbac, "\n---\n")), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	sa := "system:serviceaccount:" + ns + ":hotcell-egress-node"
	for _, c := range []struct {
		verb, resource string
		want           string
	}{{"watch", "pods", "yes"}, {"patch", "pods", "yes"}, {"delete", "pods", "no"}, {"get", "secrets", "no"}, {"create", "pods", "no"}} {
		got, _ := env.Kubectl(t.Context(), nil, "-n", ns, "auth", "can-i", c.verb, c.resource, "--as", sa)
		if strings.TrimSpace(got) != c.want {
			t.Errorf("can the egress node's account %s %s: got %q, want %s", c.verb, c.resource, strings.TrimSpace(got), c.want)
		}
	}
}
