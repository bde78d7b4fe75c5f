package e2e

import (
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
)

// TestHostileCLITerminalEscapes: a process whose command line carries
// terminal control sequences (set the window title, clear the screen, an
// 8-bit CSI) is listed by `hotcell ps` with those sequences escaped, so
// that listing a hostile sandbox cannot take over the operator's terminal.
func TestHostileCLITerminalEscapes(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	const payload = "\x1b]0;pwned\x07\x1b[2J\u009b31m"
	p, err := d.C.StartProcess(t.Context(), sb.ID, client.StartProcessRequest{
		Argv: []string{"sh", "-c", "sleep 300", payload},
		Name: "evil",
	})
	if err != nil {
		t.Fatalf("start process: %v", err)
	}
	c := newCLI(t, d)
	out := c.want(0, "ps", sb.ID).stdout
	if !strings.Contains(out, p.ID) || !strings.Contains(out, "sleep 300") {
		t.Fatalf("ps does not list the process %s:\n%s", p.ID, out)
	}
	if strings.ContainsAny(out, "\x1b\x07\u009b") {
		t.Errorf("ps printed raw control characters: %q", out)
	}
	if want := `\x1b]0;pwned\x07\x1b[2J\x9b31m`; !strings.Contains(out, want) {
		t.Errorf("ps output %q does not show the command's escapes as %q", out, want)
	}
	// --json is for programs and keeps the exact bytes.
	if js := c.want(0, "ps", sb.ID, "--json").stdout; !strings.Contains(js, `\u001b]0;pwned`) {
		t.Errorf("ps --json lost the exact command: %q", js)
	}
}
