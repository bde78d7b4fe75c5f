package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// TestHostileHostHeader: a DNS-rebinding page reaches the daemon on
// loopback but names its own domain in Host. The daemon answers such a
// request, on any route, with a 403 naming allowed_hosts; names in that
// setting, loopback names and the loopback address keep working.
func TestHostileHostHeader(t *testing.T) {
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--allowed-hosts", "hotcell.test.invalid,*.tools.test.invalid"}})
	t.Cleanup(d.Close)
	hc := loopbackClient(d) // every request goes to d.Addr, whatever its host
	_, port, _ := strings.Cut(d.Addr, ":")
	auth := map[string]string{"Authorization": "Bearer " + daemonToken(t, d)}
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"rebind.attacker.test.invalid:" + port, "/v1/sandboxes", http.StatusForbidden},
		{"rebind.attacker.test.invalid", "/healthz", http.StatusForbidden},
		{"hotcell.test.invalid.attacker.test.invalid", "/v1/sandboxes", http.StatusForbidden},
		{"hotcell.test.invalid:" + port, "/v1/sandboxes", http.StatusOK},
		{"ci.tools.test.invalid", "/v1/sandboxes", http.StatusOK},
		{"localhost:" + port, "/v1/sandboxes", http.StatusOK},
		{d.Addr, "/v1/sandboxes", http.StatusOK},
	} {
		code, body, _ := get(t, hc, "http://"+tc.host+tc.path, auth)
		if code != tc.want {
			t.Errorf("GET %s with Host %s: got %d %s, want %d", tc.path, tc.host, code, body, tc.want)
		}
		if tc.want == http.StatusForbidden && !strings.Contains(body, "allowed_hosts") {
			t.Errorf("GET %s with Host %s: %s does not name allowed_hosts", tc.path, tc.host, body)
		}
	}
	// The Go SDK, as every client on the daemon's host uses it, still works.
	if _, err := d.C.ListSandboxes(t.Context(), client.ListOptions{}); err != nil {
		t.Errorf("SDK list after the refusals: %v", err)
	}
}
