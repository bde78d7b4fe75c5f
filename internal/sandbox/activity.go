package sandbox

import (
	"sync"
	"time"
)

// activity tracks, per sandbox, the last time something used it and how
// many long calls (exec streams, terminals, tunnels, previews) are using it
// right now. See docs/lifecycle.md for the rules.
type activity struct {
	mu        sync.Mutex
	last      map[string]time.Time
	persisted map[string]time.Time
	inflight  map[string]int
}

func newActivity() *activity {
	return &activity{
		last:      map[string]time.Time{},
		persisted: map[string]time.Time{},
		inflight:  map[string]int{},
	}
}

func (a *activity) touch(id string, at time.Time) {
	a.mu.Lock()
	if at.After(a.last[id]) {
		a.last[id] = at
	}
	a.mu.Unlock()
}

// seen returns the last activity known in memory.
func (a *activity) seen(id string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last[id]
}

func (a *activity) busy(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight[id] > 0
}

func (a *activity) forget(id string) {
	a.mu.Lock()
	delete(a.last, id)
	delete(a.persisted, id)
	delete(a.inflight, id)
	a.mu.Unlock()
}

// unpersisted returns the sandboxes whose activity moved more than flush
// past what was last persisted, and marks them persisted.
func (a *activity) unpersisted(flush time.Duration) map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]time.Time{}
	for id, t := range a.last {
		if t.Sub(a.persisted[id]) >= flush {
			out[id] = t
			a.persisted[id] = t
		}
	}
	return out
}

// Touch records activity on sandbox id now: every API call for a sandbox
// counts (the API calls it for each /v1/sandboxes/{id}/... request).
func (m *Manager) Touch(id string) {
	m.life.activity.touch(id, time.Now().UTC())
}

// Begin marks a long call on sandbox id (an exec, a terminal, a tunnel, a
// preview request) as running: the sandbox is busy, and never idle, until
// the returned end is called. end is safe to call more than once.
func (m *Manager) Begin(id string) (end func()) {
	a := m.life.activity
	now := time.Now().UTC()
	a.mu.Lock()
	a.inflight[id]++
	if now.After(a.last[id]) {
		a.last[id] = now
	}
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			now := time.Now().UTC()
			a.mu.Lock()
			if a.inflight[id]--; a.inflight[id] <= 0 {
				delete(a.inflight, id)
			}
			if now.After(a.last[id]) {
				a.last[id] = now
			}
			a.mu.Unlock()
		})
	}
}
