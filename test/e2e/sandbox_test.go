package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	dockerclient "github.com/moby/moby/client"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

func wantStatus(t *testing.T, err error, status int, what string) *client.APIError {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("%s: got error %v, want an API error with status %d", what, err, status)
	}
	if ae.Status != status {
		t.Fatalf("%s: got status %d (%s: %s), want %d", what, ae.Status, ae.Code, ae.Message, status)
	}
	return ae
}

// TestSandboxLifecycle is the main path: create → exec → a 5 MiB
// binary file round trip → list, stat, mkdir -p, move, remove → destroy,
// and the workspace volume is gone afterwards.
func TestSandboxLifecycle(t *testing.T) {
	d := sharedDaemon(t)
	ctx := t.Context()
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Env:    map[string]string{"GREETING": "hello"},
		Labels: map[string]string{"suite": "e2e", "test": "lifecycle"},
	})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, d.Logs())
	}
	if sb.State != client.StateRunning || sb.Image != d.Image || !sb.Persist {
		t.Fatalf("got sandbox %+v, want running, image %s, persist", sb, d.Image)
	}

	res := run(t, d, sb.ID, `echo "$GREETING from $(pwd)"`)
	if got, want := mustOK(t, res, "echo"), "hello from /workspace\n"; got != want {
		t.Fatalf("echo: got %q, want %q", got, want)
	}

	data := make([]byte, 5<<20)
	rand.Read(data)
	if _, err := d.C.WriteFile(ctx, sb.ID, "data/blob.bin", bytes.NewReader(data), 0o600); err != nil {
		t.Fatalf("write: %v", err)
	}
	rc, err := d.C.ReadFile(ctx, sb.ID, "/workspace/data/blob.bin", nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (err %v), want the %d bytes written", len(got), err, len(data))
	}
	// The file inside has the same digest: the bytes really are in the box.
	sum := sha256.Sum256(data)
	if out := mustOK(t, run(t, d, sb.ID, "sha256sum data/blob.bin"), "sha256sum"); !strings.HasPrefix(out, hexs(sum[:])) {
		t.Fatalf("sha256 inside: got %q, want %x", out, sum)
	}

	st, err := d.C.Stat(ctx, sb.ID, "data/blob.bin")
	if err != nil || st.Size != int64(len(data)) || st.Type != client.FileTypeFile || st.Mode != 0o600 {
		t.Fatalf("stat: got %+v, %v; want a 0600 file of %d bytes", st, err, len(data))
	}
	if _, err := d.C.Mkdir(ctx, sb.ID, client.MkdirRequest{Path: "a/b/c", Parents: true}); err != nil {
		t.Fatalf("mkdir -p: %v", err)
	}
	if _, err := d.C.Move(ctx, sb.ID, client.MoveRequest{From: "data/blob.bin", To: "a/b/c/moved.bin"}); err != nil {
		t.Fatalf("move: %v", err)
	}
	list, err := d.C.ListDir(ctx, sb.ID, "a/b/c")
	if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "moved.bin" || list.Entries[0].Size != int64(len(data)) {
		t.Fatalf("list: got %+v, %v; want moved.bin", list, err)
	}
	if _, err := d.C.Stat(ctx, sb.ID, "data/blob.bin"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat of moved-away file: got %v, want not found", err)
	}
	if err := d.C.RemoveFile(ctx, sb.ID, "a"); err == nil {
		t.Fatal("removing a non-empty directory without recursive succeeded")
	}
	if err := d.C.RemoveAll(ctx, sb.ID, "a"); err != nil {
		t.Fatalf("remove recursive: %v", err)
	}
	if _, err := d.C.Stat(ctx, sb.ID, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat after remove: got %v, want not found", err)
	}

	// Get and list see it, filtered by label and state.
	if got, err := d.C.GetSandbox(ctx, sb.ID); err != nil || got.ID != sb.ID || got.Labels["suite"] != "e2e" {
		t.Fatalf("get: %+v, %v", got, err)
	}
	found, err := d.C.ListSandboxes(ctx, client.ListOptions{State: client.StateRunning, Labels: map[string]string{"test": "lifecycle"}})
	if err != nil || len(found) != 1 || found[0].ID != sb.ID {
		t.Fatalf("list by label: got %v, %v; want just %s", ids(found), err, sb.ID)
	}
	if found, _ := d.C.ListSandboxes(ctx, client.ListOptions{State: client.StateStopped, Labels: map[string]string{"test": "lifecycle"}}); len(found) != 0 {
		t.Fatalf("list stopped: got %v, want none", ids(found))
	}

	dc := testenv.RequireDocker(t)
	if !workspaceExists(t, d, sb.ID) {
		t.Fatalf("workspace of %s before destroy: not found", sb.ID)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy twice: %v", err)
	}
	// The box and its workspace go in the background after the answer.
	waitNothingLeft(t, d, sb.ID)
	if workspaceExists(t, d, sb.ID) {
		t.Fatalf("workspace of %s still exists after destroy", sb.ID)
	}
	if _, err := dc.ContainerInspect(ctx, "hotcell-"+sb.ID, dockerclient.ContainerInspectOptions{}); err == nil {
		t.Fatalf("container of %s still exists after destroy", sb.ID)
	}
	if _, err := d.C.GetSandbox(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get after destroy: got %v, want not found", err)
	}
}

func ids(sbs []client.Sandbox) []string {
	var out []string
	for _, s := range sbs {
		out = append(out, s.ID)
	}
	return out
}

func hexs(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, len(b)*2)
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestAuth: every route but /healthz needs the token.
func TestAuth(t *testing.T) {
	d := sharedDaemon(t)
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/v1/host", "", http.StatusUnauthorized},
		{"/v1/sandboxes", "wrong", http.StatusUnauthorized},
		{"/v1/openapi.json", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+d.Addr+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with token %q: got %d, want %d", tc.path, tc.token, resp.StatusCode, tc.want)
		}
	}
	host, err := d.C.Host(t.Context())
	if err != nil || host.Driver != "docker" || host.EngineVersion == "" || host.CPUs < 1 || host.MemoryBytes <= 0 {
		t.Fatalf("host: got %+v, %v", host, err)
	}
}
