package sandbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
)

// StepObserver learns how long each step of a create, a destroy or a
// claim of a pooled box took (op is "create", "destroy" or "claim"); the
// daemon feeds it into hotcell_<op>_step_seconds.
type StepObserver func(op, step string, d time.Duration)

// stepClock times the steps of one operation: each step lasts from the end
// of the one before (or the operation's start) to its own end, so the steps
// add up to the whole. The driver's own steps arrive through the context
// (driver.TraceStep).
type stepClock struct {
	op  string
	obs StepObserver
	log *slog.Logger
	// prefix starts every step's name: "background_" for the part of a
	// destroy that follows its answer.
	prefix string

	mu          sync.Mutex
	start, last time.Time
	took        []any
}

func (m *Manager) clock(op string, log *slog.Logger) *stepClock {
	now := time.Now()
	return &stepClock{op: op, obs: m.opts.Steps, log: log, start: now, last: now}
}

type clockKey struct{}

// trace returns ctx with the clock as its driver step trace.
func (c *stepClock) trace(ctx context.Context) context.Context {
	return driver.WithStepTrace(context.WithValue(ctx, clockKey{}, c), c.step)
}

// traceParallel reports a step that ran beside the others (it took d) to
// ctx's clock, if any. It does not end the current step: the steps named
// *_parallel overlap the others and are not part of their sum.
func traceParallel(ctx context.Context, name string, d time.Duration) {
	c, ok := ctx.Value(clockKey{}).(*stepClock)
	if !ok {
		return
	}
	c.mu.Lock()
	c.took = append(c.took, name, d)
	c.mu.Unlock()
	if c.obs != nil {
		c.obs(c.op, name, d)
	}
}

// step ends the current step under name.
func (c *stepClock) step(name string) {
	name = c.prefix + name
	now := time.Now()
	c.mu.Lock()
	d := now.Sub(c.last)
	c.last = now
	c.took = append(c.took, name, d)
	c.mu.Unlock()
	if c.obs != nil {
		c.obs(c.op, name, d)
	}
}

// done logs every step's duration at debug level.
func (c *stepClock) done() {
	c.mu.Lock()
	args := append([]any{"op", c.op, "total", time.Since(c.start)}, c.took...)
	c.mu.Unlock()
	c.log.Debug("lifecycle steps", args...)
}
