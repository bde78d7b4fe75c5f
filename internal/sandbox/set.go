package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// Several daemons on one store (a set) each create sandboxes, so a record
// in "creating" is not always a crash's leftover: it may be a create in
// flight on another daemon. Each create records which daemon makes it
// (store.PutCreating), and a create is rolled back only by
//
//   - its own daemon, at its start (Recover): a daemon has no create in
//     flight before it serves, so what it finds of its own is what it was
//     doing when it died;
//   - any daemon, at its start or as the leader's reconciler, once the
//     creating daemon is gone: not registered, or its heartbeat older than
//     the registry's bound (Peers.Alive). A SIGKILLed daemon's half-made
//     sandbox is so removed by a survivor, without waiting for the dead
//     one to come back.
//
// A record with no creator was written by a daemon before creators were
// recorded, whose creates cannot still be running: it is a leftover too.

// Peers is the registry of the daemons sharing the store, as the manager
// uses it.
type Peers interface {
	// Self is this daemon's id in the registry.
	Self() string
	// Alive reports whether daemon id is registered and its heartbeat
	// recent.
	Alive(ctx context.Context, id string) (bool, error)
}

// creatorStore is the store's record of which daemon creates a sandbox;
// *store.Store has it.
type creatorStore interface {
	PutCreating(ctx context.Context, sb wire.Sandbox, daemon string) error
	PutStarting(ctx context.Context, id, daemon string) error
	Starters(ctx context.Context) (map[string]string, error)
	ClearStarter(ctx context.Context, id, daemon string) error
	Creator(ctx context.Context, id string) (string, error)
}

var _ creatorStore = (*store.Store)(nil)

// set returns the peers and the creators' store when this daemon is one
// of a set; ok is false for a daemon alone on its store.
func (m *Manager) set() (Peers, creatorStore, bool) {
	cs, ok := m.store.(creatorStore)
	if m.opts.Peers == nil || !ok {
		return nil, nil, false
	}
	return m.opts.Peers, cs, true
}

// fixesByLeader says whether Recover's fixes of the records (a vanished
// box marked, a state found changed, a destroy finished) are the
// leader's: on a set under an Elector, so that of daemons starting at
// once only one makes each fix and emits its event.
func (m *Manager) fixesByLeader() bool {
	_, _, ok := m.set()
	return ok && m.opts.Elector != nil
}

// putCreating writes the record of a create that starts (a new sandbox, a
// claimed pooled box), with this daemon as its creator on a set.
func (m *Manager) putCreating(ctx context.Context, sb wire.Sandbox) error {
	if p, cs, ok := m.set(); ok {
		return cs.PutCreating(ctx, sb, p.Self())
	}
	return m.store.Put(ctx, sb)
}

// leftoverCreate decides whether a record in "creating" whose create was
// started by creator ("" when unrecorded) is a crash's leftover this
// daemon (self) may roll back: atStart is Recover, before this daemon
// serves; creatorAlive is the registry's word on creator.
func leftoverCreate(creator, self string, atStart, creatorAlive bool) bool {
	switch creator {
	case self:
		return atStart
	case "":
		return true
	default:
		return !creatorAlive
	}
}

// unfinishedCreate reports whether sandbox id, a record in "creating", is
// a crash's leftover to roll back, and who created it. A daemon alone on
// its store finds only leftovers at its start and never rolls a create
// back later.
func (m *Manager) unfinishedCreate(ctx context.Context, id string, atStart bool) (leftover bool, creator string, err error) {
	p, cs, ok := m.set()
	if !ok {
		return atStart, "", nil
	}
	creator, err = cs.Creator(ctx, id)
	if err != nil {
		return false, "", err
	}
	alive := false
	if creator != "" && creator != p.Self() {
		if alive, err = p.Alive(ctx, creator); err != nil {
			return false, creator, fmt.Errorf("is daemon %q alive: %w", creator, err)
		}
	}
	return leftoverCreate(creator, p.Self(), atStart, alive), creator, nil
}

// rollBackCreate removes what an unfinished create of sb left.
func (m *Manager) rollBackCreate(ctx context.Context, id, creator, why string) {
	log := m.log.With("sandbox", id)
	log.Warn("rolling back "+why, "creator", creator)
	if err := m.teardown(ctx, id); err != nil {
		log.Error("roll back unfinished create", "err", err)
		return
	}
	m.Event(ctx, id, wire.SandboxEventDestroyed, "rolled back "+why, nil)
}

