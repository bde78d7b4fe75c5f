package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)

// backend is one engine the store runs on. Every test of the store runs
// on each (eachBackend), but those of SQLite's own pragmas and files.
type backend struct {
	name string
	// target returns a new, empty store for t: a SQLite file's path or a
	// PostgreSQL database's URL, removed when t ends.
	target func(t *testing.T) string
}

var (
	sqliteBackend = backend{"sqlite", func(t *testing.T) string {
		return filepath.Join(t.TempDir(), "hotcell.db")
	}}
	postgresBackend = backend{"postgres", func(t *testing.T) string {
		return testenv.RequirePostgres(t)
	}}
	backends = []backend{sqliteBackend, postgresBackend}
)

// eachBackend runs fn as a parallel subtest on each backend.
func eachBackend(t *testing.T, fn func(t *testing.T, be backend)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			fn(t, be)
		})
	}
}

// openTest opens a new store on be, closed when t ends, and returns it
// with its target, for a second Open.
func openTest(t *testing.T, be backend) (*Store, string) {
	t.Helper()
	target := be.target(t)
	s, err := Open(t.Context(), target)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, target
}

func sandbox(id string, state wire.State, created time.Time, labels map[string]string) wire.Sandbox {
	return wire.Sandbox{
		ID:        id,
		State:     state,
		Image:     "hotcell/base:latest",
		Env:       map[string]string{"A": "1"},
		Labels:    labels,
		Limits:    wire.Limits{MemoryMB: 512, CPUs: 1.5, PidsLimit: 100},
		Persist:   true,
		Repo:      &wire.RepoResult{URL: "https://example.invalid/r.git", Commit: "abc"},
		Setup:     []wire.SetupResult{{Command: "true", DurationMs: 3, OutputTail: "ok\n"}},
		CreatedAt: created,
		UpdatedAt: created.Add(time.Second),
	}
}

func ids(sbs []wire.Sandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func TestRoundTripAndUpsert(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()

		want := sandbox("sb1", wire.StateCreating, t0, map[string]string{"team": "a"})
		if err := s.Put(ctx, want); err != nil {
			t.Fatalf("Put: %v", err)
		}
		got, err := s.Get(ctx, "sb1")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get after Put (-want +got):\n%s", diff)
		}

		want.State = wire.StateRunning
		want.Labels = map[string]string{"team": "b"}
		want.UpdatedAt = t0.Add(time.Hour)
		if err := s.Put(ctx, want); err != nil {
			t.Fatalf("Put (update): %v", err)
		}
		got, err = s.Get(ctx, "sb1")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get after upsert (-want +got):\n%s", diff)
		}
		if n, err := s.Count(ctx); err != nil || n != 1 {
			t.Errorf("Count = %d, %v; want 1, nil", n, err)
		}
		// The old label must not match any more.
		old, err := s.List(ctx, Filter{Labels: map[string]string{"team": "a"}})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(old) != 0 {
			t.Errorf("List team=a after relabel: got %v, want none", ids(old))
		}
	})
}

func TestGetMissing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		_, err := s.Get(t.Context(), "nope")
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get missing: got %v, want ErrNotFound", err)
		}
	})
}

func TestPutInvalid(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		for _, sb := range []wire.Sandbox{{State: wire.StateRunning}, {ID: "x"}} {
			if err := s.Put(t.Context(), sb); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Put(%+v): got %v, want ErrInvalidArgument", sb, err)
			}
		}
	})
}

