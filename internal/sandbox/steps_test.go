package sandbox

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// TestSteps checks that a create and a destroy report their steps in
// order, each once, so the step histograms add up to the whole operation.
func TestSteps(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t, LifecycleOptions{})
	var mu sync.Mutex
	got := map[string][]string{}
	m.opts.Steps = func(op, step string, d time.Duration) {
		if d < 0 {
			t.Errorf("%s step %s took %v", op, step, d)
		}
		mu.Lock()
		got[op] = append(got[op], step)
		mu.Unlock()
	}
	ctx := t.Context()
	sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// The fake driver reports no steps of its own.
	for op, want := range map[string][]string{
		"create":  {"resolve", "record", "listen", "gateway", "egress", "agent", "setup", "record_running", "event"},
		"destroy": {"lookup", "egress_parallel", "gateway_parallel", "run_dir", "wait_parallel", "delete_record", "event"},
	} {
		if !slices.Equal(got[op], want) {
			t.Errorf("%s steps: got %v, want %v", op, got[op], want)
		}
	}
}
