package e2e

import "testing"

// TestE2BControl runs the E2B control-plane calls (create, connect, list,
// getInfo, setTimeout, pause, kill) through the real e2b SDK.
func TestE2BControl(t *testing.T) {
	runE2BNode(t, "control.test.mjs")
}
