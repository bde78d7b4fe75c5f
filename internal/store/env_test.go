package store

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestSandboxEnv: a sandbox's env is written through one handle and read
// through another (two daemons on PostgreSQL), replaced whole, refused
// for a sandbox with no record, and gone with the record.
func TestSandboxEnv(t *testing.T) {
	eachBackend(t, func(t *testing.T, be backend) {
		ctx := t.Context()
		a, target := openTest(t, be)
		b, err := Open(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })

		if err := a.PutSandboxEnv(ctx, "sb-none", map[string]string{"K": "v"}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("env of a sandbox with no record: got %v, want not found", err)
		}
		if env, err := b.SandboxEnv(ctx, "sb-none"); err != nil || env != nil {
			t.Fatalf("env of a sandbox with no record: got %v, %v; want none", env, err)
		}
		if err := a.Put(ctx, sandbox("sb-1", wire.StateRunning, t0, nil)); err != nil {
			t.Fatal(err)
		}
		if env, err := b.SandboxEnv(ctx, "sb-1"); err != nil || env != nil {
			t.Fatalf("env of a sandbox made with none: got %v, %v; want none", env, err)
		}
		first := map[string]string{"OPENAI_API_KEY": "hc-secret", "OWNER": "a"}
		if err := a.PutSandboxEnv(ctx, "sb-1", first); err != nil {
			t.Fatal(err)
		}
		got, err := b.SandboxEnv(ctx, "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, got); diff != "" {
			t.Errorf("env read through another handle (-want +got):\n%s", diff)
		}
		second := map[string]string{"OWNER": "b"}
		if err := b.PutSandboxEnv(ctx, "sb-1", second); err != nil {
			t.Fatal(err)
		}
		if got, err := a.SandboxEnv(ctx, "sb-1"); err != nil || !cmp.Equal(got, second) {
			t.Errorf("replaced env: got %v, %v; want %v", got, err, second)
		}
		// A record written again (every lifecycle change upserts it)
		// keeps its env.
		if err := a.Put(ctx, sandbox("sb-1", wire.StateStopped, t0, nil)); err != nil {
			t.Fatal(err)
		}
		if got, err := b.SandboxEnv(ctx, "sb-1"); err != nil || !cmp.Equal(got, second) {
			t.Errorf("env after the record was written again: got %v, %v; want %v", got, err, second)
		}
		if err := a.Delete(ctx, "sb-1"); err != nil {
			t.Fatal(err)
		}
		if env, err := b.SandboxEnv(ctx, "sb-1"); err != nil || env != nil {
			t.Errorf("env after the sandbox was deleted: got %v, %v; want none", env, err)
		}
		// A sandbox made again with the same id does not inherit it.
		if err := a.Put(ctx, sandbox("sb-1", wire.StateRunning, t0, nil)); err != nil {
			t.Fatal(err)
		}
		if env, err := b.SandboxEnv(ctx, "sb-1"); err != nil || env != nil {
			t.Errorf("env of a new sandbox of a deleted one's id: got %v, %v; want none", env, err)
		}
	})
}
