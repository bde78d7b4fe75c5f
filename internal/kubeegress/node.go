// Package kubeegress enforces hotcell's egress policies on Kubernetes
// nodes: Node is the per-node controller (hotcell egress-node, meant to
// run as a privileged DaemonSet with hostNetwork) that learns the node's
// hotcell pods and their policies from the API server and keeps
// internal/egress's rules and resolver for them, the same code that
// confines Docker boxes. docs/kubernetes.md ("Egress") has the design and
// the threat model.
package kubeegress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/wire"
)

// NodeConfig configures a Node.
type NodeConfig struct {
	Client k8s.Interface
	// Namespace holds the sandboxes' pods (the driver's namespace).
	Namespace string
	// NodeName is this node's name: only its pods are looked at.
	NodeName string
	// Resolver is the address the pods' dnsConfig names (the driver's
	// EgressConfig.Resolver): the resolver listens there, port 53. It is
	// the node's own address on the pod network, or a link-local address
	// that Run puts on the node (EnsureResolverAddr).
	Resolver netip.Addr
	// Bridge is the pod network's bridge on the node, from which IPv6 is
	// dropped; empty on a node without IPv6.
	Bridge string
	// Egress configures the rules: Network names this node's rule set,
	// Subnet is the cluster's pod range (what "other sandboxes" refuses),
	// Upstreams, Allowed (the daemon's agent channel), AllowPrivate. Node
	// is set by the Node.
	Egress egress.Config
	Log    *slog.Logger
}

// Node keeps the egress rules of one node's hotcell pods.
type Node struct {
	cfg  NodeConfig
	log  *slog.Logger
	ctl  *egress.Controller
	net  *nodeNet
	kick chan struct{}

	// ready is set once Run has the resolver's address, the rules and the
	// resolver up and has been through the node's pods once (Ready).
	ready atomic.Bool

	mu sync.Mutex
	// known are the pods whose policy is in force: sandbox id → what.
	known map[string]applied
}

// Ready reports whether Run is up: the resolver answers on its address,
// the node's rules are in, and every hotcell pod the API server listed on
// the node at the start has been through an apply.
func (n *Node) Ready() bool { return n.ready.Load() }

type applied struct {
	uid    types.UID
	addr   netip.Addr
	policy string
}

// NewNode returns a node controller; Run it.
func NewNode(cfg NodeConfig) *Node {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Egress.Node = true
	cfg.Egress.Log = cfg.Log
	if cfg.Egress.Network == "" {
		cfg.Egress.Network = "k8s-" + cfg.NodeName
	}
	nn := &nodeNet{resolver: cfg.Resolver, bridge: cfg.Bridge, addrs: map[string]netip.Addr{}}
	return &Node{
		cfg:   cfg,
		log:   cfg.Log.With("component", "egress-node", "node", cfg.NodeName),
		ctl:   egress.New(nn, cfg.Egress),
		net:   nn,
		kick:  make(chan struct{}, 1),
		known: map[string]applied{},
	}
}

// Controller is the egress controller the node drives (its Status gives a
// sandbox's counters and denials on this node).
func (n *Node) Controller() *egress.Controller { return n.ctl }

// PodsOnNode lists the names of the hotcell pods in namespace on node, as
// the API server has them: those whose rules a teardown would remove.
func PodsOnNode(ctx context.Context, client k8s.Interface, namespace, node string) ([]string, error) {
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{driver.LabelManaged: "true"}.AsSelector().String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names, nil
}

// Run starts the resolver and the rules, applies the policy of every
// hotcell pod on the node as the API server reports them, and removes the
// rules of pods that are gone, until ctx ends. The rules stay when it
// returns: the pods stay confined while the controller restarts.
func (n *Node) Run(ctx context.Context) error {
	// The resolver's address first: the controller binds it. It stays
	// when Run returns, as the rules do.
	added, err := EnsureResolverAddr(n.cfg.Resolver)
	if err != nil {
		return err
	}
	if added {
		n.log.Info("resolver address put on the node's loopback", "addr", n.cfg.Resolver, "label", ResolverLabel)
	}
	if err := n.ctl.Start(ctx); err != nil {
		n.ctl.Close()
		return err
	}
	defer n.ctl.Close()
	sel := labels.Set{driver.LabelManaged: "true"}.AsSelector().String()
	node := fields.OneTermEqualSelector("spec.nodeName", n.cfg.NodeName).String()
	lw := cache.NewFilteredListWatchFromClient(n.cfg.Client.CoreV1().RESTClient(), "pods", n.cfg.Namespace, func(o *metav1.ListOptions) {
		o.LabelSelector, o.FieldSelector = sel, node
	})
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		ResyncPeriod:  time.Minute,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { n.poke() },
			UpdateFunc: func(any, any) { n.poke() },
			DeleteFunc: func(any) { n.poke() },
		},
	})
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ctrl.RunWithContext(ictx) }()
	go func() { defer wg.Done(); _ = n.ctl.Run(ictx) }()
	defer wg.Wait()
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return ctx.Err()
	}
	defer n.ready.Store(false)
	pruned := false
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	report := time.NewTicker(StatusInterval)
	defer report.Stop()
	for {
		failed := n.sync(ctx, store, !pruned)
		pruned = true
		n.ready.Store(true)
		if failed {
			retry.Reset(2 * time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-n.kick:
		case <-retry.C:
		case <-report.C:
			n.report(ctx, store)
		}
	}
}

