package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestE2BControl runs the E2B control-plane calls (create, connect, list,
// getInfo, setTimeout, pause, kill, errors) through the real e2b SDK.
func TestE2BControl(t *testing.T) {
	runE2BNode(t, "control.test.mjs", "E2B_ENVD_VERSION="+e2b.EnvdVersion)
}

// e2bCall sends an E2B control-plane request to d with key as X-API-KEY and
// returns the status and body.
func e2bCall(t *testing.T, addr, key, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+"/e2b"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestE2BControlRoutes drives the control plane without the SDK: what a
// create makes is an ordinary hotcell sandbox, and errors carry E2B's JSON
// code (the SDK's kill returns false only on a JSON 404).
func TestE2BControlRoutes(t *testing.T) {
	d := sharedDaemon(t)
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(tok))

	st, body := e2bCall(t, d.Addr, key, "POST", "/v2/sandboxes",
		`{"templateID":"base","metadata":{"test":"`+sanitizeLabel(t.Name())+`"},"envVars":{"A":"1"},"timeout":300,"allow_internet_access":false}`)
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s\n%s", st, body, d.Logs())
	}
	var sb struct {
		SandboxID, TemplateID, ClientID, EnvdVersion, EnvdAccessToken string
		Domain                                                        *string
	}
	if err := json.Unmarshal([]byte(body), &sb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.C.DeleteSandbox(t.Context(), sb.SandboxID) })
	if sb.TemplateID != "base" || sb.EnvdVersion == "" || sb.EnvdAccessToken == "" || sb.ClientID == "" ||
		sb.Domain == nil || *sb.Domain != "preview.localhost" {
		t.Errorf("create answered %s", body)
	}

	// An ordinary hotcell sandbox: the default image, envs, labels, a
	// lifetime and no network.
	h, err := d.C.GetSandbox(t.Context(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if h.Image != d.Image || h.Env["A"] != "1" || h.Labels["test"] == "" || h.Timeouts == nil || h.Timeouts.ExpiresAt == nil ||
		h.Egress == nil || h.Egress.Mode != "none" {
		t.Errorf("hotcell sees %+v", h)
	}
	if out := mustOK(t, run(t, d, sb.SandboxID, "echo $A"), "exec"); strings.TrimSpace(out) != "1" {
		t.Errorf("env in the sandbox: %q", out)
	}

	// Errors: JSON with the code the SDK tests.
	for _, c := range []struct {
		key, method, path, body string
		status                  int
	}{
		{"", "GET", "/v2/sandboxes", "", 401},
		{"e2b_0000000000000000000000000000000000000000", "DELETE", "/sandboxes/" + sb.SandboxID, "", 401},
		{key, "POST", "/v2/sandboxes", `{"templateID":"base","mcp":{"x":{}}}`, 400},
		{key, "GET", "/sandboxes/sb-000000000000", "", 404},
	} {
		st, body := e2bCall(t, d.Addr, c.key, c.method, c.path, c.body)
		var e struct {
			Code    int
			Message string
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || st != c.status || e.Code != c.status || e.Message == "" {
			t.Errorf("%s %s: %d %s, want a JSON %d", c.method, c.path, st, body, c.status)
		}
	}
	if _, err := d.C.GetSandbox(t.Context(), sb.SandboxID); err != nil {
		t.Errorf("a refused kill touched the sandbox: %v", err)
	}

	if st, body := e2bCall(t, d.Addr, key, "DELETE", "/sandboxes/"+sb.SandboxID, ""); st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, body)
	}
	if st, body := e2bCall(t, d.Addr, key, "DELETE", "/sandboxes/"+sb.SandboxID, ""); st != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Errorf("kill again: %d %s", st, body)
	}
	if _, err := d.C.GetSandbox(t.Context(), sb.SandboxID); err == nil {
		t.Errorf("the killed sandbox is still there")
	}
}

// TestE2BDocsExample runs the example of docs/e2b.md, as it is there, on a
// daemon whose e2b_templates maps base to hotcell/base (the test daemons'
// default image is busybox, which has no bash).
func TestE2BDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/e2b.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("e2b/example.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), string(example)) {
		t.Fatalf("test/e2e/e2b/example.mjs is not the example of docs/e2b.md any more: copy it from there")
	}
	image := testenv.BaseImage(t)
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--e2b-templates", "base=" + image}})
	t.Cleanup(d.Close)
	out := runE2BNodeOn(t, d, "example.mjs")
	for _, want := range []string{"hello from sb-", "\nhi\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the example printed no %q", want)
		}
	}
	list, err := d.C.ListSandboxes(t.Context(), client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Errorf("the example's sandbox was not killed: %v %v", list, err)
	}
}
