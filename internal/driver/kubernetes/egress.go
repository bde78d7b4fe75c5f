package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Egress on a cluster (docs/kubernetes.md, "Egress"): a sandbox's policy
// travels as its pod's AnnoEgress. Two enforcers read it: the cluster's
// CNI, through the sandbox's NetworkPolicy (where the CNI enforces them),
// and hotcell's own controller on the pod's node (hotcell egress-node,
// internal/kubeegress), which puts internal/egress's rules in force for
// the pod's address and answers with AnnoEgressApplied.
const (
	// AnnoEgress is the policy, JSON of wire.EgressPolicy, on the pod and
	// its record.
	AnnoEgress = "hotcell.egress"
	// AnnoEgressApplied is EgressToken of the policy the node's egress
	// controller put in force for the pod; only the controller writes it.
	AnnoEgressApplied = "hotcell.egress.applied"
	// AnnoEgressStatus is the node controller's report of the pod's
	// counters, learned addresses and recent denials (JSON of
	// wire.EgressStatus without the policy); only the controller writes it.
	AnnoEgressStatus = "hotcell.egress.status"
)

// EgressConfig is what the driver does with a spec's egress policy.
type EgressConfig struct {
	// NetworkPolicies makes a NetworkPolicy per sandbox that expresses its
	// mode, for clusters whose CNI enforces them.
	NetworkPolicies bool
	// NodeEnforced makes Start and SetEgress wait until the egress
	// controller of the pod's node has applied the pod's policy: user code
	// runs only in a confined box.
	NodeEnforced bool
	// Resolver is the address of hotcell's resolver the pods are pinned to
	// (dnsConfig; the node's address on the pod network): the
	// NetworkPolicy lets DNS go there.
	Resolver netip.Addr
	// Allowed are TCP endpoints every box reaches in every mode: the
	// daemon's agent channel.
	Allowed []netip.AddrPort
	// AllowPrivate are the private networks boxes may reach
	// (egress_allow_private).
	AllowPrivate []netip.Prefix
	// ApplyTimeout bounds the wait for the node's controller; 30 s if 0.
	ApplyTimeout time.Duration
}

// EgressToken names what the node controller applied: the policy
// annotation's value for the pod with uid. A new pod of the same sandbox
// (a start after a stop) has another uid, so an old answer never passes.
func EgressToken(policy string, uid types.UID) string {
	h := sha256.Sum256([]byte(policy + "|" + string(uid)))
	return hex.EncodeToString(h[:12])
}

// NetworkPolicyName is the name of sandbox id's NetworkPolicy.
func NetworkPolicyName(id string) string { return "hotcell-" + id }

func encodeEgress(p *wire.EgressPolicy) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode egress policy: %w", err)
	}
	return string(b), nil
}

