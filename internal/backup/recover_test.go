package backup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestRecover checks what a daemon's start removes from its backup_dir,
// alone on its store and as one of a set: alone, everything a killed
// backup left and every record whose file is gone; in a set, no record
// (its file may be in another daemon's backup_dir) and only files older
// than a backup another daemon may still be writing.
func TestRecover(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		dir := t.TempDir()
		st := &memStore{}
		s := New(Options{Dir: dir, Shared: shared, Store: st, Sandboxes: fakeSandboxes{}})
		kept := wire.Backup{ID: "b-kept", SandboxID: "sb1"}
		elsewhere := wire.Backup{ID: "b-elsewhere", SandboxID: "sb1"}
		st.backups = []wire.Backup{kept, elsewhere}
		old := time.Now().Add(-2 * sharedGrace)
		files := map[string]time.Time{
			s.file(kept): old,
			filepath.Join(dir, "sb1", tmpPrefix+"new"):    time.Now(),
			filepath.Join(dir, "sb1", tmpPrefix+"old"):    old,
			filepath.Join(dir, "sb1", "b-unrecorded.tar"): time.Now(),
		}
		for p, mtime := range files {
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		var left []string
		for p := range files {
			if _, err := os.Stat(p); err == nil {
				left = append(left, filepath.Base(p))
			}
		}
		want := map[bool]string{false: "b-kept.tar", true: ".tmp-new b-kept.tar b-unrecorded.tar"}[shared]
		if got := strings.Join(slices.Sorted(slices.Values(left)), " "); got != want {
			t.Errorf("shared=%v: files left %q, want %q", shared, got, want)
		}
		recs, _ := st.ListBackups(t.Context(), "")
		if len(recs) != map[bool]int{false: 1, true: 2}[shared] {
			t.Errorf("shared=%v: records left %+v", shared, recs)
		}
		if shared {
			_, err := s.openFile(elsewhere)
			if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "give every daemon the same backup_dir") {
				t.Errorf("open of a backup another daemon kept: got %v, want a conflict saying to share backup_dir", err)
			}
		}
	}
}

// TestRecoverKeepsAllMissing: a daemon alone on its store whose
// backup_dir holds none of the recorded backups (backup_dir changed, or
// its volume not mounted) keeps every record: dropping them would lose
// backups whose files are only elsewhere.
func TestRecoverKeepsAllMissing(t *testing.T) {
	t.Parallel()
	st := &memStore{backups: []wire.Backup{{ID: "b-1", SandboxID: "sb1"}, {ID: "b-2", SandboxID: "sb2"}}}
	s := New(Options{Dir: t.TempDir(), Store: st, Sandboxes: fakeSandboxes{}})
	if err := s.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.ListBackups(t.Context(), ""); len(recs) != 2 {
		t.Errorf("records left: %+v, want both", recs)
	}
}
