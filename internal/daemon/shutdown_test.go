package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/inflight"
)

// recorder notes the steps of a shutdown in the order they happen.
type recorder struct {
	mu    sync.Mutex
	steps []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, s)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steps)
}

func newShutdown(rec *recorder, ops *inflight.Group, grace time.Duration) shutdown {
	return shutdown{
		log:          slog.New(slog.DiscardHandler),
		grace:        grace,
		ops:          ops,
		stopLoops:    func() { rec.add("stop loops") },
		closeConns:   func() { rec.add("close connections") },
		stopServices: func() { rec.add("stop services") },
	}
}

func TestShutdownWaitsForOperations(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	ops := inflight.New()
	ctx, end, err := ops.Detach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		newShutdown(rec, ops, time.Hour).run()
		close(done)
	}()
	// Once the loops stop, new operations are refused.
	for !slices.Contains(rec.got(), "stop loops") {
		time.Sleep(time.Millisecond)
	}
	if _, _, err := ops.Begin(t.Context()); !errors.Is(err, inflight.ErrShuttingDown) {
		t.Errorf("operation begun during the shutdown: got %v, want ErrShuttingDown", err)
	}
	rec.add("operation ends")
	if ctx.Err() != nil {
		t.Errorf("the operation was cancelled within its grace period: %v", context.Cause(ctx))
	}
	end()
	<-done
	want := []string{"stop loops", "operation ends", "close connections", "stop services"}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Errorf("steps: got %v, want %v", got, want)
	}
}

func TestShutdownCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	ops := inflight.New()
	ctx, end, err := ops.Detach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// An operation that only ends when it is cancelled, and then
		// cleans up (after the connections close, which may be what it
		// waited on).
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), inflight.ErrShuttingDown) {
			t.Errorf("cause: got %v, want ErrShuttingDown", context.Cause(ctx))
		}
		for !slices.Contains(rec.got(), "close connections") {
			time.Sleep(time.Millisecond)
		}
		rec.add("operation cleaned up")
		end()
	}()
	newShutdown(rec, ops, 10*time.Millisecond).run()
	want := []string{"stop loops", "close connections", "operation cleaned up", "stop services"}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Errorf("steps: got %v, want %v", got, want)
	}
}
