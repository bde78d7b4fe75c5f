package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// These tests stand for several daemons on one store: each handle is a
// process of its own as far as the database can tell. What SQLite gave
// by letting one writer in at a time must hold on PostgreSQL too.

// openHandles opens n stores on one new database of be.
func openHandles(t *testing.T, be backend, n int) []*Store {
	t.Helper()
	first, target := openTest(t, be)
	out := []*Store{first}
	for range n - 1 {
		s, err := Open(t.Context(), target)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// Daemons that start on one new database at once each find it migrated,
// and every migration is applied once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		target := be.target(t)
		const n = 6
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				s, err := Open(t.Context(), target)
				if err != nil {
					errs <- err
					return
				}
				s.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent Open: %v", err)
		}
		s, _ := Open(t.Context(), target)
		if s == nil {
			t.Fatal("reopen failed")
		}
		defer s.Close()
		var count, maxV int
		if err := s.db.QueryRowContext(t.Context(), `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&count, &maxV); err != nil {
			t.Fatal(err)
		}
		if count != SchemaVersion() || maxV != SchemaVersion() {
			t.Errorf("schema_migrations: %d rows up to %d, want %d up to %d", count, maxV, SchemaVersion(), SchemaVersion())
		}
	})
}

// Of several daemons creating the same API key name or template version
// at once, exactly one succeeds; the others get ErrAlreadyExists.
func TestConcurrentCreateOneWins(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		hs := openHandles(t, be, 4)
		ctx := t.Context()
		const tries = 16
		for round := range 5 {
			var (
				wg             sync.WaitGroup
				mu             sync.Mutex
				keyOK, tplOK   int
				unexpectedErrs []error
			)
			for i := range tries {
				s := hs[i%len(hs)]
				wg.Go(func() {
					kerr := s.PutAPIKey(ctx, APIKey{Name: fmt.Sprintf("k%d", round), Hash: fmt.Sprintf("h%d-%d", round, i), Hint: "x", CreatedAt: t0})
					terr := s.PutTemplate(ctx, wire.Template{Name: "py", Version: round + 1, Image: fmt.Sprint(i), CreatedAt: t0})
					mu.Lock()
					defer mu.Unlock()
					for _, e := range []struct {
						err error
						ok  *int
					}{{kerr, &keyOK}, {terr, &tplOK}} {
						switch {
						case e.err == nil:
							*e.ok++
						case !errors.Is(e.err, errdefs.ErrAlreadyExists):
							unexpectedErrs = append(unexpectedErrs, e.err)
						}
					}
				})
			}
			wg.Wait()
			for _, err := range unexpectedErrs {
				t.Errorf("round %d: want nil or ErrAlreadyExists, got %v", round, err)
			}
			if keyOK != 1 || tplOK != 1 {
				t.Errorf("round %d: %d API key creates and %d template creates succeeded, want 1 each", round, keyOK, tplOK)
			}
		}
	})
}

// A reader that follows the event log by seq (EventFilter.After, as the
// events API does) while several daemons append sees every event: seq
// is given in commit order, so no event commits behind the cursor.
func TestEventsFollowedWhileAppendedMissNone(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		hs := openHandles(t, be, 4)
		ctx := t.Context()
		const each = 60
		var wg sync.WaitGroup
		errs := make(chan error, len(hs))
		for i, s := range hs {
			wg.Go(func() {
				for j := range each {
					if _, err := s.AddEvent(ctx, wire.SandboxEvent{SandboxID: fmt.Sprintf("sb%d", i), Type: "x", Time: time.Now(),
						Message: fmt.Sprint(j)}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		var (
			seen   []int64
			cursor int64
		)
		follow := func() {
			evs, err := hs[0].Events(ctx, EventFilter{After: cursor, Limit: 10000})
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			for _, ev := range evs {
				seen = append(seen, ev.Seq)
				cursor = ev.Seq
			}
		}
		for finished := false; !finished; {
			select {
			case <-done:
				finished = true
			default:
			}
			follow()
		}
		follow()
		close(errs)
		for err := range errs {
			t.Fatalf("AddEvent: %v", err)
		}
		all, err := hs[0].Events(ctx, EventFilter{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{}
		for _, ev := range all {
			want = append(want, ev.Seq)
		}
		if len(want) != len(hs)*each {
			t.Fatalf("%d events stored, want %d", len(want), len(hs)*each)
		}
		if !slices.Equal(seen, want) {
			missed := 0
			for _, s := range want {
				if !slices.Contains(seen, s) {
					missed++
				}
			}
			t.Errorf("the follower saw %d events and missed %d of %d", len(seen), missed, len(want))
		}
	})
}
