package e2e

import (
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestHostilePreviewServiceWorker: an app in a sandbox answers its service
// worker script with Service-Worker-Allowed: /, which on a preview by path
// would let the worker control the whole API origin. By path the header is
// dropped, the answer gets an opaque origin (CSP sandbox) and a browser's
// service worker fetch is refused; by host name, an origin of its own,
// the app's answer passes as it is.
func TestHostilePreviewServiceWorker(t *testing.T) {
	d := sharedDaemon(t)
	// The base image, as the ports tests use for their background servers.
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	ctx := t.Context()
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/portsrv"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/workspace/portsrv", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	startBackground(t, d, sb.ID, "/workspace/portsrv http 8002")
	if _, err := d.C.WaitPort(ctx, sb.ID, 8002, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pv, err := d.C.PreviewURL(ctx, sb.ID, 8002)
	if err != nil {
		t.Fatal(err)
	}
	hc := loopbackClient(d)
	tok := map[string]string{"X-Hotcell-Preview-Token": pv.Token}
	byPath := "http://" + d.Addr + "/v1/sandboxes/" + sb.ID + "/ports/8002/http/sw.js"
	_, port, _ := net.SplitHostPort(d.Addr)
	byHost := "http://8002-" + sb.ID + ".preview.localhost:" + port + "/sw.js"

	// The premise: the app does send the header (seen by host name).
	code, body, resp := get(t, hc, byHost, map[string]string{"X-Hotcell-Preview-Token": pv.Token, "Service-Worker": "script"})
	if code != http.StatusOK || resp.Header.Get("Service-Worker-Allowed") != "/" || !strings.Contains(body, "addEventListener") {
		t.Fatalf("by host: got %d %q with Service-Worker-Allowed %q; want the app's script and header", code, body, resp.Header.Get("Service-Worker-Allowed"))
	}

	code, body, resp = get(t, hc, byPath, tok)
	if code != http.StatusOK || !strings.Contains(body, "addEventListener") {
		t.Fatalf("by path: got %d %q, want the app's answer", code, body)
	}
	if v := resp.Header.Values("Service-Worker-Allowed"); len(v) != 0 {
		t.Errorf("by path: Service-Worker-Allowed %q passed through", v)
	}
	if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || csp[0] != api.PreviewPathCSP {
		t.Errorf("by path: Content-Security-Policy %q, want %q", csp, api.PreviewPathCSP)
	}

	withSW := map[string]string{"X-Hotcell-Preview-Token": pv.Token, "Service-Worker": "script"}
	code, body, _ = get(t, hc, byPath, withSW)
	if code != http.StatusForbidden || !strings.Contains(body, "service worker") {
		t.Errorf("by path, service worker fetch: got %d %s, want 403 saying why", code, body)
	}
	// The sandbox and its preview still work after the refusals.
	if code, _, _ := get(t, hc, byPath, tok); code != http.StatusOK {
		t.Errorf("by path after the refusal: got %d, want 200", code)
	}
}
