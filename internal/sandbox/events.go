package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// EventStore is what the event log and the reaper need from persistence;
// it is part of Store, so a store without it does not compile as one.
type EventStore interface {
	AddEvent(ctx context.Context, ev wire.SandboxEvent) (wire.SandboxEvent, error)
	Events(ctx context.Context, f store.EventFilter) ([]wire.SandboxEvent, error)
	HasEvents(ctx context.Context, id string) (bool, error)
	PruneEvents(ctx context.Context, before time.Time) (int64, error)
	SetActivity(ctx context.Context, id string, at time.Time) error
	Activity(ctx context.Context) (map[string]time.Time, error)
}

// broker wakes event followers when an event is logged. Followers re-read
// the store from their last seq, so a slow follower never makes the broker
// buffer: a wake-up it misses is merged with the next one.
type broker struct {
	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	closed chan struct{}
	once   sync.Once
}

func newBroker() *broker {
	return &broker{subs: map[chan struct{}]struct{}{}, closed: make(chan struct{})}
}

func (b *broker) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

func (b *broker) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Event logs an event of sandbox id and wakes the followers. Other parts of
// the daemon (backups: "restored") log through it too. Logging never fails
// the operation it describes: an error is only logged.
func (m *Manager) Event(ctx context.Context, id, typ, message string, fields map[string]string) {
	if m.pools.member(id) {
		return // a box waiting in a pool has no owner to tell
	}
	ctx = context.WithoutCancel(ctx)
	m.log.Info("sandbox event", "sandbox", id, "type", typ, "message", message)
	if _, err := m.store.AddEvent(ctx, wire.SandboxEvent{
		SandboxID: id, Type: typ, Time: time.Now().UTC(), Message: message, Fields: fields,
	}); err != nil {
		m.log.Error("log sandbox event", "sandbox", id, "type", typ, "err", err)
		return
	}
	m.life.events.notify()
}

// Events returns the logged events of sandbox id (every sandbox when id is
// empty) after seq after, oldest first. A sandbox with neither a record nor
// a log is not found.
func (m *Manager) Events(ctx context.Context, id string, after int64, limit int) ([]wire.SandboxEvent, error) {
	if id != "" {
		if _, err := m.store.Get(ctx, id); err != nil {
			has, herr := m.store.HasEvents(ctx, id)
			if herr != nil || !has {
				return nil, err
			}
		}
	}
	return m.store.Events(ctx, store.EventFilter{SandboxID: id, After: after, Limit: limit})
}

// SubscribeEvents returns a channel that receives a value whenever events
// were logged, and a function to unsubscribe.
func (m *Manager) SubscribeEvents() (<-chan struct{}, func()) { return m.life.events.subscribe() }

// Closing is closed when the daemon shuts down: event streams end then.
func (m *Manager) Closing() <-chan struct{} { return m.life.events.closed }

// CloseStreams ends the event streams; the daemon calls it when it starts
// shutting down, so that open streams do not hold the shutdown up.
func (m *Manager) CloseStreams() {
	m.life.events.once.Do(func() { close(m.life.events.closed) })
}
