package kubernetes_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// rule renders a NetworkPolicy egress rule as "to [except] ports", for
// comparing what the API server stored.
func rule(r networkingv1.NetworkPolicyEgressRule) string {
	var b strings.Builder
	for _, p := range r.To {
		if p.IPBlock == nil {
			b.WriteString("<not an ipBlock>")
			continue
		}
		b.WriteString(p.IPBlock.CIDR)
		if len(p.IPBlock.Except) > 0 {
			b.WriteString(" except " + strings.Join(p.IPBlock.Except, ","))
		}
	}
	for _, p := range r.Ports {
		b.WriteString(" " + string(*p.Protocol) + "/" + p.Port.String())
	}
	return b.String()
}

// TestNetworkPolicyPerSandbox checks the NetworkPolicy of each mode as the
// real API server stores it, its update with the policy and its removal
// with the sandbox.
func TestNetworkPolicyPerSandbox(t *testing.T) {
	t.Parallel()
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	d, err := kubernetes.New(kubernetes.Config{
		Kubeconfig: env.Kubeconfig,
		Namespace:  ns,
		Egress: kubernetes.EgressConfig{
			NetworkPolicies: true,
			Resolver:        netip.MustParseAddr("10.244.0.1"),
			Allowed:         []netip.AddrPort{netip.MustParseAddrPort("10.244.0.1:7443")},
			AllowPrivate:    []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	nps := d.Client().NetworkingV1().NetworkPolicies(ns)
	// The always-blocked ranges inside 0.0.0.0/0, 10.20.0.0/16 taken out
	// of 10.0.0.0/8.
	world := "0.0.0.0/0 except 0.0.0.0/8,127.0.0.0/8,169.254.0.0/16,224.0.0.0/3,100.100.100.200/32,168.63.129.16/32," +
		"10.128.0.0/9,10.64.0.0/10,10.32.0.0/11,10.0.0.0/12,10.24.0.0/13,10.16.0.0/14,10.22.0.0/15,10.21.0.0/16," +
		"172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,198.18.0.0/15"
	agent := "10.244.0.1/32 TCP/7443"
	dns := "10.244.0.1/32 UDP/53 TCP/53"
	for _, tc := range []struct {
		name string
		p    wire.EgressPolicy
		want []string
	}{
		{"open", wire.EgressPolicy{Mode: wire.EgressOpen}, []string{agent, dns, world}},
		{"none", wire.EgressPolicy{Mode: wire.EgressNone}, []string{agent}},
		{"allowlist", wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"203.0.113.0/24:443", "10.0.0.0/8", "api.example.com:443", "*.example.org:8443"}},
			[]string{agent, dns, "203.0.113.0/24 TCP/443 UDP/443",
				"10.0.0.0/8 except 10.128.0.0/9,10.64.0.0/10,10.32.0.0/11,10.0.0.0/12,10.24.0.0/13,10.16.0.0/14,10.22.0.0/15,10.21.0.0/16",
				world + " TCP/443 UDP/443 TCP/8443 UDP/8443"}},
		{"allowlist of a name on any port", wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"example.com"}}, []string{agent, dns, world}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "np-" + strings.ReplaceAll(strings.ToLower(randomID(t)), "test-", "")
			p := tc.p
			spec := driver.Spec{ID: id, Image: "hotcell/whatever:latest", Instance: "np-test", Egress: &p}
			must(t, "create", d.Create(ctx, spec))
			t.Cleanup(func() { _ = d.Destroy(ctx, id) })
			np, err := nps.Get(ctx, kubernetes.NetworkPolicyName(id), metav1.GetOptions{})
			must(t, "get networkpolicy", err)
			if got := np.Spec.PodSelector.MatchLabels; got[driver.LabelID] != id || got[driver.LabelManaged] != "true" || len(np.Spec.PodSelector.MatchExpressions) > 0 {
				t.Errorf("pod selector: got %+v, want the sandbox's pod", np.Spec.PodSelector)
			}
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
				t.Errorf("policy types %v, ingress %v: want Ingress and Egress, no ingress allowed", np.Spec.PolicyTypes, np.Spec.Ingress)
			}
			if np.Labels[driver.LabelID] != id || np.Labels[driver.LabelInstance] != "np-test" {
				t.Errorf("labels %v", np.Labels)
			}
			var got []string
			for _, r := range np.Spec.Egress {
				got = append(got, rule(r))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("egress rules:\ngot  %q\nwant %q", got, tc.want)
			}
			// The record carries the policy for the pod of every start.
			rec, err := d.Client().CoreV1().Secrets(ns).Get(ctx, kubernetes.PodName(id), metav1.GetOptions{})
			must(t, "get record", err)
			var pod corev1.Pod
			must(t, "decode the recorded pod", json.Unmarshal(rec.Data["pod.json"], &pod))
			var recorded wire.EgressPolicy
			must(t, "decode the pod's policy", json.Unmarshal([]byte(pod.Annotations[kubernetes.AnnoEgress]), &recorded))
			if recorded.Mode != tc.p.Mode || !slices.Equal(recorded.Allow, tc.p.Allow) {
				t.Errorf("the recorded pod's policy: got %+v, want %+v", recorded, tc.p)
			}
		})
	}

	// A change of policy replaces the NetworkPolicy and the recorded
	// pod's annotation (the box is stopped: no node to wait for).
	id := "np-" + strings.TrimPrefix(randomID(t), "test-")
	must(t, "create", d.Create(ctx, driver.Spec{ID: id, Image: "hotcell/whatever:latest", Egress: &wire.EgressPolicy{Mode: wire.EgressOpen}}))
	must(t, "set egress", d.SetEgress(ctx, id, wire.EgressPolicy{Mode: wire.EgressNone}))
	np, err := nps.Get(ctx, kubernetes.NetworkPolicyName(id), metav1.GetOptions{})
	must(t, "get networkpolicy", err)
	if len(np.Spec.Egress) != 1 || rule(np.Spec.Egress[0]) != agent {
		t.Errorf("after the change to none: egress rules %v, want only the agent channel", np.Spec.Egress)
	}
	rec, err := d.Client().CoreV1().Secrets(ns).Get(ctx, kubernetes.PodName(id), metav1.GetOptions{})
	must(t, "get record", err)
	if !strings.Contains(string(rec.Data["pod.json"]), `\"mode\":\"none\"`) {
		t.Errorf("the recorded pod after the change: %s", rec.Data["pod.json"])
	}
	// A bad policy is refused naming the field, and changes nothing.
	if err := d.SetEgress(ctx, id, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"bad entry!"}}); err == nil || !strings.Contains(err.Error(), "egress.allow[0]") {
		t.Errorf("a bad entry: got %v, want an error naming egress.allow[0]", err)
	}
	must(t, "destroy", d.Destroy(ctx, id))
	if _, err := nps.Get(ctx, kubernetes.NetworkPolicyName(id), metav1.GetOptions{}); err == nil {
		t.Error("the NetworkPolicy outlived its sandbox")
	}
}