// reconcileCreate is the leader's look at a record in "creating" on a
// set: a create whose daemon died after this one started is rolled back
// here, as the dead daemon's Recover would have.
func (m *Manager) reconcileCreate(ctx context.Context, id string) {
	unlock, ok := m.lockNow(ctx, id)
	if !ok {
		return // a create in flight on this daemon
	}
	defer unlock()
	leftover, creator, err := m.unfinishedCreate(ctx, id, false)
	if err != nil {
		m.log.Warn("reconcile: who creates the sandbox", "sandbox", id, "err", err)
		return
	}
	if !leftover {
		return
	}
	// Still the same create: the record may have moved on (finished,
	// destroyed) since the listing.
	cur, err := m.store.Get(ctx, id)
	if err != nil || cur.State != wire.StateCreating || cur.Pool != "" {
		return
	}
	m.rollBackCreate(ctx, id, creator, "a create whose daemon is gone")
}

// recoverRecords is the part of Recover that fixes records on a set, run
// by the leader each time it starts to lead: a record whose box vanished
// is marked, one whose box's state or runtime changed follows the box,
// and destroys and dead daemons' creates left unfinished are finished by
// the reconciler's first pass. It takes each sandbox's lock only if free
// (lockNow: with Options.Locks the store's too) and reads the record
// again under it, so an operation in flight is left alone.
func (m *Manager) recoverRecords(ctx context.Context) {
	recs, err := m.store.List(ctx, store.Filter{})
	if err != nil {
		m.log.Warn("recover as the leader: list sandboxes", "err", err)
		return
	}
	for _, sb := range recs {
		if ctx.Err() != nil {
			return
		}
		if sb.Pool != "" || sb.State == wire.StateCreating || sb.State == wire.StateDestroyed {
			continue
		}
		unlock, ok := m.lockNow(ctx, sb.ID)
		if !ok {
			continue
		}
		cur, err := m.store.Get(ctx, sb.ID)
		if err == nil && cur.State != wire.StateCreating && cur.State != wire.StateDestroyed {
			var st driver.Status
			if st, err = m.drv.Inspect(ctx, cur.ID); err == nil {
				err = m.fixRecord(ctx, cur, st, false)
			}
		}
		unlock()
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) && ctx.Err() == nil {
			m.log.Warn("recover as the leader", "sandbox", sb.ID, "err", err)
		}
	}
}

// putStarting records, on a set, this daemon as the one starting sandbox
// id, before its box starts: a start writes its record only at its end, so
// a daemon that dies in between leaves a record "stopped" over a running
// box, which reconcileStart puts right once this daemon is gone.
func (m *Manager) putStarting(ctx context.Context, id string) error {
	if p, cs, ok := m.set(); ok {
		return cs.PutStarting(ctx, id, p.Self())
	}
	return nil
}

// startedElsewhere refuses, on a set, the session of an agent whose
// sandbox another live daemon is creating or starting (its record not yet
// running, that daemon recorded as its starter): that daemon waits for the
// agent, and one that came here instead, to a route this daemon kept or
// took for the sandbox before it stopped, was lost to it until its ready
// timeout. Refused, the agent dials the next daemon of its list. A store
// that does not answer refuses nothing.
func (m *Manager) startedElsewhere(ctx context.Context, id string) error {
	p, cs, ok := m.set()
	if !ok {
		return nil
	}
	sb, err := m.store.Get(ctx, id)
	if err != nil || sb.State != wire.StateCreating && sb.State != wire.StateStopped {
		return nil
	}
	starter, err := cs.Creator(ctx, id)
	if err != nil || starter == "" || starter == p.Self() {
		return nil
	}
	if alive, err := p.Alive(ctx, starter); err != nil || !alive {
		return nil
	}
	return fmt.Errorf("sandbox %s is being started by daemon %s, which waits for its agent: %w", id, starter, errdefs.ErrConflict)
}

// startCheck is what one reconcile pass knows of the starts on a set: the
// daemon recorded as starting (or creating) each sandbox, read once, and
// which of them are alive, asked once each.
type startCheck struct {
	starters map[string]string
	alive    map[string]bool
}

