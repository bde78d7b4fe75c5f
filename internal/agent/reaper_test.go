package agent

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/testenv"
)

// TestReapAll checks PID 1 mode in a child process made a subreaper, so
// that orphans come to it as they would to PID 1 (wait4(-1) in this test
// binary would steal other tests' children).
func TestReapAll(t *testing.T) {
	if os.Getenv("HOTCELL_REAPALL_CHILD") == "1" {
		reapAllChild(t)
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReapAll$", "-test.v")
	cmd.Env = append(os.Environ(), "HOTCELL_REAPALL_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	// The child passes whether it ran, skipped or matched no test at all,
	// so its verdict is read from its output.
	switch {
	case strings.Contains(string(out), "--- SKIP: TestReapAll"):
		testenv.SkipOrFail(t, "child skipped:\n%s", out)
	case !strings.Contains(string(out), "--- PASS: TestReapAll"):
		t.Fatalf("child did not run TestReapAll:\n%s", out)
	}
}

func reapAllChild(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		// The parent sees the skip and decides (it fails in CI).
		t.Skipf("cannot become a subreaper: %v", err)
	}
	r := NewReaper(true)
	defer r.Close()
	// The shell exits at once; its background sleep is orphaned to us.
	pid, exited, err := r.Start("/bin/sh", []string{"/bin/sh", "-c", "sleep 0.2 & exit 3"}, &syscall.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-exited:
		if st.Code != 3 || st.Signal != 0 {
			t.Errorf("pid %d: got %+v, want exit 3", pid, st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit status")
	}
	if !r.hasChildren() {
		t.Fatal("the orphaned sleep should still be our child")
	}
	for deadline := time.Now().Add(5 * time.Second); r.hasChildren(); {
		if time.Now().After(deadline) {
			t.Fatal("orphan was not reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