// networkPolicy expresses policy p of sandbox id as a NetworkPolicy: no
// ingress at all (the agent dials out; nothing dials a box), and egress to
// what the mode allows. NetworkPolicy matches addresses only, so it is
// approximate where hotcell is exact: an allowlist's names become the
// public internet on those names' ports (the node controller narrows them
// to the addresses the resolver answered), and the node's own addresses
// are not refused (most CNIs let a pod reach its node whatever the policy).
func (d *Driver) networkPolicy(id, instance string, p wire.EgressPolicy) (*networkingv1.NetworkPolicy, error) {
	pol, err := egress.ParsePolicy("egress", p, wire.EgressOpen)
	if err != nil {
		return nil, err
	}
	cfg := d.cfg.Egress
	blocked := egress.BlockedRanges(cfg.AllowPrivate)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(proto corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(int32(n))
		return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: &v}
	}
	host := func(a netip.Addr) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(a, a.BitLen()).String()}}
	}
	// block is prefix less the always-blocked ranges inside it.
	block := func(prefix netip.Prefix) networkingv1.NetworkPolicyPeer {
		b := &networkingv1.IPBlock{CIDR: prefix.Masked().String()}
		for _, r := range blocked {
			if prefix.Bits() < r.Bits() && prefix.Contains(r.Addr()) {
				b.Except = append(b.Except, r.String())
			}
		}
		return networkingv1.NetworkPolicyPeer{IPBlock: b}
	}
	var rules []networkingv1.NetworkPolicyEgressRule
	for _, ap := range cfg.Allowed {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{host(ap.Addr())}, Ports: []networkingv1.NetworkPolicyPort{port(tcp, int(ap.Port()))}})
	}
	if pol.Mode != wire.EgressNone && cfg.Resolver.IsValid() {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{host(cfg.Resolver)}, Ports: []networkingv1.NetworkPolicyPort{port(udp, 53), port(tcp, 53)}})
	}
	world := netip.MustParsePrefix("0.0.0.0/0")
	switch pol.Mode {
	case wire.EgressOpen:
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{block(world)}})
	case wire.EgressAllowlist:
		var namePorts []int
		anyPort := false
		for _, e := range pol.Entries {
			if e.Domain != "" {
				if e.Port == 0 {
					anyPort = true
				} else if !slices.Contains(namePorts, e.Port) {
					namePorts = append(namePorts, e.Port)
				}
				continue
			}
			if !e.Prefix.Addr().Is4() {
				continue // the pod network is IPv4 only, as hotcell's rules are
			}
			r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{block(e.Prefix)}}
			if e.Port != 0 {
				r.Ports = []networkingv1.NetworkPolicyPort{port(tcp, e.Port), port(udp, e.Port)}
			}
			rules = append(rules, r)
		}
		if anyPort || len(namePorts) > 0 {
			r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{block(world)}}
			if !anyPort {
				slices.Sort(namePorts)
				for _, n := range namePorts {
					r.Ports = append(r.Ports, port(tcp, n), port(udp, n))
				}
			}
			rules = append(rules, r)
		}
	}
	if rules == nil {
		rules = []networkingv1.NetworkPolicyEgressRule{} // none: no egress at all
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      NetworkPolicyName(id),
			Namespace: d.cfg.Namespace,
			Labels:    managedLabels(id, instance),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{driver.LabelManaged: "true", driver.LabelID: id}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      rules,
		},
	}, nil
}