// newStartCheck reads the starters for one pass; nil when this daemon is
// alone on its store or the store does not answer.
func (m *Manager) newStartCheck(ctx context.Context) *startCheck {
	_, cs, ok := m.set()
	if !ok {
		return nil
	}
	starters, err := cs.Starters(ctx)
	if err != nil {
		m.log.Warn("reconcile: list the sandboxes' starters", "err", err)
		return nil
	}
	return &startCheck{starters: starters, alive: map[string]bool{}}
}

// gone reports whether daemon d, another than this one, is gone.
func (c *startCheck) gone(ctx context.Context, p Peers, d string) (bool, error) {
	alive, ok := c.alive[d]
	if !ok {
		var err error
		if alive, err = p.Alive(ctx, d); err != nil {
			return false, err
		}
		c.alive[d] = alive
	}
	return !alive, nil
}

// reconcileStart is the leader's look at a stopped record on a set: a
// start whose daemon died between starting the box and recording it
// running leaves the box running (or paused) under a record "stopped",
// which no daemon takes the agent of (AdoptRoute). Once the daemon that
// started it is gone — by the rule of creates: not registered, or its
// heartbeat old; never while it lives, and never this daemon, whose own
// cut-off starts its Recover puts right — the record follows the box, as
// Recover's fixes do, and the sandbox's egress policy is put in force. A
// gone starter's sandbox whose box is stopped is forgotten as started
// (store.ClearStarter), so that it costs no look at the backend on the
// next passes; a stopped sandbox with no starter is not looked at (a
// start on a set always records its daemon first). Under the sandbox's
// lock taken only if free (with Options.Locks the store's too, which the
// dead daemon's start held until its lease lapsed), so a start in flight
// anywhere is left alone.
func (m *Manager) reconcileStart(ctx context.Context, c *startCheck, id string) {
	p, cs, _ := m.set()
	starter := c.starters[id]
	if starter == "" || starter == p.Self() {
		return
	}
	if gone, err := c.gone(ctx, p, starter); err != nil || !gone {
		if err != nil {
			m.log.Warn("reconcile: is the starting daemon alive", "sandbox", id, "starter", starter, "err", err)
		}
		return
	}
	unlock, ok := m.lockNow(ctx, id)
	if !ok {
		return
	}
	defer unlock()
	// Again under the lock: the record and the start may have moved on.
	cur, err := m.store.Get(ctx, id)
	if err != nil || cur.State != wire.StateStopped || cur.Pool != "" {
		return
	}
	if now, err := cs.Creator(ctx, id); err != nil || now != starter {
		return
	}
	st, err := m.drv.Inspect(ctx, id)
	if err != nil {
		return
	}
	if st.State != driver.BoxRunning && st.State != driver.BoxPaused {
		// Nothing to put right: the start died before its box started,
		// or the box stopped since.
		if err := cs.ClearStarter(ctx, id, starter); err != nil {
			m.log.Warn("reconcile: forget a gone daemon's start", "sandbox", id, "err", err)
		}
		return
	}
	m.log.Warn("putting right a start whose daemon is gone", "sandbox", id, "starter", starter, "box", st.State)
	if err := m.fixRecord(ctx, cur, st, false); err != nil {
		m.log.Warn("reconcile: a start whose daemon is gone", "sandbox", id, "err", err)
		return
	}
	if err := m.applyEgress(ctx, cur); err != nil {
		// The network's default drop stays in force.
		m.log.Error("reconcile: egress of a start whose daemon is gone", "sandbox", id, "err", err)
	}
}

// ownCutStart reports, at Recover on a set, whether sb is a start this
// daemon was making when it died (its record stopped, its box up, and this
// daemon recorded as its starter): no other daemon puts it right while
// this one, back with the same id, is alive, so its Recover does.
func (m *Manager) ownCutStart(ctx context.Context, sb wire.Sandbox, st driver.Status) bool {
	if sb.State != wire.StateStopped || (st.State != driver.BoxRunning && st.State != driver.BoxPaused) {
		return false
	}
	p, cs, ok := m.set()
	if !ok {
		return false
	}
	c, err := cs.Creator(ctx, sb.ID)
	return err == nil && c == p.Self()
}
