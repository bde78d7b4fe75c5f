package testenv

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
)

// RequireRuntime gives up on the test unless d can run boxes under rt (a
// wire.Runtime* name) now: outside CI it skips with how to enable it; in
// CI, whose scripts/test registers every runtime, it fails.
func RequireRuntime(t testing.TB, d driver.Driver, rt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := d.Info(ctx)
	if err != nil {
		SkipOrFail(t, "needs runtime %s: the engine's info: %v", rt, err)
		return
	}
	if !slices.Contains(info.Runtimes, rt) {
		SkipOrFail(t, "needs runtime %s, which the engine lacks: %s", rt, info.RuntimeHints[rt])
	}
}
