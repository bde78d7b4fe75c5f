package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		if v, ok, err := s.Setting(ctx, "instance"); ok || err != nil {
			t.Fatalf("unset setting: got %q %v %v, want none", v, ok, err)
		}
		if v, err := s.InitSetting(ctx, "instance", "aaaa"); err != nil || v != "aaaa" {
			t.Fatalf("first InitSetting: got %q, %v, want aaaa", v, err)
		}
		// A second caller gets the first one's value, and changes nothing.
		if v, err := s.InitSetting(ctx, "instance", "bbbb"); err != nil || v != "aaaa" {
			t.Fatalf("second InitSetting: got %q, %v, want aaaa", v, err)
		}
		if v, ok, err := s.Setting(ctx, "instance"); !ok || err != nil || v != "aaaa" {
			t.Fatalf("Setting: got %q %v %v, want aaaa", v, ok, err)
		}
		for _, bad := range [][2]string{{"", "x"}, {"k", ""}} {
			if _, err := s.InitSetting(ctx, bad[0], bad[1]); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("InitSetting(%q, %q): got %v, want invalid", bad[0], bad[1], err)
			}
		}
	})
}

// TestInitSettingConcurrent: daemons starting at once on one PostgreSQL
// database, each with a value of its own, all end up with the same one.
func TestInitSettingConcurrent(t *testing.T) {
	t.Parallel()
	target := postgresBackend.target(t)
	const n = 8
	stores := make([]*Store, n)
	for i := range stores {
		s, err := Open(t.Context(), target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	for round := range 5 {
		key := fmt.Sprintf("key-%d", round)
		got := make([]string, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = s.InitSetting(t.Context(), key, fmt.Sprintf("value-of-%d", i))
			}()
		}
		close(start)
		wg.Wait()
		for i := range got {
			if errs[i] != nil {
				t.Fatalf("round %d, caller %d: %v", round, i, errs[i])
			}
			if got[i] != got[0] {
				t.Fatalf("round %d: caller %d got %q, caller 0 got %q: want one value for all", round, i, got[i], got[0])
			}
		}
		if stored, _, _ := stores[0].Setting(t.Context(), key); stored != got[0] {
			t.Errorf("round %d: stored %q, callers got %q", round, stored, got[0])
		}
	}
}

func TestCreator(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		if _, err := s.Creator(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("creator of no sandbox: got %v, want not found", err)
		}
		sb := sandbox("sb1", wire.StateCreating, t0, nil)
		if err := s.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Creator(ctx, "sb1"); err != nil || c != "" {
			t.Errorf("creator after Put: got %q, %v, want none", c, err)
		}
		if err := s.PutCreating(ctx, sb, "daemon-a"); err != nil {
			t.Fatal(err)
		}
		// A later Put (the create finishing) keeps it; a claim's
		// PutCreating replaces it.
		sb.State = wire.StateRunning
		if err := s.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Creator(ctx, "sb1"); err != nil || c != "daemon-a" {
			t.Errorf("creator after Put: got %q, %v, want daemon-a", c, err)
		}
		sb.State = wire.StateCreating
		if err := s.PutCreating(ctx, sb, "daemon-b"); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Creator(ctx, "sb1"); err != nil || c != "daemon-b" {
			t.Errorf("creator after a second PutCreating: got %q, %v, want daemon-b", c, err)
		}
		// A start records its daemon the same way; Starters lists them;
		// ClearStarter forgets only the daemon named.
		if err := s.PutStarting(ctx, "sb1", "daemon-c"); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Starters(ctx); err != nil || len(got) != 1 || got["sb1"] != "daemon-c" {
			t.Errorf("starters: got %v, %v; want sb1: daemon-c", got, err)
		}
		if err := s.ClearStarter(ctx, "sb1", "daemon-b"); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Creator(ctx, "sb1"); err != nil || c != "daemon-c" {
			t.Errorf("starter after clearing another daemon's: got %q, %v, want daemon-c", c, err)
		}
		if err := s.ClearStarter(ctx, "sb1", "daemon-c"); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Creator(ctx, "sb1"); err != nil || c != "" {
			t.Errorf("starter after clearing it: got %q, %v, want none", c, err)
		}
		if err := s.PutStarting(ctx, "sb1", "daemon-c"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "sb1"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandbox_creators`).Scan(&n); err != nil || n != 0 {
			t.Errorf("creator rows after Delete: %d, %v; want 0", n, err)
		}
	})
}
