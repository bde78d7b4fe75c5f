package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// EgressHook is what the manager needs from the egress controller
// (internal/egress): it validates policies, puts new boxes on its network
// and keeps their firewall rules. Declared here, by its caller.
type EgressHook interface {
	// Resolve validates a policy and fills in the default mode.
	Resolve(p wire.EgressPolicy) (wire.EgressPolicy, error)
	// Prepare sets the network fields of a new box's spec.
	Prepare(spec *driver.Spec, p wire.EgressPolicy)
	// Apply puts p in force for a running box; a failure leaves the
	// previous rules in force.
	Apply(ctx context.Context, id string, p wire.EgressPolicy) error
	// Claim is Apply for a pooled box at its claim: the box has run
	// since its pooled rules went in, and what it met while pooled
	// (drops, denials) is not the claimer's.
	Claim(ctx context.Context, id string, p wire.EgressPolicy) error
	// Release removes the rules of a box that stopped.
	Release(ctx context.Context, id string) error
	// Forget removes the rules and the state of a destroyed sandbox.
	Forget(ctx context.Context, id string) error
	// Prune removes the rules of every sandbox not in keep.
	Prune(ctx context.Context, keep []string) error
	Status(id string, p wire.EgressPolicy) wire.EgressStatus
}

// egressPolicy resolves the policy of a new sandbox. Without a controller
// sandboxes have the engine's default network, which only mode open
// describes.
func (m *Manager) egressPolicy(req *wire.EgressPolicy) (*wire.EgressPolicy, error) {
	if m.opts.Egress == nil {
		if req != nil && req.Mode != "" && req.Mode != wire.EgressOpen {
			return nil, fmt.Errorf("egress mode %q: egress control is not enabled on this daemon: %w", req.Mode, errdefs.ErrUnavailable)
		}
		return nil, nil
	}
	var p wire.EgressPolicy
	if req != nil {
		p = *req
	}
	p, err := m.opts.Egress.Resolve(p)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

func (m *Manager) prepareEgress(spec *driver.Spec, sb wire.Sandbox) {
	if m.opts.Egress != nil && sb.Egress != nil {
		m.opts.Egress.Prepare(spec, *sb.Egress)
	}
}

// applyEgress puts a started box's policy in force. Sandboxes from before
// egress control (no policy) are left as they are.
func (m *Manager) applyEgress(ctx context.Context, sb wire.Sandbox) error {
	if m.opts.Egress == nil || sb.Egress == nil {
		return nil
	}
	if err := m.opts.Egress.Apply(ctx, sb.ID, *sb.Egress); err != nil {
		return fmt.Errorf("apply egress policy: %w", err)
	}
	return nil
}

// claimEgress puts a claimed box's policy in force.
func (m *Manager) claimEgress(ctx context.Context, sb wire.Sandbox) error {
	if m.opts.Egress == nil || sb.Egress == nil {
		return nil
	}
	if err := m.opts.Egress.Claim(ctx, sb.ID, *sb.Egress); err != nil {
		return fmt.Errorf("apply egress policy: %w", err)
	}
	return nil
}

func (m *Manager) releaseEgress(ctx context.Context, id string) {
	if m.opts.Egress == nil {
		return
	}
	if err := m.opts.Egress.Release(ctx, id); err != nil {
		m.log.Warn("remove egress rules of stopped sandbox", "sandbox", id, "err", err)
	}
}

func (m *Manager) forgetEgress(ctx context.Context, id string) error {
	if m.opts.Egress == nil {
		return nil
	}
	if err := m.opts.Egress.Forget(ctx, id); err != nil {
		return fmt.Errorf("remove egress rules: %w", err)
	}
	return nil
}

// recoverEgress rebuilds the rules of every running or paused sandbox
// after a daemon start and removes those of sandboxes that are gone.
func (m *Manager) recoverEgress(ctx context.Context) error {
	if m.opts.Egress == nil {
		return nil
	}
	recs, err := m.store.List(ctx, store.Filter{})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	var keep []string
	for _, sb := range recs {
		if sb.Egress == nil || (sb.State != wire.StateRunning && sb.State != wire.StatePaused) {
			continue
		}
		keep = append(keep, sb.ID)
		if err := m.applyEgress(ctx, sb); err != nil {
			// Its old rules (or the network's default drop) stay in force.
			m.log.Error("rebuild egress rules", "sandbox", sb.ID, "err", err)
		}
	}
	return m.opts.Egress.Prune(ctx, keep)
}

// SetEgress replaces the policy of a running sandbox. The rules change
// before the record does, so a failure leaves both as they were.
func (m *Manager) SetEgress(ctx context.Context, id string, p wire.EgressPolicy) (wire.Sandbox, error) {
	if m.opts.Egress == nil {
		return wire.Sandbox{}, fmt.Errorf("egress control is not enabled on this daemon: %w", errdefs.ErrUnavailable)
	}
	p, err := m.opts.Egress.Resolve(p)
	if err != nil {
		return wire.Sandbox{}, err
	}
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return wire.Sandbox{}, err
	}
	defer unlock()
	sb, err := m.getLive(ctx, id)
	if err != nil {
		return sb, err
	}
	if sb.State != wire.StateRunning {
		return sb, fmt.Errorf("sandbox %s is %s; egress rules can be changed only while it runs (start it first): %w", id, sb.State, errdefs.ErrConflict)
	}
	if sb.Egress == nil {
		return sb, fmt.Errorf("sandbox %s was created before egress control; recreate it to set a policy: %w", id, errdefs.ErrConflict)
	}
	// The transition finishes even if its caller hangs up; the daemon's
	// shutdown waits for it.
	ctx, end, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return sb, err
	}
	defer end()
	if err := m.opts.Egress.Apply(ctx, id, p); err != nil {
		return sb, err
	}
	sb.Egress = &p
	sb.UpdatedAt = time.Now().UTC()
	if err := m.store.Put(ctx, sb); err != nil {
		return sb, fmt.Errorf("record egress policy of sandbox %s: %w", id, err)
	}
	m.log.Info("egress policy changed", "sandbox", id, "mode", p.Mode, "entries", len(p.Allow))
	return sb, nil
}

// EgressStatus reports a sandbox's policy, counters and recent denials.
func (m *Manager) EgressStatus(ctx context.Context, id string) (wire.EgressStatus, error) {
	sb, err := m.getLive(ctx, id)
	if err != nil {
		return wire.EgressStatus{}, err
	}
	if m.opts.Egress == nil || sb.Egress == nil {
		return wire.EgressStatus{Policy: wire.EgressPolicy{Mode: wire.EgressOpen}, Resolved: []wire.EgressResolved{}, Denied: []wire.EgressDenial{}}, nil
	}
	return m.opts.Egress.Status(id, *sb.Egress), nil
}
