package kubeegress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/kubeegress"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestNodeAddressReused: a pod's address goes back to the node's pool
// when its network is torn down, before the pod leaves the API server, so
// a new sandbox's pod can have the address of an old one the controller
// still confines. The old pod's rules go before the new pod's go in (they
// would judge its traffic), and their going leaves the new pod's address
// caught by the node's rules: before the fix, the old pod's removal took
// the address out of the node's set of sandbox addresses and the new pod
// was confined by nothing.
//
// The pods are the API server's only: bound to a node no kubelet runs
// (the controller's NodeName), their status written by the test, so that
// two of them can have one address, as the race gives. The rules are the
// host's real iptables and ipsets, for an address no packet has here
// (198.18.77.0/24, a benchmarking range).
func TestNodeAddressReused(t *testing.T) {
	testenv.RequireRoot(t, "the node's egress controller changes iptables, ipsets and the node's addresses")
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	rc, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	node := "hc-nokubelet-" + randHex(3)
	resolver := netip.AddrFrom4([4]byte{169, 254, 77, byte(2 + time.Now().UnixNano()%250)})
	ecfg := egress.Config{
		Network: "ku-" + randHex(3),
		Subnet:  netip.MustParsePrefix("198.18.77.0/24"),
		Node:    true,
		// No lookup is asked: an upstream no packet goes to.
		Upstreams: []string{testk8s.NewUpstream(t, nil)},
	}
	n := kubeegress.NewNode(kubeegress.NodeConfig{
		Client: client, Namespace: ns, NodeName: node, Resolver: resolver, Bridge: bridge, Egress: ecfg,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	nctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(nctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("egress node: %v", err)
		}
		if err := egress.TeardownConfig(ecfg); err != nil {
			t.Errorf("egress teardown: %v", err)
		}
		if err := kubeegress.RemoveResolverAddr(resolver); err != nil {
			t.Errorf("take the resolver's address off: %v", err)
		}
	})
	// The namespace goes at the end with its pods: none may keep a
	// finalizer of the test's by then.
	const hold = "hotcell.test/hold"
	t.Cleanup(func() {
		pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Errorf("list the test's pods: %v", err)
			return
		}
		for _, p := range pods.Items {
			if len(p.Finalizers) > 0 {
				release(t, client, &p)
			}
		}
	})

	addr := "198.18.77.5"
	// podAt makes the pod of sandbox id, bound to the test's node, with
	// policy p, and gives it addr as the kubelet would.
	podAt := func(t *testing.T, id, addr string, hostNetwork bool, p wire.EgressPolicy, finalizers ...string) *corev1.Pod {
		t.Helper()
		pol, _ := json.Marshal(p)
		made, err := client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:        kubernetes.PodName(id),
				Labels:      map[string]string{driver.LabelManaged: "true", driver.LabelID: id},
				Annotations: map[string]string{kubernetes.AnnoEgress: string(pol)},
				Finalizers:  finalizers,
			},
			Spec: corev1.PodSpec{
				HostNetwork:   hostNetwork,
				NodeName:      node,
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "box", Image: "hotcell/never-pulled:none"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		made.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr, PodIPs: []corev1.PodIP{{IP: addr}}, StartTime: &now}
		made, err = client.CoreV1().Pods(ns).UpdateStatus(t.Context(), made, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return made
	}
	// pod is podAt the address the old and new pods share.
	pod := func(t *testing.T, id string, p wire.EgressPolicy, finalizers ...string) *corev1.Pod {
		t.Helper()
		return podAt(t, id, addr, false, p, finalizers...)
	}
	// applied waits for the controller to say p's policy is in force.
	applied := func(t *testing.T, p *corev1.Pod) {
		t.Helper()
		want := kubernetes.EgressToken(p.Annotations[kubernetes.AnnoEgress], p.UID)
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := client.CoreV1().Pods(ns).Get(t.Context(), p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Annotations[kubernetes.AnnoEgressApplied] == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 s on, the controller has not applied the policy of pod %s", p.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// No kubelet confirms a deletion on the test's node: the API server
	// lets a pod go at once when told to wait for nothing.
	zero := int64(0)
	now := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	for _, tc := range []struct {
		name string
		// terminating: the old pod is being deleted (the kubelet tore its
		// network down; its object waits, here on a finalizer). Otherwise
		// its deletion has not reached the controller: only the new pod's
		// later start tells them apart.
		terminating bool
	}{{"OldPodTerminating", true}, {"OldPodNotYetDeleted", false}} {
		t.Run(tc.name, func(t *testing.T) {
			oldID, newID := "sb-"+randHex(6), "sb-"+randHex(6)
			// The old sandbox is open, the new one none: were the old
			// one's rules to judge the new one's traffic, it would go out.
			old := pod(t, oldID, wire.EgressPolicy{Mode: wire.EgressOpen}, hold)
			applied(t, old)
			if !srcCaught(t, addr, oldID) {
				t.Fatalf("the old pod's address %s is not caught by its rules:\n%s", addr, rulesOf(t, addr))
			}
			if tc.terminating {
				if err := client.CoreV1().Pods(ns).Delete(ctx, old.Name, now); err != nil {
					t.Fatal(err)
				}
			}
			nw := pod(t, newID, wire.EgressPolicy{Mode: wire.EgressNone})
			applied(t, nw)
			// When the new pod's policy is said to be in force, the old
			// pod's rules are gone: nothing but the new pod's judges the
			// address.
			if chainsOf(t, oldID) {
				t.Errorf("the new pod's policy is in force and the old pod's chains are still there:\n%s", rulesOf(t, addr))
			}
			if !srcCaught(t, addr, newID) {
				t.Errorf("the new pod's address %s is not caught by its rules:\n%s", addr, rulesOf(t, addr))
			}
			// The old pod leaves the API server.
			release(t, client, old)
			if !tc.terminating {
				if err := client.CoreV1().Pods(ns).Delete(ctx, old.Name, now); err != nil {
					t.Fatal(err)
				}
			}
			podGone(t, client, ns, old.Name)
			deadline := time.Now().Add(30 * time.Second)
			for chainsOf(t, oldID) {
				if time.Now().After(deadline) {
					t.Fatalf("30 s after the old pod left the API server, its chains are still there:\n%s", rulesOf(t, addr))
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Second) // the rest of the sync its going poked
			if !srcCaught(t, addr, newID) {
				t.Errorf("once the old pod left the API server, the new pod's address %s is not caught by its rules:\n%s", addr, rulesOf(t, addr))
			}
			// And after a change of the new pod's policy.
			patched := setPolicy(t, client, nw, wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"198.51.100.7/32:443"}})
			applied(t, patched)
			if !srcCaught(t, addr, newID) {
				t.Errorf("after a change of the new pod's policy, its address %s is not caught by its rules:\n%s", addr, rulesOf(t, addr))
			}
			if err := client.CoreV1().Pods(ns).Delete(ctx, nw.Name, now); err != nil {
				t.Fatal(err)
			}
			podGone(t, client, ns, nw.Name)
			deadline = time.Now().Add(30 * time.Second)
			for chainsOf(t, newID) || inSrcSet(t, addr) {
				if time.Now().After(deadline) {
					t.Fatalf("30 s after the last pod at %s went, its rules are still there:\n%s", addr, rulesOf(t, addr))
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}

	// A pod with the node's network is no sandbox the driver made: rules
	// by its source address would judge the node's own traffic. Once a
	// later pod's policy is in force, a sync has been through it.
	t.Run("HostNetworkPodIgnored", func(t *testing.T) {
		hostID, id := "sb-"+randHex(6), "sb-"+randHex(6)
		host := podAt(t, hostID, "198.18.77.9", true, wire.EgressPolicy{Mode: wire.EgressNone})
		applied(t, pod(t, id, wire.EgressPolicy{Mode: wire.EgressNone}))
		got, err := client.CoreV1().Pods(ns).Get(ctx, host.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Annotations[kubernetes.AnnoEgressApplied]; v != "" || chainsOf(t, hostID) || inSrcSet(t, "198.18.77.9") {
			t.Errorf("a pod with the node's network was confined (applied %q):\n%s", v, rulesOf(t, "198.18.77.9"))
		}
	})
}

// release takes the test's finalizers off pod p.
func release(t *testing.T, client k8s.Interface, p *corev1.Pod) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := client.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("take the finalizers off pod %s: %v", p.Name, err)
	}
}

func setPolicy(t *testing.T, client k8s.Interface, p *corev1.Pod, pol wire.EgressPolicy) *corev1.Pod {
	t.Helper()
	val, _ := json.Marshal(pol)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kubernetes.AnnoEgress: string(val)}}})
	got, err := client.CoreV1().Pods(p.Namespace).Patch(t.Context(), p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// podGone waits for pod name to leave the API server.
func podGone(t *testing.T, client k8s.Interface, ns, name string) {
	t.Helper()
	waitGone(t, "pod "+name, func() []string {
		if _, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{}); err == nil {
			return []string{name}
		}
		return nil
	})
}

