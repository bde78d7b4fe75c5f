package kubeegress

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/wire"
)

// Setter is the part of the Kubernetes driver the hook uses.
type Setter interface {
	// SetEgress replaces a sandbox's policy (record, NetworkPolicy, pod)
	// and waits for the node's controller to apply it.
	SetEgress(ctx context.Context, id string, p wire.EgressPolicy) error
}

// Hook is the daemon's egress hook (sandbox.EgressHook) on the Kubernetes
// driver: the policy goes into the box's spec (kubernetes.Spec.Egress, so
// that its pod carries it and its NetworkPolicy expresses it) and the pod
// is pinned to the node's resolver; the driver's start waits until the
// node's controller has applied it. The rules, counters and denials live
// on the node (Node), not in the daemon.
type Hook struct {
	Driver Setter
	// DefaultMode is the mode of a sandbox created without one.
	DefaultMode string
	// Resolver is the nodes' resolver address the pods' dnsConfig names.
	Resolver netip.Addr

	mu       sync.Mutex
	enforced map[string]bool
}

// Resolve validates p and fills in the default mode.
func (h *Hook) Resolve(p wire.EgressPolicy) (wire.EgressPolicy, error) {
	mode := h.DefaultMode
	if mode == "" {
		mode = wire.EgressOpen
	}
	pol, err := egress.ParsePolicy("egress", p, mode)
	if err != nil {
		return wire.EgressPolicy{}, err
	}
	return pol.Wire(), nil
}

// Prepare puts the policy and the resolver in the box's spec.
func (h *Hook) Prepare(spec *driver.Spec, p wire.EgressPolicy) {
	spec.Egress = &p
	if h.Resolver.IsValid() {
		spec.DNS = []netip.Addr{h.Resolver}
	}
}

func (h *Hook) mark(id string, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.enforced == nil {
		h.enforced = map[string]bool{}
	}
	if on {
		h.enforced[id] = true
	} else {
		delete(h.enforced, id)
	}
}

// Apply puts p in force for the running box id: its start already waited
// for the recorded policy, so this costs a few API calls and no wait when
// p is that policy.
func (h *Hook) Apply(ctx context.Context, id string, p wire.EgressPolicy) error {
	if err := h.Driver.SetEgress(ctx, id, p); err != nil {
		return err
	}
	h.mark(id, true)
	return nil
}

// Claim is Apply: a pooled pod's policy changes as any other's.
func (h *Hook) Claim(ctx context.Context, id string, p wire.EgressPolicy) error {
	return h.Apply(ctx, id, p)
}

// Release notes that the box stopped: its pod went, and the node's
// controller removes its rules when it sees that.
func (h *Hook) Release(ctx context.Context, id string) error {
	h.mark(id, false)
	return nil
}

// Forget is Release: the driver's destroy removes the NetworkPolicy.
func (h *Hook) Forget(ctx context.Context, id string) error {
	h.mark(id, false)
	return nil
}

// Prune does nothing: each node's controller removes the rules of pods
// that are gone.
func (h *Hook) Prune(ctx context.Context, keep []string) error { return nil }

// StatusReader is the driver's reading of what the node reported.
type StatusReader interface {
	EgressStatus(ctx context.Context, id string) (*wire.EgressStatus, error)
}

// Status reports the policy, whether the node applied it, and the node's
// last report of the counters, learned addresses and denials (published
// every kubeegress.StatusInterval when they change).
func (h *Hook) Status(id string, p wire.EgressPolicy) wire.EgressStatus {
	h.mu.Lock()
	on := h.enforced[id]
	h.mu.Unlock()
	out := wire.EgressStatus{Policy: p, Enforced: on, Resolved: []wire.EgressResolved{}, Denied: []wire.EgressDenial{}}
	r, ok := h.Driver.(StatusReader)
	if !on || !ok {
		return out
	}
	// The API's caller has no context here; one read of the pod.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := r.EgressStatus(ctx, id)
	if err != nil || st == nil {
		return out
	}
	st.Policy, st.Enforced = p, on
	if st.Resolved == nil {
		st.Resolved = []wire.EgressResolved{}
	}
	if st.Denied == nil {
		st.Denied = []wire.EgressDenial{}
	}
	return *st
}
