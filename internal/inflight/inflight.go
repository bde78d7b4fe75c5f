// Package inflight owns the daemon's operations: the API's requests and the
// work that outlives the request that started it (a create, a destroy, a
// backup, a restore). The daemon waits for them at shutdown, for a grace
// period, before it closes what they use (agent connections, the store);
// past the grace it cancels them, and they clean up after themselves.
package inflight

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// ErrShuttingDown refuses an operation that would start after shutdown
// began, and is the cause of the cancellation of those still running when
// the grace period is over.
var ErrShuttingDown = fmt.Errorf("the daemon is shutting down: %w", errdefs.ErrUnavailable)

// Group tracks operations. The zero value is not usable; call New.
type Group struct {
	ctx    context.Context // ends when the group gives up on its operations
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	n       int
	closed  bool
	changed chan struct{} // closed and replaced whenever n drops
}

// New returns a group that accepts operations until Close.
func New() *Group {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Group{ctx: ctx, cancel: cancel, changed: make(chan struct{})}
}

// Begin registers one operation. Its context is ctx, also ended when the
// group cancels what is left at the end of a shutdown's grace period. Call
// end, once, when the operation is over. Once Close was called Begin
// refuses with ErrShuttingDown.
func (g *Group) Begin(ctx context.Context) (_ context.Context, end func(), _ error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ctx, func() {}, ErrShuttingDown
	}
	g.n++
	g.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(g.ctx, func() { cancel(ErrShuttingDown) })
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			stop()
			cancel(nil)
			g.mu.Lock()
			g.n--
			close(g.changed)
			g.changed = make(chan struct{})
			g.mu.Unlock()
		})
	}, nil
}

// Detach registers work that must outlive the request whose context it is
// given: a create or a destroy that started finishes, or cleans up after
// itself, even if its client hangs up. Its context keeps ctx's values, not
// its cancellation: only the group's shutdown ends it.
func (g *Group) Detach(ctx context.Context) (_ context.Context, end func(), _ error) {
	// The request's end must not stop the work; the group's shutdown does.
	return g.Begin(context.WithoutCancel(ctx))
}

// Close refuses operations from now on; those running go on.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Wait waits until no operation runs or ctx ends, and returns how many
// still run.
func (g *Group) Wait(ctx context.Context) int {
	for {
		g.mu.Lock()
		n, changed := g.n, g.changed
		g.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return n
		}
	}
}

// Cancel ends the contexts of the operations still running, with cause
// ErrShuttingDown; they return soon and clean up after themselves.
func (g *Group) Cancel() { g.cancel(ErrShuttingDown) }

// Handler makes every request to h an operation: refused with 503 once the
// group is closed, its context ended when the group cancels.
func (g *Group) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, end, err := g.Begin(r.Context())
		if err != nil {
			w.Header().Set("Connection", "close")
			errdefs.Write(w, err, "")
			return
		}
		defer end()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}
