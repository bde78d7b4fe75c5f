package e2e

import (
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestBaseImage: the default image has what the README promises.
func TestBaseImage(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	out := mustOK(t, run(t, d, sb.ID, `bash -c 'echo $BASH_VERSION' >/dev/null && python3 -c 'print(6*7)' && git --version && curl --version | head -1 && ps -p 1 -o comm= && ls /etc/ssl/certs/ca-certificates.crt && pwd`), "tools in hotcell/base")
	for _, want := range []string{"42", "git version", "curl ", "hotcell-agent", "ca-certificates.crt", "/workspace"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}
