package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// e2bSandbox is what an E2B create answers.
type e2bSandbox struct {
	SandboxID, EnvdAccessToken string
	Domain                     *string
}

// e2bCreate creates a sandbox through the E2B API with body's fields
// (templateID is the base image) and a python HTTP server on port 8000; the
// sandbox is killed when the test ends.
func e2bCreate(t *testing.T, d *testdaemon.Daemon, fields string) e2bSandbox {
	t.Helper()
	body := `{"templateID":"` + testenv.BaseImage(t) + `","metadata":{"test":"` + sanitizeLabel(t.Name()) + `"}`
	if fields != "" {
		body += "," + fields
	}
	st, raw := e2bCall(t, d.Addr, e2bKey(t, d), "POST", "/v2/sandboxes", body+"}")
	if st != http.StatusCreated {
		t.Fatalf("create %s: %d %s\n%s", body, st, raw, d.Logs())
	}
	var sb e2bSandbox
	if err := json.Unmarshal([]byte(raw), &sb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.C.DeleteSandbox(ctx, sb.SandboxID)
	})
	if _, err := d.C.StartProcess(t.Context(), sb.SandboxID, client.StartProcessRequest{
		Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}, Cwd: "/tmp",
	}); err != nil {
		t.Fatalf("start the app: %v", err)
	}
	return sb
}

// hostRequest sends method path to the daemon with Host: host and hdr, as a
// client resolving host to the daemon would (no DNS: the tests only talk to
// loopback).
func hostRequest(t *testing.T, d *testdaemon.Daemon, method, host, path, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+d.Addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, host, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// waitApp waits until port 8000 of sb answers through the preview by
// host name with hdr (the server takes a moment to start).
func waitApp(t *testing.T, d *testdaemon.Daemon, id string, hdr map[string]string) {
	t.Helper()
	for range 300 {
		if st, _ := hostRequest(t, d, "GET", "8000-"+id+".preview.localhost", "/", "", hdr); st == http.StatusOK {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the app of %s never answered\n%s", id, d.Logs())
}

// TestE2BHostRouting: the E2B SDK's default URLs work against hotcell's
// preview domain. <port>-<id>.<domain> (sandbox.getHost) answers without a
// credential, as on E2B, and 49983-<id>.<domain> is the sandbox's envd,
// which the host names whatever E2b-Sandbox-Id header comes with it.
func TestE2BHostRouting(t *testing.T) {
	d := sharedDaemon(t)
	a := e2bCreate(t, d, "")
	b := e2bCreate(t, d, "")
	if a.Domain == nil || *a.Domain != "preview.localhost" {
		t.Fatalf("domain %v, want the daemon's preview domain", a.Domain)
	}

	// getHost(8000) with no credential at all.
	waitApp(t, d, a.SandboxID, nil)
	if st, body := hostRequest(t, d, "GET", "8000-"+a.SandboxID+".preview.localhost", "/", "", nil); st != 200 || !strings.Contains(body, "Directory listing") {
		t.Errorf("public preview: %d %s", st, body)
	}

	envd := "49983-" + a.SandboxID + ".preview.localhost"
	if st, body := hostRequest(t, d, "GET", envd, "/health", "", nil); st != http.StatusNoContent {
		t.Errorf("envd health by host: %d %s", st, body)
	}
	list := func(host string, hdr map[string]string) (int, string) {
		hdr["Content-Type"] = "application/json"
		hdr["Connect-Protocol-Version"] = "1"
		return hostRequest(t, d, "POST", host, "/process.Process/List", "{}", hdr)
	}
	st, body := list(envd, map[string]string{"X-Access-Token": a.EnvdAccessToken})
	if st != 200 || !strings.Contains(body, `"processes"`) {
		t.Errorf("envd List by host: %d %s", st, body)
	}
	// The host names the sandbox: a header naming b is overridden, so a's
	// token works and b's does not.
	if st, body := list(envd, map[string]string{"X-Access-Token": a.EnvdAccessToken, "E2b-Sandbox-Id": b.SandboxID}); st != 200 {
		t.Errorf("envd by a's host with b's id in the header, a's token: %d %s", st, body)
	}
	if st, body := list(envd, map[string]string{"X-Access-Token": b.EnvdAccessToken, "E2b-Sandbox-Id": b.SandboxID}); st != http.StatusUnauthorized || !strings.Contains(body, "unauthenticated") {
		t.Errorf("envd by a's host with b's id and token: %d %s, want 401", st, body)
	}
}

// TestHostileE2BPrivateTraffic: a sandbox made with
// network.allowPublicTraffic=false keeps its ports behind hotcell's preview
// credentials. An anonymous client is refused, another sandbox's envd
// token opens nothing, and the owner (API token) and a public neighbour
// still get through.
func TestHostileE2BPrivateTraffic(t *testing.T) {
	d := sharedDaemon(t)
	priv := e2bCreate(t, d, `"network":{"allowPublicTraffic":false}`)
	pub := e2bCreate(t, d, "")
	host := "8000-" + priv.SandboxID + ".preview.localhost"

	// The app runs: its owner reaches it.
	waitApp(t, d, priv.SandboxID, map[string]string{"Authorization": "Bearer " + daemonToken(t, d)})
	for _, hdr := range []map[string]string{
		nil,
		{"X-Access-Token": priv.EnvdAccessToken}, // envd's token is not a preview credential
		{"Authorization": "Bearer " + pub.EnvdAccessToken},
		{"E2b-Traffic-Access-Token": pub.EnvdAccessToken},
	} {
		if st, body := hostRequest(t, d, "GET", host, "/", "", hdr); st != http.StatusUnauthorized {
			t.Errorf("private preview with %v: %d %s, want 401", hdr, st, body)
		}
	}
	// The neighbour, public, still answers anyone; the daemon is fine.
	waitApp(t, d, pub.SandboxID, nil)
	if _, err := d.C.GetSandbox(t.Context(), priv.SandboxID); err != nil {
		t.Errorf("daemon after the attempts: %v", err)
	}
}
