package store

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestBackupsRecord(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var want []wire.Backup
		for i, id := range []string{"b1", "b2", "b3"} {
			b := wire.Backup{ID: id, SandboxID: "sb1", Size: int64(i), SHA256: "x", CreatedAt: t0.Add(time.Duration(i) * time.Second), Source: "backup"}
			if err := s.PutBackup(ctx, b); err != nil {
				t.Fatal(err)
			}
			want = append([]wire.Backup{b}, want...) // newest first
		}
		if err := s.PutBackup(ctx, wire.Backup{ID: "o1", SandboxID: "sb2", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListBackups(ctx, "sb1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ListBackups (-want +got):\n%s", diff)
		}
		if all, _ := s.ListBackups(ctx, ""); len(all) != 4 {
			t.Errorf("got %d backups in all, want 4", len(all))
		}
		if _, err := s.GetBackup(ctx, "sb2", "b1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("GetBackup of another sandbox: got %v, want not found", err)
		}
		if err := s.DeleteBackup(ctx, "sb1", "b2"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetBackup(ctx, "sb1", "b2"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("GetBackup after delete: got %v, want not found", err)
		}

		sn := wire.Snapshot{ID: "s1", SandboxID: "sb1", Image: "img", WorkspaceBackupID: "b1", CreatedAt: t0}
		if err := s.PutSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetSnapshot(ctx, "", "s1"); err != nil || got != sn {
			t.Errorf("GetSnapshot = %v, %v; want %v", got, err, sn)
		}
		if err := s.DeleteSnapshot(ctx, "sb1", "s1"); err != nil {
			t.Fatal(err)
		}
		if list, _ := s.ListSnapshots(ctx, "sb1"); len(list) != 0 {
			t.Errorf("snapshots after delete: %v", list)
		}
	})
}
