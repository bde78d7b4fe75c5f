package sandbox

import (
	"context"
	"fmt"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Pause freezes a running sandbox with its memory: its processes stop
// where they are and continue on Resume.
func (m *Manager) Pause(ctx context.Context, id string) (wire.Sandbox, error) {
	p, ok := m.drv.(driver.Pauser)
	if !ok {
		return wire.Sandbox{}, fmt.Errorf("pause sandbox %s: the driver cannot pause: %w", id, errdefs.ErrNotImplemented)
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
	if noop, err := checkTransition(id, sb.State, OpPause); err != nil || noop {
		return m.withDeadlines(sb), err
	}
	// The transition finishes even if its caller hangs up; the daemon's
	// shutdown waits for it.
	ctx, end, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return sb, err
	}
	defer end()
	if err := p.Pause(ctx, id); err != nil {
		return sb, fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	sb, err = m.setState(ctx, sb, wire.StatePaused, "")
	if err != nil {
		return sb, err
	}
	m.Event(ctx, id, wire.SandboxEventPaused, "", nil)
	return m.withDeadlines(sb), nil
}

// Resume thaws a paused sandbox. Its agent session may have timed out while
// it was frozen; Resume waits until the agent answers again.
func (m *Manager) Resume(ctx context.Context, id string) (wire.Sandbox, error) {
	p, ok := m.drv.(driver.Pauser)
	if !ok {
		return wire.Sandbox{}, fmt.Errorf("resume sandbox %s: the driver cannot pause: %w", id, errdefs.ErrNotImplemented)
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
	if noop, err := checkTransition(id, sb.State, OpResume); err != nil || noop {
		return m.withDeadlines(sb), err
	}
	// The transition finishes even if its caller hangs up; the daemon's
	// shutdown waits for it.
	ctx, end, err := m.opts.Ops.Detach(ctx)
	if err != nil {
		return sb, err
	}
	defer end()
	if err := p.Unpause(ctx, id); err != nil {
		return sb, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	conn, err := m.listen(id)
	if err != nil {
		return sb, err
	}
	if err := m.waitAgent(ctx, id, conn); err != nil {
		m.setError(ctx, id, "resume: "+err.Error())
		return sb, err
	}
	m.Touch(id)
	sb, err = m.setState(ctx, sb, wire.StateRunning, "")
	if err != nil {
		return sb, err
	}
	m.Event(ctx, id, wire.SandboxEventResumed, "", nil)
	return m.withDeadlines(sb), nil
}