// putNetworkPolicy creates or replaces sandbox id's NetworkPolicy.
func (d *Driver) putNetworkPolicy(ctx context.Context, id, instance string, p wire.EgressPolicy) error {
	np, err := d.networkPolicy(id, instance, p)
	if err != nil {
		return err
	}
	nps := d.c.NetworkingV1().NetworkPolicies(d.cfg.Namespace)
	_, err = nps.Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *networkingv1.NetworkPolicy
		if cur, err = nps.Get(ctx, np.Name, metav1.GetOptions{}); err == nil {
			cur.Spec = np.Spec
			_, err = nps.Update(ctx, cur, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return classify("put networkpolicy "+np.Name, err)
	}
	return nil
}

// removeNetworkPolicy deletes sandbox id's NetworkPolicy; a missing one is
// not an error.
func (d *Driver) removeNetworkPolicy(ctx context.Context, id string) error {
	err := d.c.NetworkingV1().NetworkPolicies(d.cfg.Namespace).Delete(ctx, NetworkPolicyName(id), metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		return classify("delete networkpolicy "+NetworkPolicyName(id), err)
	}
	return nil
}

// SetEgress replaces the egress policy of sandbox id: in its record (the
// pod of its next start), its NetworkPolicy and its running pod, whose
// node's controller it then waits for (EgressConfig.NodeEnforced). A
// failure leaves the node's rules as they were, as the controller applies
// a policy whole or not at all.
func (d *Driver) SetEgress(ctx context.Context, id string, p wire.EgressPolicy) error {
	if err := checkID(id); err != nil {
		return err
	}
	if _, err := egress.ParsePolicy("egress", p, wire.EgressOpen); err != nil {
		return err
	}
	val, err := encodeEgress(&p)
	if err != nil {
		return err
	}
	rec, err := d.record(ctx, id)
	if err != nil {
		return fmt.Errorf("set egress of sandbox %s: %w", id, err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(rec.Data[recordPod], &pod); err != nil {
		return fmt.Errorf("set egress of sandbox %s: decode its pod: %w", id, err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnoEgress] = val
	b, err := json.Marshal(&pod)
	if err != nil {
		return fmt.Errorf("encode pod of sandbox %s: %w", id, err)
	}
	rec.Data[recordPod] = b
	if rec.Annotations == nil {
		rec.Annotations = map[string]string{}
	}
	rec.Annotations[AnnoEgress] = val
	if _, err := d.c.CoreV1().Secrets(d.cfg.Namespace).Update(ctx, rec, metav1.UpdateOptions{}); err != nil {
		return classify("update record of sandbox "+id, err)
	}
	if d.cfg.Egress.NetworkPolicies {
		if err := d.putNetworkPolicy(ctx, id, rec.Labels[driver.LabelInstance], p); err != nil {
			return fmt.Errorf("set egress of sandbox %s: %w", id, err)
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnoEgress: val}}})
	cur, err := d.c.CoreV1().Pods(d.cfg.Namespace).Patch(ctx, PodName(id), types.MergePatchType, patch, metav1.PatchOptions{})
	if isNotFound(err) {
		return nil // stopped: its next pod has the policy
	}
	if err != nil {
		return classify("annotate pod "+PodName(id), err)
	}
	return d.waitEgressApplied(ctx, id, cur.UID)
}

// waitEgressApplied waits until the egress controller of the node of pod
// uid has applied the pod's policy, when the driver is configured to.
func (d *Driver) waitEgressApplied(ctx context.Context, id string, uid types.UID) error {
	if !d.cfg.Egress.NodeEnforced {
		return nil
	}
	timeout := d.cfg.Egress.ApplyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var node string
	err := d.waitPod(ctx, id, func(p *corev1.Pod) (bool, error) {
		if p == nil || p.UID != uid {
			return false, fmt.Errorf("pod %s went while its egress policy was applied: %w", PodName(id), errdefs.ErrConflict)
		}
		node = p.Spec.NodeName
		val, ok := p.Annotations[AnnoEgress]
		if !ok {
			return true, nil // no policy: nothing to apply
		}
		return p.Annotations[AnnoEgressApplied] == EgressToken(val, p.UID), nil
	})
	if err != nil && errors.Is(err, errdefs.ErrDeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("the egress controller of node %q did not apply the policy of sandbox %s within %s (is hotcell egress-node running there? see docs/kubernetes.md): %w", node, id, timeout, errdefs.ErrUnavailable)
	}
	return err
}

// PodAddr returns the address of sandbox id's pod while it runs: what
// the LLM gateway checks a call's source against (a pod cannot take
// another address: no NET_ADMIN, no NET_RAW). It is invalid, with no
// error, when the sandbox has no pod, or one that is not running or is
// being deleted (its address may go to another pod).
func (d *Driver) PodAddr(ctx context.Context, id string) (netip.Addr, error) {
	if err := checkID(id); err != nil {
		return netip.Addr{}, err
	}
	p, err := d.getPod(ctx, id)
	if err != nil || p == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("address of pod %s: %w", p.Name, err)
	}
	return a.Unmap(), nil
}

// EgressStatus returns what the node's egress controller last reported for
// sandbox id's pod (AnnoEgressStatus), with the pod's address; nil when
// the box has no pod or no report yet.
func (d *Driver) EgressStatus(ctx context.Context, id string) (*wire.EgressStatus, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	p, err := d.getPod(ctx, id)
	if err != nil || p == nil {
		return nil, err
	}
	val, ok := p.Annotations[AnnoEgressStatus]
	if !ok || p.Annotations[AnnoEgressApplied] != EgressToken(p.Annotations[AnnoEgress], p.UID) {
		return nil, nil
	}
	var st wire.EgressStatus
	if err := json.Unmarshal([]byte(val), &st); err != nil {
		return nil, fmt.Errorf("egress status of pod %s: %w", p.Name, err)
	}
	st.Address = p.Status.PodIP
	return &st, nil
}
