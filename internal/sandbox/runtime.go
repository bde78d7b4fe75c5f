package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// ValidateRuntime checks that rt (field names it) is a runtime hotcell
// knows; empty is allowed (the default).
func ValidateRuntime(field, rt string) error {
	if rt == "" || slices.Contains(wire.Runtimes(), rt) {
		return nil
	}
	return errdefs.Invalid(field, "%q is not a runtime; want %s", truncate(rt, 64), strings.Join(wire.Runtimes(), " or "))
}

// runtimes caches the runtimes the backend can run. A runtime not in the
// cache makes it ask the backend again, so one an operator registers
// while the daemon runs is found at the next create that asks for it.
type runtimes struct {
	mu   sync.Mutex
	have []string
}

// forget drops the cache, after the backend refused a runtime it was
// thought to have.
func (r *runtimes) forget() {
	r.mu.Lock()
	r.have = nil
	r.mu.Unlock()
}

// ResolveRuntime returns the runtime a create that asks for req gets: req,
// else the daemon's default, checked against what the backend can run
// now. A runtime it cannot run is an invalid argument that says how to
// enable it.
func (m *Manager) ResolveRuntime(ctx context.Context, req string) (string, error) {
	rt, what := req, req
	if rt == "" {
		rt = m.opts.DefaultRuntime
		if rt == "" {
			rt = wire.RuntimeRunc
		}
		what = rt + " (the daemon's default_runtime)"
	}
	if err := ValidateRuntime("runtime", rt); err != nil {
		return "", err
	}
	m.rts.mu.Lock()
	defer m.rts.mu.Unlock()
	if slices.Contains(m.rts.have, rt) {
		return rt, nil
	}
	info, err := m.drv.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("ask the engine for its runtimes: %w", err)
	}
	m.rts.have = info.Runtimes
	if slices.Contains(info.Runtimes, rt) {
		return rt, nil
	}
	hint := info.RuntimeHints[rt]
	if hint == "" {
		hint = "the engine does not offer it"
	}
	return "", errdefs.Invalid("runtime", "%s is not available on this host (it has %s): %s", what, strings.Join(info.Runtimes, ", "), hint)
}
