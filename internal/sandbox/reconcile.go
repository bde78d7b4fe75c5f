package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// instanceFile in the data dir holds the instance id: the label that marks
// what this data dir's daemon owns on a backend several daemons may share.
const instanceFile = "instance"

var validInstance = regexp.MustCompile(`^[a-f0-9]{16,64}$`)

// ReadInstance returns the instance id in dataDir, "" when it has none.
func ReadInstance(dataDir string) (string, error) {
	p := filepath.Join(dataDir, instanceFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read instance id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if !ValidInstance(id) {
		return "", fmt.Errorf("read instance id %s: %q is not 16-64 hex digits; remove the file to make a new one (boxes labelled with the old id are then left alone)", p, id)
	}
	return id, nil
}

// ValidInstance reports whether id is an instance id.
func ValidInstance(id string) bool { return validInstance.MatchString(id) }

// NewInstance makes a new instance id.
func NewInstance() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// loadInstance returns the data dir's instance id, making one the first
// time.
func loadInstance(dataDir string) (string, error) {
	id, err := ReadInstance(dataDir)
	if err != nil || id != "" {
		return id, err
	}
	id = NewInstance()
	return id, WriteInstance(dataDir, id)
}

// WriteInstance writes id as dataDir's instance id, by rename so a crash
// never leaves half an id.
func WriteInstance(dataDir, id string) error {
	p := filepath.Join(dataDir, instanceFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("write instance id: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("write instance id: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write instance id: %w", err)
	}
	return nil
}

// Instance returns this daemon's instance id (empty before Recover).
func (m *Manager) Instance() string { return m.life.instance }

// ensureInstance loads the instance id once (Options.Instance, else the
// data dir's); Recover calls it first, and Create labels boxes with it.
func (m *Manager) ensureInstance() error {
	if m.life.instance != "" {
		return nil
	}
	if m.opts.Instance != "" {
		if !ValidInstance(m.opts.Instance) {
			return fmt.Errorf("instance id %q is not 16-64 hex digits", m.opts.Instance)
		}
		m.life.instance = m.opts.Instance
		return nil
	}
	if m.opts.DataDir == "" {
		return nil
	}
	id, err := loadInstance(m.opts.DataDir)
	if err != nil {
		return err
	}
	m.life.instance = id
	return nil
}

// afterRecover is the part of Recover that goes beyond the records: the
// orphans of this instance.
func (m *Manager) afterRecover(ctx context.Context) error {
	m.reconcileOrphans(ctx, time.Now().UTC())
	return nil
}

// reconcileOrphans reports boxes and volumes of this instance that have no
// record, and removes them once their grace is over.
//
// A create puts its record before it makes the box, and a teardown removes
// the box before it deletes the record, both under the sandbox's lock. The
// list of the backend is older than the look-ups of the records that
// follow it, though: a failed create whose teardown finished in between
// (a pool refill whose pod could not be scheduled) is in the list and has
// no record any more. So an id without a record is an orphan only once it
// is found again under its lock, which no create or teardown holds then,
// in a list taken after the look-up; one whose lock is held is in flight
// and is looked at next round.
func (m *Manager) reconcileOrphans(ctx context.Context, now time.Time) {
	lister, ok := m.drv.(driver.InstanceLister)
	if !ok || m.life.instance == "" {
		return
	}
	owned, err := lister.ListOwned(ctx, m.life.instance)
	if err != nil {
		m.log.Warn("reconcile: list owned boxes", "err", err)
		return
	}
	l := m.life
	seen := map[string]bool{}
	defer func() {
		l.mu.Lock()
		for id := range l.orphans {
			if !seen[id] {
				delete(l.orphans, id)
			}
		}
		l.mu.Unlock()
	}()
	unlocks := map[string]func(){}
	defer func() {
		for _, unlock := range unlocks {
			unlock()
		}
	}()
	for _, id := range owned {
		if _, err := m.store.Get(ctx, id); err == nil {
			continue
		}
		unlock, ok := m.lockNow(ctx, id)
		if !ok {
			seen[id] = true // in flight: neither reported nor forgotten
			continue
		}
		if _, err := m.store.Get(ctx, id); err == nil {
			unlock() // a create made its record in between
			continue
		}
		unlocks[id] = unlock
	}
	if len(unlocks) == 0 {
		return
	}
	again, err := lister.ListOwned(ctx, m.life.instance)
	if err != nil {
		m.log.Warn("reconcile: list owned boxes", "err", err)
		for id := range unlocks {
			seen[id] = true
		}
		return
	}
	for _, id := range again {
		if unlocks[id] == nil {
			continue // not a candidate, or one that is gone
		}
		seen[id] = true
		l.mu.Lock()
		first, known := l.orphans[id]
		if !known {
			first = now
			l.orphans[id] = now
		}
		l.mu.Unlock()
		if !known {
			m.log.Warn("found a box or volume of this daemon with no record", "sandbox", id, "grace", l.opts.OrphanGrace)
			m.Event(ctx, id, wire.SandboxEventOrphanFound,
				fmt.Sprintf("a box or volume with no record; removed after %s unless a record appears", l.opts.OrphanGrace), nil)
		}
		if now.Sub(first) < l.opts.OrphanGrace {
			continue
		}
		// Still under the sandbox's lock, taken with no record.
		if err := m.drv.Destroy(ctx, id); err != nil {
			m.log.Error("remove orphan", "sandbox", id, "err", err)
			continue
		}
		_ = os.RemoveAll(filepath.Join(m.opts.DataDir, "sandboxes", id))
		m.log.Info("removed orphan", "sandbox", id)
		m.Event(ctx, id, wire.SandboxEventOrphanRemoved, "removed a box and volume that had no record", nil)
		seen[id] = false
	}
}

// reconcileLoop compares the records with the backend every few seconds
// and at once when kicked (an engine event said a box died).
func (m *Manager) reconcileLoop(ctx context.Context, kick <-chan struct{}) {
	tick := time.NewTicker(m.life.opts.ReconcileInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-kick:
		}
		m.reconcile(ctx)
	}
}

// reconcile notices an engine that went away and came back, boxes killed,
// paused or removed behind the daemon's back, and orphans.
func (m *Manager) reconcile(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := m.probeEngine(pctx)
	cancel()
	l := m.life
	if err != nil {
		l.mu.Lock()
		was := l.engineDown
		l.engineDown = true
		l.mu.Unlock()
		if !was && ctx.Err() == nil {
			m.log.Warn("the container engine does not answer; sandboxes are reconciled when it is back", "err", err)
		}
		return
	}
	l.mu.Lock()
	restarted := l.engineDown
	l.engineDown = false
	l.mu.Unlock()
	if restarted {
		m.log.Info("the container engine is back; reconciling sandboxes", "policy", l.opts.EngineRestartPolicy)
	}
	recs, err := m.store.List(ctx, store.Filter{})
	if err != nil {
		m.log.Warn("reconcile: list sandboxes", "err", err)
		return
	}
	starts := m.newStartCheck(ctx)
	var boxes boxListing
	for _, sb := range recs {
		if sb.State == wire.StateDestroyed {
			// A destroy answered whose removal failed (or is under way:
			// then its lock is held and it is left alone).
			if unlock, ok := m.lockNow(ctx, sb.ID); ok {
				if cur, err := m.store.Get(ctx, sb.ID); err == nil && cur.State == wire.StateDestroyed {
					m.finishDestroy(ctx, sb.ID)
				}
				unlock()
			}
			continue
		}
		if sb.State == wire.StateCreating && sb.Pool == "" {
			if _, _, ok := m.set(); ok {
				m.reconcileCreate(ctx, sb.ID)
			}
			continue
		}
		if sb.State == wire.StateStopped && sb.Pool == "" {
			if starts != nil {
				m.reconcileStart(ctx, starts, sb.ID)
			}
			m.reconcileStopped(ctx, &boxes, sb.ID)
			continue
		}
		if sb.State != wire.StateRunning && sb.State != wire.StatePaused {
			continue
		}
		m.reconcileOne(ctx, sb.ID, restarted)
	}
	m.reconcileOrphans(ctx, time.Now().UTC())
}

// boxListing is the driver's listing of boxes, read at most once a
// reconcile pass and only when a stopped record needs it.
type boxListing struct {
	read bool
	ids  map[string]bool
	err  error
}

func (l *boxListing) has(ctx context.Context, drv driver.Driver, id string) (bool, error) {
	if !l.read {
		l.read = true
		var sts []driver.Status
		if sts, l.err = drv.List(ctx); l.err == nil {
			l.ids = make(map[string]bool, len(sts))
			for _, st := range sts {
				l.ids[st.ID] = true
			}
		}
	}
	return l.ids[id], l.err
}

// reconcileStopped marks a stopped sandbox whose box was removed behind
// the daemon's back, as Recover does at a start: a box removed by force
// (docker rm -f) is killed first, and a pass that sees it in between
// records it stopped (exit 137), after which nothing looked at it again
// and its record claimed a box that a start would not find. One listing
// a pass finds the candidates; Inspect, under the sandbox's lock, makes
// sure.
func (m *Manager) reconcileStopped(ctx context.Context, boxes *boxListing, id string) {
	if listed, err := boxes.has(ctx, m.drv, id); err != nil || listed {
		return
	}
	unlock, ok := m.lockNow(ctx, id)
	if !ok {
		return
	}
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil || sb.State != wire.StateStopped || sb.Pool != "" {
		return
	}
	st, err := m.drv.Inspect(ctx, id)
	if err != nil || st.State != driver.BoxMissing {
		return
	}
	reason := "its container was removed behind the daemon's back"
	m.log.Warn("box of stopped sandbox vanished", "sandbox", id)
	if _, err := m.setState(ctx, sb, wire.StateError, reason); err == nil {
		m.Event(ctx, id, wire.SandboxEventError, reason, nil)
	}
}

// probeEngine asks whether the engine answers a new connection. A driver
// that cannot tell is asked for its Info, which may answer on a pooled
// connection while the engine shuts down (see driver.Prober).
func (m *Manager) probeEngine(ctx context.Context) error {
	if p, ok := m.drv.(driver.Prober); ok {
		return p.Probe(ctx)
	}
	_, err := m.drv.Info(ctx)
	return err
}

// engineWentDown probes the engine again and, if it no longer answers,
// records it as down. A stopped box is the first sign of an engine
// shutdown when the shutdown began after the round's probe.
func (m *Manager) engineWentDown(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if m.probeEngine(pctx) == nil {
		return false
	}
	m.life.mu.Lock()
	m.life.engineDown = true
	m.life.mu.Unlock()
	return true
}

// lockNow takes sandbox id's lock only if nobody holds it: a sandbox in the
// middle of an operation is reconciled next round. With Options.Locks it
// asks the store once (bounded by lockNowTimeout), never waiting for
// another daemon's operation either.
func (m *Manager) lockNow(ctx context.Context, id string) (func(), bool) {
	unlock, ok := m.locks.TryLock(id)
	if !ok || m.opts.Locks == nil {
		return unlock, ok
	}
	ctx, cancel := context.WithTimeout(ctx, lockNowTimeout)
	defer cancel()
	release, ok, err := m.opts.Locks.TryLock(ctx, lockName(id))
	if err != nil {
		m.log.Warn("take a sandbox's lock in the store", "sandbox", id, "err", err)
	}
	if !ok {
		unlock()
		return nil, false
	}
	return func() { release(); unlock() }, true
}

// lockNowTimeout bounds lockNow's question to the store.
const lockNowTimeout = 5 * time.Second

// reconcileOne brings one running or paused record in line with its box.
func (m *Manager) reconcileOne(ctx context.Context, id string, engineRestarted bool) {
	unlock, ok := m.lockNow(ctx, id)
	if !ok {
		return
	}
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil || (sb.State != wire.StateRunning && sb.State != wire.StatePaused) {
		return
	}
	st, err := m.drv.Inspect(ctx, id)
	if err != nil {
		return
	}
	log := m.log.With("sandbox", id)
	switch {
	case st.State == driver.BoxMissing:
		reason := "its container was removed behind the daemon's back"
		log.Warn("box vanished", "recorded", sb.State)
		m.closeConn(id)
		if _, err := m.setState(ctx, sb, wire.StateError, reason); err == nil {
			m.Event(ctx, id, wire.SandboxEventError, reason, nil)
		}
	case st.State == driver.BoxStopped && !engineRestarted && m.engineWentDown(ctx):
		// Stopped by an engine on its way down, after this round's probe:
		// the round after it is back applies the engine restart policy.
		log.Info("box stopped while the container engine goes down")
	case st.State == driver.BoxStopped && engineRestarted && m.life.opts.EngineRestartPolicy == EngineRestartRestart:
		log.Info("restarting a sandbox the engine restart stopped")
		m.Event(ctx, id, wire.SandboxEventEngineRestart, "the container engine restarted; starting the sandbox again", nil)
		conn, err := m.listen(id)
		if err == nil {
			if err = m.drv.Start(ctx, id); err == nil {
				// As in Start: the box may have come back with another
				// address, and its rules are keyed on the address.
				if err = m.applyEgress(ctx, sb); err == nil {
					err = m.waitAgent(ctx, id, conn)
				}
			}
		}
		if err != nil {
			reason := "the container engine restarted and the sandbox could not be started again: " + err.Error()
			if _, serr := m.setState(ctx, sb, wire.StateError, reason); serr == nil {
				m.Event(ctx, id, wire.SandboxEventError, reason, nil)
			}
			return
		}
		m.Touch(id)
		if _, err := m.setState(ctx, sb, wire.StateRunning, ""); err == nil {
			m.Event(ctx, id, wire.SandboxEventStarted, "started again after the container engine restarted", nil)
		}
	case st.State == driver.BoxStopped:
		reason := fmt.Sprintf("its container exited with code %d behind the daemon's back", st.ExitCode)
		typ := wire.SandboxEventStopped
		switch {
		case st.OOMKilled:
			reason, typ = "killed: out of memory", wire.SandboxEventOOMKilled
		case engineRestarted:
			reason = "the container engine restarted"
		}
		log.Warn("box stopped behind the daemon's back", "reason", reason)
		// Requests waiting for its agent to come back fail now instead of
		// at their deadline; Start listens anew.
		m.closeConn(id)
		if _, err := m.setState(ctx, sb, wire.StateStopped, reason); err == nil {
			m.Event(ctx, id, typ, reason, map[string]string{"exitCode": fmt.Sprint(st.ExitCode)})
		}
	case st.State == driver.BoxPaused && sb.State == wire.StateRunning:
		if _, err := m.setState(ctx, sb, wire.StatePaused, "paused behind the daemon's back"); err == nil {
			m.Event(ctx, id, wire.SandboxEventPaused, "paused behind the daemon's back", nil)
		}
	case st.State == driver.BoxRunning && sb.State == wire.StatePaused:
		if _, err := m.setState(ctx, sb, wire.StateRunning, ""); err == nil {
			m.Event(ctx, id, wire.SandboxEventResumed, "resumed behind the daemon's back", nil)
		}
	}
}

// watchBackend follows the backend's live events: an OOM kill is logged as
// an event, a box that died triggers a reconcile at once, and a broken
// stream (the engine went away) marks the engine as down so that the
// reconcile after it treats stopped boxes as casualties of a restart.
func (m *Manager) watchBackend(ctx context.Context, kick chan<- struct{}) {
	w, ok := m.drv.(driver.EventWatcher)
	if !ok || m.life.instance == "" {
		return
	}
	for ctx.Err() == nil {
		err := w.WatchEvents(ctx, m.life.instance, func(ev driver.BoxEvent) {
			switch ev.Type {
			case "oom":
				m.Event(ctx, ev.ID, wire.SandboxEventOOMKilled, "a process in the sandbox was killed: out of memory", nil)
			case "die":
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		m.life.mu.Lock()
		m.life.engineDown = true
		m.life.mu.Unlock()
		m.log.Debug("engine event stream broke; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}
