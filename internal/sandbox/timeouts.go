package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// maxTimeoutSeconds keeps deadlines far inside time.Duration's range.
const maxTimeoutSeconds = 100 * 365 * 24 * 3600

func validAction(a string) bool {
	return a == wire.ActionStop || a == wire.ActionPause || a == wire.ActionDestroy
}

func checkSeconds(field string, v int64) error {
	if v < 0 {
		return errdefs.Invalid(field, "must not be negative (0 turns the timeout off), got %d", v)
	}
	if v > maxTimeoutSeconds {
		return errdefs.Invalid(field, "must be at most %d seconds (100 years), got %d", maxTimeoutSeconds, v)
	}
	return nil
}

func checkAction(field, a string) error {
	if a != "" && !validAction(a) {
		return errdefs.Invalid(field, "must be stop, pause or destroy, got %q", a)
	}
	return nil
}

// ValidateTimeouts checks the timeouts of a create request; prefix names
// the field in errors ("timeouts").
func ValidateTimeouts(prefix string, t *wire.Timeouts) error {
	if t == nil {
		return nil
	}
	if err := checkSeconds(prefix+".idleSeconds", t.IdleSeconds); err != nil {
		return err
	}
	if err := checkAction(prefix+".idleAction", t.IdleAction); err != nil {
		return err
	}
	if err := checkSeconds(prefix+".maxLifetimeSeconds", t.MaxLifetimeSeconds); err != nil {
		return err
	}
	return checkAction(prefix+".lifetimeAction", t.LifetimeAction)
}

// ValidateSetTimeouts checks the body of POST .../timeouts.
func ValidateSetTimeouts(req wire.SetTimeoutsRequest) error {
	if req.IdleSeconds == nil && req.IdleAction == nil && req.MaxLifetimeSeconds == nil &&
		req.LifetimeAction == nil && req.ExtendSeconds == nil {
		return errdefs.Invalid("body", "set at least one of idleSeconds, idleAction, maxLifetimeSeconds, lifetimeAction, extendSeconds")
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"idleSeconds", req.IdleSeconds}, {"maxLifetimeSeconds", req.MaxLifetimeSeconds}, {"extendSeconds", req.ExtendSeconds}} {
		if f.v != nil {
			if err := checkSeconds(f.name, *f.v); err != nil {
				return err
			}
		}
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"idleAction", req.IdleAction}, {"lifetimeAction", req.LifetimeAction}} {
		if f.v != nil && !validAction(*f.v) {
			return errdefs.Invalid(f.name, "must be stop, pause or destroy, got %q", *f.v)
		}
	}
	return nil
}

// checkCanPause refuses a pause timeout action on a driver that cannot
// pause (driver.Pauser): the timeout would fire, fail, and leave the
// sandbox running past it. prefix names the request's field.
func (m *Manager) checkCanPause(prefix string, t *wire.SandboxTimeouts) error {
	if _, ok := m.drv.(driver.Pauser); ok || t == nil {
		return nil
	}
	for _, f := range []struct {
		name, action string
		secs         int64
	}{{"idleAction", t.IdleAction, t.IdleSeconds}, {"lifetimeAction", t.LifetimeAction, t.MaxLifetimeSeconds}} {
		if f.action == wire.ActionPause && f.secs > 0 {
			return fmt.Errorf("%s%s pause: the driver cannot pause sandboxes, so the timeout could not act; use stop or destroy: %w",
				prefix, f.name, errdefs.ErrNotImplemented)
		}
	}
	return nil
}

// initialTimeouts resolves a create request's timeouts against the daemon
// defaults. A request that sets a timeout's seconds without its action gets
// the default action.
func (m *Manager) initialTimeouts(req *wire.Timeouts, created time.Time) *wire.SandboxTimeouts {
	def := m.life.opts.DefaultTimeouts
	t := &wire.SandboxTimeouts{
		IdleSeconds: def.IdleSeconds, IdleAction: def.IdleAction,
		MaxLifetimeSeconds: def.MaxLifetimeSeconds, LifetimeAction: def.LifetimeAction,
		LastActivityAt: created,
	}
	if req != nil {
		t.IdleSeconds, t.MaxLifetimeSeconds = req.IdleSeconds, req.MaxLifetimeSeconds
		if req.IdleAction != "" {
			t.IdleAction = req.IdleAction
		}
		if req.LifetimeAction != "" {
			t.LifetimeAction = req.LifetimeAction
		}
	}
	if t.MaxLifetimeSeconds > 0 {
		exp := created.Add(time.Duration(t.MaxLifetimeSeconds) * time.Second)
		t.ExpiresAt = &exp
	}
	return t
}