// StatusInterval is how often the node publishes each pod's counters and
// denials (kubernetes.AnnoEgressStatus), when they changed.
var StatusInterval = 5 * time.Second

// report publishes the counters, learned addresses and recent denials of
// each pod whose rules are in force on the pod, where the daemon reads
// them for GET /v1/sandboxes/{id}/egress.
func (n *Node) report(ctx context.Context, store cache.Store) {
	n.mu.Lock()
	known := maps.Clone(n.known)
	n.mu.Unlock()
	for _, o := range store.List() {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		id := p.Labels[driver.LabelID]
		a, ok := known[id]
		if !ok || a.uid != p.UID {
			continue
		}
		var pol wire.EgressPolicy
		if json.Unmarshal([]byte(a.policy), &pol) != nil {
			continue
		}
		st := n.ctl.Status(id, pol)
		st.Policy = wire.EgressPolicy{} // the daemon has it
		if len(st.Denied) > maxReported {
			st.Denied = st.Denied[len(st.Denied)-maxReported:]
		}
		b, err := json.Marshal(st)
		if err != nil || string(b) == p.Annotations[kubernetes.AnnoEgressStatus] {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kubernetes.AnnoEgressStatus: string(b)}}})
		if _, err := n.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
			n.log.Warn("publish egress status", "sandbox", id, "err", err)
		}
	}
}

// maxReported bounds the denials published on a pod.
const maxReported = 20

