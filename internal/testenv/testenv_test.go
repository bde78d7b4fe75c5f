package testenv

import (
	"fmt"
	"os"
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