// SetTimeouts changes a sandbox's timeouts or extends its lifetime. A new
// maxLifetimeSeconds counts from the sandbox's creation; extendSeconds
// moves the current deadline (or now, if it passed) later. Either counts as
// activity.
func (m *Manager) SetTimeouts(ctx context.Context, id string, req wire.SetTimeoutsRequest) (wire.Sandbox, error) {
	if err := ValidateSetTimeouts(req); err != nil {
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
	if sb.State == wire.StateCreating {
		return sb, fmt.Errorf("sandbox %s is %s; its timeouts can be changed once it is running: %w", id, sb.State, errdefs.ErrConflict)
	}
	t := sb.Timeouts
	if t == nil {
		t = m.initialTimeouts(nil, sb.CreatedAt)
		t.ExpiresAt = nil
		t.MaxLifetimeSeconds = 0
	}
	now := time.Now().UTC()
	if req.IdleSeconds != nil {
		t.IdleSeconds = *req.IdleSeconds
	}
	if req.IdleAction != nil {
		t.IdleAction = *req.IdleAction
	}
	if req.LifetimeAction != nil {
		t.LifetimeAction = *req.LifetimeAction
	}
	if req.MaxLifetimeSeconds != nil {
		t.MaxLifetimeSeconds = *req.MaxLifetimeSeconds
		t.ExpiresAt = nil
		if t.MaxLifetimeSeconds > 0 {
			exp := sb.CreatedAt.Add(time.Duration(t.MaxLifetimeSeconds) * time.Second)
			t.ExpiresAt = &exp
		}
	}
	if req.ExtendSeconds != nil && *req.ExtendSeconds > 0 {
		base := now
		if t.ExpiresAt != nil && t.ExpiresAt.After(now) {
			base = *t.ExpiresAt
		}
		// With no lifetime (or one that already fired) extending starts one
		// from now; either way maxLifetimeSeconds stays "expiresAt - createdAt".
		exp := base.Add(time.Duration(*req.ExtendSeconds) * time.Second)
		t.ExpiresAt = &exp
		t.MaxLifetimeSeconds = int64((exp.Sub(sb.CreatedAt) + time.Second - 1) / time.Second)
	}
	if err := m.checkCanPause("", t); err != nil {
		return sb, err
	}
	t.IdleDeadline = nil
	sb.Timeouts = t
	sb.UpdatedAt = now
	if err := m.store.Put(ctx, sb); err != nil {
		return sb, fmt.Errorf("record timeouts of sandbox %s: %w", id, err)
	}
	m.Touch(id)
	return m.withDeadlines(sb), nil
}

// lastActivity is the latest of what the daemon saw in memory, what was
// persisted (by this or an earlier daemon) and the record's own changes.
func (m *Manager) lastActivity(sb wire.Sandbox) time.Time {
	last := sb.UpdatedAt
	if sb.CreatedAt.After(last) {
		last = sb.CreatedAt
	}
	if sb.Timeouts != nil && sb.Timeouts.LastActivityAt.After(last) {
		last = sb.Timeouts.LastActivityAt
	}
	if t := m.life.activity.seen(sb.ID); t.After(last) {
		last = t
	}
	return last
}

// withDeadlines fills in the computed parts of sb.Timeouts.
func (m *Manager) withDeadlines(sb wire.Sandbox) wire.Sandbox {
	if sb.Timeouts == nil {
		return sb
	}
	t := *sb.Timeouts
	t.LastActivityAt = m.lastActivity(sb)
	t.IdleDeadline = nil
	if t.IdleSeconds > 0 && sb.State == wire.StateRunning {
		d := t.LastActivityAt.Add(time.Duration(t.IdleSeconds) * time.Second)
		if m.life.activity.busy(sb.ID) {
			// Busy right now: the deadline is at least a full period away.
			d = time.Now().UTC().Add(time.Duration(t.IdleSeconds) * time.Second)
		}
		t.IdleDeadline = &d
	}
	sb.Timeouts = &t
	return sb
}

// withDeadlinesErr is withDeadlines for a (sandbox, error) result.
func (m *Manager) withDeadlinesErr(sb wire.Sandbox, err error) (wire.Sandbox, error) {
	if err != nil {
		return sb, err
	}
	return m.withDeadlines(sb), nil
}