// srcCaught reports whether the host's rules send addr's traffic to
// sandbox id's chain: a network chain's jump from addr to it, and addr in
// that network's set of sandbox addresses (what the jumps to the network
// chain match).
func srcCaught(t *testing.T, addr, id string) bool {
	t.Helper()
	out, err := exec.Command("iptables", "-S").Output()
	if err != nil {
		t.Fatal(err)
	}
	jump := regexp.MustCompile(`^-A (HCN-[0-9a-f]+) -s ` + regexp.QuoteMeta(addr) + `/32 -g HCE-` + strings.TrimPrefix(id, "sb-") + `-`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := jump.FindStringSubmatch(l); m != nil {
			return exec.Command("ipset", "test", m[1]+"-a", addr).Run() == nil
		}
	}
	return false
}

// chainsOf reports whether sandbox id has chains on the host.
func chainsOf(t *testing.T, id string) bool {
	t.Helper()
	out, err := exec.Command("iptables", "-S").Output()
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimPrefix(id, "sb-")
	return strings.Contains(string(out), "HCE-"+key+"-") || strings.Contains(string(out), "HCD-"+key+"-")
}

// inSrcSet reports whether addr is in any hotcell network's set of
// sandbox addresses on the host.
func inSrcSet(t *testing.T, addr string) bool {
	t.Helper()
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strings.Fields(string(out)) {
		if strings.HasPrefix(s, "HCN-") && strings.HasSuffix(s, "-a") && exec.Command("ipset", "test", s, addr).Run() == nil {
			return true
		}
	}
	return false
}

// rulesOf is what the host's rules say of addr, for a failure's message.
func rulesOf(t *testing.T, addr string) string {
	out, _ := exec.Command("iptables", "-S").Output()
	var b strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, addr) || strings.Contains(l, "HCE-") && strings.HasPrefix(l, "-N") {
			b.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&b, "in a set of sandbox addresses: %v\n", inSrcSet(t, addr))
	return b.String()
}
