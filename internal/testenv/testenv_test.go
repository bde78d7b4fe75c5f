package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// recordingTB records how a helper gave up instead of giving up.
type recordingTB struct {
	testing.TB
	calls []string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.calls = append(r.calls, "fatal: "+fmt.Sprintf(format, args...))
}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.calls = append(r.calls, "skip: "+fmt.Sprintf(format, args...))
}

// TestSkipOrFail: outside CI a missing piece skips, with CI set it fails.
func TestSkipOrFail(t *testing.T) {
	for _, tt := range []struct {
		ci, want string
	}{
		{"", "skip: needs x"},
		{"true", "fatal: needs x (CI is set, so this fails instead of skipping)"},
	} {
		t.Run("CI="+tt.ci, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			r := &recordingTB{TB: t}
			SkipOrFail(r, "needs %s", "x")
			if len(r.calls) == 0 || r.calls[0] != tt.want {
				t.Errorf("got %q, want first %q", r.calls, tt.want)
			}
		})
	}
}

func TestRequireRoot(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recordingTB{TB: t}
	RequireRoot(r, "a network namespace")
	if root := os.Geteuid() == 0; root != (len(r.calls) == 0) {
		t.Errorf("as uid %d: got %q", os.Geteuid(), r.calls)
	}
	if os.Geteuid() != 0 && r.calls[0] != "fatal: needs root: a network namespace (CI is set, so this fails instead of skipping)" {
		t.Errorf("got %q", r.calls)
	}
}

// A test process's build directory is removed by the next one once the
// process has ended, and never while it runs.
func TestBinDirSweepsEndedProcesses(t *testing.T) {
	parent := t.TempDir()
	t.Setenv("HOTCELL_TESTBIN", parent)
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	endedDir := filepath.Join(parent, fmt.Sprintf("hotcell-testbin-%d-1", ended.Process.Pid))
	liveDir := filepath.Join(parent, fmt.Sprintf("hotcell-testbin-%d-1", os.Getppid()))
	other := filepath.Join(parent, "unrelated")
	for _, d := range []string{endedDir, liveDir, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != parent || !strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("hotcell-testbin-%d-", os.Getpid())) {
		t.Errorf("binDir = %s, want hotcell-testbin-%d-* under %s", dir, os.Getpid(), parent)
	}
	if _, err := os.Stat(endedDir); !os.IsNotExist(err) {
		t.Errorf("the ended process's directory is still there (%v)", err)
	}
	for _, d := range []string{liveDir, other, dir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
