package testdaemon

import (
	"os"
	"syscall"
	"testing"

	"github.com/hotcell/hotcell/client"
)

func TestMain(m *testing.M) {
	code := m.Run()
	CloseShared()
	os.Exit(code)
}

// TestSharedOutlivesItsFirstTest: the shared daemon started by one test
// keeps serving the tests after it and reports nothing to the test that
// started it, which has ended (a testing.TB must not be used then).
func TestSharedOutlivesItsFirstTest(t *testing.T) {
	var first *Daemon
	t.Run("first", func(t *testing.T) { first = Shared(t) })
	t.Run("later", func(t *testing.T) {
		d := Shared(t)
		if d != first {
			t.Fatal("a second daemon was started")
		}
		if d.owner != nil {
			t.Fatal("the shared daemon keeps the test that started it")
		}
		if _, err := d.C.ListSandboxes(t.Context(), client.ListOptions{}); err != nil {
			t.Fatalf("list sandboxes on the shared daemon: %v", err)
		}
		defer func() {
			if recover() == nil {
				t.Error("Stop of the shared daemon did not refuse")
			}
		}()
		d.Stop(syscall.SIGTERM)
	})
}