func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// sync brings the rules in line with the pods in store, and reports
// whether something failed (to be tried again). prune also removes the
// rules of sandboxes with no pod here that a previous run left.
func (n *Node) sync(ctx context.Context, store cache.Store, prune bool) (failed bool) {
	live := map[string]*corev1.Pod{}
	for _, o := range store.List() {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		id := p.Labels[driver.LabelID]
		if id == "" || p.Annotations[kubernetes.AnnoEgress] == "" || p.Status.PodIP == "" ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.HostNetwork {
			// Not a sandbox the driver made: its address is the node's,
			// which rules by source address would take from the node.
			continue
		}
		live[id] = p
	}
	n.mu.Lock()
	known := maps.Clone(n.known)
	n.mu.Unlock()
	dropStaleHolders(live, func(id string, p *corev1.Pod) bool {
		a, ok := known[id]
		return ok && a.uid == p.UID && a.addr.String() == p.Status.PodIP
	})
	var gone []string
	for id, a := range known {
		if p, ok := live[id]; !ok || p.UID != a.uid {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		if err := n.ctl.Forget(ctx, id); err != nil {
			n.log.Warn("remove egress rules of a pod that went", "sandbox", id, "err", err)
			failed = true
		}
		n.net.set(id, netip.Addr{})
		n.mu.Lock()
		delete(n.known, id)
		n.mu.Unlock()
		n.log.Info("egress rules removed", "sandbox", id)
	}
	if prune {
		keep := make([]string, 0, len(live))
		for id := range live {
			keep = append(keep, id)
		}
		if err := n.ctl.Prune(ctx, keep); err != nil {
			n.log.Warn("remove egress rules of pods that are gone", "err", err)
		}
	}
	for id, p := range live {
		if err := n.apply(ctx, id, p); err != nil {
			n.log.Error("apply egress policy", "sandbox", id, "pod", p.Name, "err", err)
			failed = true
		}
	}
	return failed
}

// dropStaleHolders removes from live (sandbox id → pod) every pod whose
// address a pod that got it later has. A pod's address goes back to the
// node's pool when its network is torn down, which is before the pod
// leaves the API server (it is terminating, or its deletion has not
// reached the informer yet), and the next pod may get it then: the old
// pod's rules must go before the new pod's go in, or they would judge the
// new pod's traffic (the same address) by the old policy and, once gone,
// take the address out from under the new pod's rules. Its containers are
// dead: they went with the network. applied reports whether a pod's
// policy is in force here already.
func dropStaleHolders(live map[string]*corev1.Pod, applied func(id string, p *corev1.Pod) bool) {
	holder := map[string]string{} // address → sandbox id
	for _, id := range slices.Sorted(maps.Keys(live)) {
		p := live[id]
		other, ok := holder[p.Status.PodIP]
		if !ok {
			holder[p.Status.PodIP] = id
			continue
		}
		if gotLater(p, live[other], applied(id, p), applied(other, live[other])) {
			holder[p.Status.PodIP] = id
			delete(live, other)
		} else {
			delete(live, id)
		}
	}
}

// gotLater reports whether pod a got its address after pod b: b is
// terminating and a is not, or a started later (to the second), or b's
// policy is in force here and a's is not yet (a is the newcomer), or a
// was made later.
func gotLater(a, b *corev1.Pod, aApplied, bApplied bool) bool {
	if (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) {
		return a.DeletionTimestamp == nil
	}
	if a.Status.StartTime != nil && b.Status.StartTime != nil && !a.Status.StartTime.Equal(b.Status.StartTime) {
		return b.Status.StartTime.Before(a.Status.StartTime)
	}
	if aApplied != bApplied {
		return bApplied
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

// apply puts pod p's policy in force if it is not yet, then says so on
// the pod.
func (n *Node) apply(ctx context.Context, id string, p *corev1.Pod) error {
	val := p.Annotations[kubernetes.AnnoEgress]
	addr, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return fmt.Errorf("pod address %q: %w", p.Status.PodIP, err)
	}
	want := applied{uid: p.UID, addr: addr, policy: val}
	n.mu.Lock()
	have, ok := n.known[id]
	n.mu.Unlock()
	if !ok || have != want {
		var pol wire.EgressPolicy
		if err := json.Unmarshal([]byte(val), &pol); err != nil {
			return fmt.Errorf("decode policy annotation: %w", err)
		}
		n.net.set(id, addr)
		if ok && have.uid != p.UID {
			// A new pod of the sandbox: nothing of the old one carries over.
			if err := n.ctl.Forget(ctx, id); err != nil {
				return err
			}
		}
		if err := n.ctl.Apply(ctx, id, pol); err != nil {
			return err
		}
		n.mu.Lock()
		n.known[id] = want
		n.mu.Unlock()
	}
	token := kubernetes.EgressToken(val, p.UID)
	if p.Annotations[kubernetes.AnnoEgressApplied] == token {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kubernetes.AnnoEgressApplied: token}}})
	_, err = n.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("say the policy is applied on pod %s: %w", p.Name, err)
	}
	return nil
}

// nodeNet is the driver.Networker of a node: the pod network is the CNI's,
// there to use as it is; a pod's address is what the API server says.
type nodeNet struct {
	resolver netip.Addr
	bridge   string

	mu    sync.Mutex
	addrs map[string]netip.Addr
}

var _ driver.Networker = (*nodeNet)(nil)

func (nn *nodeNet) set(id string, a netip.Addr) {
	nn.mu.Lock()
	defer nn.mu.Unlock()
	if a.IsValid() {
		nn.addrs[id] = a
	} else {
		delete(nn.addrs, id)
	}
}

func (nn *nodeNet) EnsureNetwork(ctx context.Context, name string, subnet netip.Prefix) (netip.Addr, error) {
	if !nn.resolver.IsValid() {
		return netip.Addr{}, errors.New("no resolver address: give the node's address on the pod network, or a link-local one")
	}
	return nn.resolver, nil
}

func (nn *nodeNet) NetworkBridge(ctx context.Context, name string) (string, error) {
	return nn.bridge, nil
}

func (nn *nodeNet) RemoveNetwork(ctx context.Context, name string) error { return nil }

// Connect and Disconnect do nothing: a pod is always on the pod network,
// and mode none is a chain of its own (egress.Config.Node).
func (nn *nodeNet) Connect(ctx context.Context, id, network string) error    { return nil }
func (nn *nodeNet) Disconnect(ctx context.Context, id, network string) error { return nil }

func (nn *nodeNet) BoxAddress(ctx context.Context, id, network string) (netip.Addr, error) {
	nn.mu.Lock()
	defer nn.mu.Unlock()
	return nn.addrs[id], nil
}