func TestList(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		// Inserted out of creation order to check ORDER BY created_at.
		for _, sb := range []wire.Sandbox{
			sandbox("c", wire.StateRunning, t0.Add(3*time.Minute), map[string]string{"team": "a", "env": "prod"}),
			sandbox("a", wire.StateRunning, t0.Add(1*time.Minute), map[string]string{"team": "a", "env": "dev"}),
			sandbox("b", wire.StateStopped, t0.Add(2*time.Minute), map[string]string{"team": "b", "env": "dev"}),
			sandbox("d", wire.StateRunning, t0.Add(4*time.Minute), nil),
			// A value that is a prefix/superstring of another must not match.
			sandbox("e", wire.StateRunning, t0.Add(5*time.Minute), map[string]string{"team": "aa"}),
		} {
			if err := s.Put(ctx, sb); err != nil {
				t.Fatalf("Put %s: %v", sb.ID, err)
			}
		}
		tests := []struct {
			name   string
			filter Filter
			want   []string
		}{
			{"all", Filter{}, []string{"a", "b", "c", "d", "e"}},
			{"state", Filter{State: wire.StateRunning}, []string{"a", "c", "d", "e"}},
			{"state none", Filter{State: wire.StatePaused}, []string{}},
			{"one label", Filter{Labels: map[string]string{"team": "a"}}, []string{"a", "c"}},
			{"labels AND", Filter{Labels: map[string]string{"team": "a", "env": "dev"}}, []string{"a"}},
			{"labels AND none", Filter{Labels: map[string]string{"team": "b", "env": "prod"}}, []string{}},
			{"state and label", Filter{State: wire.StateStopped, Labels: map[string]string{"env": "dev"}}, []string{"b"}},
			{"unknown key", Filter{Labels: map[string]string{"nope": "a"}}, []string{}},
			{"empty value", Filter{Labels: map[string]string{"team": ""}}, []string{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := s.List(t.Context(), tt.filter)
				if err != nil {
					t.Fatalf("List: %v", err)
				}
				if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
					t.Errorf("List(%+v) ids (-want +got):\n%s", tt.filter, diff)
				}
			})
		}
	})
}

func TestDeleteIdempotent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		if err := s.Put(ctx, sandbox("x", wire.StateRunning, t0, map[string]string{"k": "v"})); err != nil {
			t.Fatalf("Put: %v", err)
		}
		for i := range 2 {
			if err := s.Delete(ctx, "x"); err != nil {
				t.Fatalf("Delete #%d: %v", i+1, err)
			}
		}
		if _, err := s.Get(ctx, "x"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get after Delete: got %v, want ErrNotFound", err)
		}
		// Labels are removed with the sandbox (foreign keys are on).
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandbox_labels`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("labels left after Delete: got %d, want 0", n)
		}
	})
}

func TestReopenKeepsDataAndRecordsVersion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, path := openTest(t, be)
		ctx := t.Context()
		want := sandbox("keep", wire.StatePaused, t0, map[string]string{"a": "b"})
		if err := s.Put(ctx, want); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}

		s2, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s2.Close()
		got, err := s2.Get(ctx, "keep")
		if err != nil {
			t.Fatalf("Get after reopen: %v", err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get after reopen (-want +got):\n%s", diff)
		}
		var versions []int
		rows, err := s2.db.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			versions = append(versions, v)
		}
		wantVersions := []int{}
		for v := 1; v <= SchemaVersion(); v++ {
			wantVersions = append(wantVersions, v)
		}
		if diff := cmp.Diff(wantVersions, versions); diff != "" {
			t.Errorf("schema_migrations versions (-want +got):\n%s", diff)
		}
	})
}

func TestPragmasAndPermissions(t *testing.T) {
	t.Parallel()
	s, path := openTest(t, sqliteBackend)
	ctx := t.Context()
	if err := s.Put(ctx, sandbox("x", wire.StateRunning, t0, nil)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	for _, tt := range []struct{ pragma, want string }{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"synchronous", "1"}, // NORMAL
		{"busy_timeout", "5000"},
	} {
		var got string
		if err := s.db.QueryRowContext(ctx, "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("PRAGMA %s: got %q, want %q", tt.pragma, got, tt.want)
		}
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat: %v", err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s mode: got %o, want no group/other bits", filepath.Base(p), perm)
		}
	}
}

func TestRefuseNewerSchema(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, path := openTest(t, be)
		// Pretend a newer hotcell migrated this database.
		if _, err := s.db.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES (?, 'x')`, SchemaVersion()+1); err != nil {
			t.Fatal(err)
		}
		s.Close()

		s, err := Open(t.Context(), path)
		if err == nil {
			s.Close()
			t.Fatal("Open of newer schema: got nil error")
		}
		if !errors.Is(err, ErrSchemaTooNew) {
			t.Errorf("Open of newer schema: got %v, want ErrSchemaTooNew", err)
		}
		t.Logf("error reads: %v", err)
	})
}

