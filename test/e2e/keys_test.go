package e2e

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// e2bKeyFormat is the format the E2B SDK checks client-side.
var e2bKeyFormat = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

// keyName is a key name for this test, unique on the shared daemon.
func keyName(t *testing.T, suffix string) string {
	return strings.ToLower(sanitizeLabel(t.Name())) + "-" + suffix
}

// bearerStatus calls GET path with Authorization: Bearer tok (no header
// for "") and returns the status and body.
func bearerStatus(t *testing.T, d *testdaemon.Daemon, method, path, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+d.Addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, readAll(resp)
}

// TestAPIKeys mints a key with the CLI, uses it as a bearer token (raw
// HTTP, the Go SDK, the CLI) to create, exec in and destroy a sandbox, lists
// keys, and revokes it: from then on it is a 401, and the daemon's token
// still works.
func TestAPIKeys(t *testing.T) {
	d := sharedDaemon(t)
	admin := newCLI(t, d)
	name := keyName(t, "ci")

	r := admin.want(0, "keys", "create", name)
	key := strings.TrimSpace(r.stdout)
	if !e2bKeyFormat.MatchString(key) {
		t.Fatalf("keys create printed %q, want one key matching %v", r.stdout, e2bKeyFormat)
	}
	if !strings.Contains(r.stderr, "not shown again") {
		t.Errorf("keys create: stderr %q does not warn that the key is shown once", r.stderr)
	}
	t.Cleanup(func() { _ = d.C.DeleteAPIKey(t.Context(), name) }) // after keys rm, a no-op

	r = admin.want(0, "keys", "ls")
	if !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, key[:10]) || strings.Contains(r.stdout, key) {
		t.Errorf("keys ls: got %q, want the name %s and hint %s, never the key", r.stdout, name, key[:10])
	}
	if line := lineWith(r.stdout, name); !strings.HasSuffix(strings.TrimSpace(line), "never") {
		t.Errorf("keys ls before any use: line %q, want last used never", line)
	}

	// The key as a bearer token: raw HTTP, the Go SDK, the CLI.
	if code, body := bearerStatus(t, d, "GET", "/v1/sandboxes", key); code != http.StatusOK {
		t.Fatalf("GET /v1/sandboxes with the key: got %d %s, want 200", code, body)
	}
	kc, err := client.New("http://"+d.Addr, key)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := kc.CreateSandbox(t.Context(), client.CreateSandboxRequest{Image: testenv.BaseImage(t), Labels: map[string]string{"test": sanitizeLabel(t.Name())}})
	if err != nil {
		t.Fatalf("create a sandbox with the key: %v", err)
	}
	res, err := kc.Exec(t.Context(), sb.ID, client.ExecRequest{Command: "echo via-key"})
	if err != nil || strings.TrimSpace(res.Stdout) != "via-key" {
		t.Errorf("exec with the key: got %+v, %v", res, err)
	}
	user := newCLIWith(t, "http://"+d.Addr, key)
	if r := user.want(0, "ls", "-q"); !strings.Contains(r.stdout, sb.ID) {
		t.Errorf("hotcell ls with the key: got %q, want %s listed", r.stdout, sb.ID)
	}
	if err := kc.DeleteSandbox(t.Context(), sb.ID); err != nil {
		t.Errorf("destroy the sandbox with the key: %v", err)
	}

	r = admin.want(0, "keys", "ls", "--json")
	if !strings.Contains(r.stdout, `"lastUsedAt"`) {
		t.Errorf("keys ls --json after use: got %q, want lastUsedAt", r.stdout)
	}

	// Refusals name what is wrong and change nothing.
	if r := admin.want(1, "keys", "create", name); !strings.Contains(r.stderr, "already exists") {
		t.Errorf("keys create of a taken name: stderr %q, want already exists", r.stderr)
	}
	if r := admin.want(1, "keys", "create", "bad/name"); !strings.Contains(r.stderr, "name") {
		t.Errorf("keys create bad/name: stderr %q, want the field named", r.stderr)
	}
	if code, body := bearerStatus(t, d, "GET", "/v1/sandboxes", key); code != http.StatusOK {
		t.Errorf("the key after refused creates: got %d %s, want 200", code, body)
	}

	admin.want(0, "keys", "rm", name)
	if code, body := bearerStatus(t, d, "GET", "/v1/sandboxes", key); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/sandboxes with the revoked key: got %d %s, want 401", code, body)
	}
	if r := user.want(1, "ls"); !strings.Contains(r.stderr, "refused") {
		t.Errorf("hotcell ls with the revoked key: stderr %q, want the token refused", r.stderr)
	}
	if r := admin.want(1, "keys", "rm", name); !strings.Contains(r.stderr, "not found") {
		t.Errorf("keys rm of a revoked key: stderr %q, want not found", r.stderr)
	}
	if r := admin.want(0, "keys", "ls"); strings.Contains(r.stdout, name) {
		t.Errorf("keys ls after rm: got %q, want %s gone", r.stdout, name)
	}
	if code, body := bearerStatus(t, d, "GET", "/v1/sandboxes", daemonToken(t, d)); code != http.StatusOK {
		t.Errorf("the daemon's token: got %d %s, want 200", code, body)
	}
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