func TestConcurrentPuts(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		const workers, each = 16, 25
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					id := fmt.Sprintf("w%d-%d", w, i)
					sb := sandbox(id, wire.StateRunning, t0.Add(time.Duration(i)), map[string]string{"worker": fmt.Sprint(w)})
					if err := s.Put(ctx, sb); err != nil {
						errs <- err
						return
					}
					if _, err := s.List(ctx, Filter{Labels: map[string]string{"worker": fmt.Sprint(w)}}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent Put/List: %v", err)
		}
		if n, err := s.Count(ctx); err != nil || n != workers*each {
			t.Errorf("Count = %d, %v; want %d, nil", n, err, workers*each)
		}
	})
}

// Two Stores on one file behave like two processes: busy_timeout and
// BEGIN IMMEDIATE must make them wait for each other rather than fail.
func TestTwoHandlesSameFile(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		a, path := openTest(t, be)
		b, err := Open(t.Context(), path)
		if err != nil {
			t.Fatalf("second Open: %v", err)
		}
		defer b.Close()
		ctx := t.Context()
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i, s := range []*Store{a, b} {
			wg.Go(func() {
				for j := range 100 {
					if err := s.Put(ctx, sandbox(fmt.Sprintf("h%d-%d", i, j), wire.StateRunning, t0, map[string]string{"h": "x"})); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Put from two handles: %v", err)
		}
		if n, err := a.Count(ctx); err != nil || n != 200 {
			t.Errorf("Count = %d, %v; want 200, nil", n, err)
		}
	})
}

// TestMigrateRuntime checks migration 6: records made before runtimes
// could be chosen read as runc, and a recorded runtime is kept.
func TestMigrateRuntime(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, path := openTest(t, be)
		ctx := t.Context()
		old := sandbox("old", wire.StateRunning, t0, nil)
		gv := sandbox("gv", wire.StateStopped, t0, nil)
		gv.Runtime = wire.RuntimeGVisor
		for _, sb := range []wire.Sandbox{old, gv} {
			if err := s.Put(ctx, sb); err != nil {
				t.Fatalf("Put: %v", err)
			}
		}
		if err := s.PutSnapshot(ctx, wire.Snapshot{ID: "sn-old", SandboxID: "old", CreatedAt: t0}); err != nil {
			t.Fatalf("PutSnapshot: %v", err)
		}
		// Back to schema 5, as a database of an older hotcell.
		if _, err := s.db.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version >= 6`); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s.Close()
		for id, want := range map[string]string{"old": wire.RuntimeRunc, "gv": wire.RuntimeGVisor} {
			got, err := s.Get(ctx, id)
			if err != nil {
				t.Fatalf("Get %s: %v", id, err)
			}
			if got.Runtime != want {
				t.Errorf("sandbox %s after migration: got runtime %q, want %q", id, got.Runtime, want)
			}
		}
		sn, err := s.GetSnapshot(ctx, "old", "sn-old")
		if err != nil {
			t.Fatalf("GetSnapshot: %v", err)
		}
		if sn.Runtime != wire.RuntimeRunc {
			t.Errorf("snapshot after migration: got runtime %q, want %q", sn.Runtime, wire.RuntimeRunc)
		}
	})
}
