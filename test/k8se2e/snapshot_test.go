package k8se2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// TestKubernetesSnapshotAndSavedTemplate: with a registry, a daemon on the
// Kubernetes driver snapshots a running sandbox and saves it as a
// template, as on Docker. The root filesystem goes to the cluster's
// registry (the agent streams it; the driver pushes it), the workspace to
// a backup; a sandbox made from either has both; deleting the snapshot
// and the template removes their images from the registry, and not while
// a sandbox still runs one.
func TestKubernetesSnapshotAndSavedTemplate(t *testing.T) {
	d := startKubeDaemonWithRegistry(t)
	env := d.k8s
	ctx, c := t.Context(), d.C
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Env: map[string]string{"FROM_CREATE": "kept"}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, d.Logs())
	}
	execOK(t, c, sb.ID, "mkdir -p /opt/made && echo root-fs > /opt/made/mark && echo workspace > /workspace/ws && rm /bin/vi")

	sn, err := c.CreateSnapshot(ctx, sb.ID)
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, d.Logs())
	}
	if !registryHas(t, env, sn.Image) {
		t.Fatalf("snapshot image %s is not in the registry", sn.Image)
	}
	// The sandbox goes on, and what it does now is not in the snapshot.
	execOK(t, c, sb.ID, "echo after > /opt/made/after")

	fork, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: sn.ID})
	if err != nil {
		t.Fatalf("create from the snapshot: %v\n%s", err, d.Logs())
	}
	got := execOK(t, c, fork.ID, "cat /opt/made/mark /workspace/ws; test -e /opt/made/after && echo after-leaked; test -e /bin/vi && echo vi-back; echo $FROM_CREATE")
	if got != "root-fs\nworkspace\nkept\n" {
		t.Errorf("the sandbox from the snapshot: got %q, want the root filesystem and workspace of the snapshot, and the create's env", got)
	}
	// Its image is in use: the snapshot stays, with its image.
	var apiErr *client.APIError
	if err := c.DeleteSnapshot(ctx, sb.ID, sn.ID); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Errorf("delete the snapshot a sandbox runs: got %v, want 409", err)
	}
	if !registryHas(t, env, sn.Image) {
		t.Errorf("a refused delete removed the image %s", sn.Image)
	}

	tpl, err := c.SaveTemplate(ctx, sb.ID, "saved-k8s", nil)
	if err != nil {
		t.Fatalf("save as template: %v\n%s", err, d.Logs())
	}
	fromTpl, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tpl.Name})
	if err != nil {
		t.Fatalf("create from the saved template: %v\n%s", err, d.Logs())
	}
	if got := execOK(t, c, fromTpl.ID, "cat /opt/made/mark /opt/made/after /workspace/ws"); got != "root-fs\nafter\nworkspace\n" {
		t.Errorf("the sandbox from the saved template: got %q", got)
	}

	// A snapshot of a sandbox of a made image is that image's layers and
	// one layer more, of what the sandbox changed.
	execOK(t, c, fromTpl.ID, "echo changed > /opt/made/mark && rm /opt/made/after && mkdir -p /srv/new && echo n > /srv/new/f")
	sn2, err := c.CreateSnapshot(ctx, fromTpl.ID)
	if err != nil {
		t.Fatalf("snapshot of the template's sandbox: %v\n%s", err, d.Logs())
	}
	tplLayers, snLayers := registryLayers(t, env, tpl.Image), registryLayers(t, env, sn2.Image)
	if len(snLayers) != len(tplLayers)+1 || !slices.Equal(snLayers[:len(tplLayers)], tplLayers) {
		t.Errorf("the snapshot's layers %v, want the template's %v and one more", snLayers, tplLayers)
	} else if last := snLayers[len(snLayers)-1]; last.Size > 64<<10 {
		t.Errorf("the snapshot's own layer is %d bytes: more than what the sandbox changed", last.Size)
	}
	if strings.Contains(d.Logs(), "pushing a flat image") {
		t.Errorf("the commit fell back to a flat image:\n%s", d.Logs())
	}
	fork2, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: sn2.ID})
	if err != nil {
		t.Fatalf("create from the layered snapshot: %v\n%s", err, d.Logs())
	}
	if got := execOK(t, c, fork2.ID, "cat /opt/made/mark /srv/new/f /workspace/ws; test -e /opt/made/after && echo after-back; test -x /bin/sh && echo base-kept"); got != "changed\nn\nworkspace\nbase-kept\n" {
		t.Errorf("the sandbox from the layered snapshot: got %q", got)
	}
	if err := c.DeleteSandbox(ctx, fork2.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSnapshot(ctx, fromTpl.ID, sn2.ID); err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{fork.ID, fromTpl.ID} {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Fatalf("destroy %s: %v", id, err)
		}
	}
	if err := c.DeleteSnapshot(ctx, sb.ID, sn.ID); err != nil {
		t.Fatalf("delete the snapshot: %v", err)
	}
	if registryHas(t, env, sn.Image) {
		t.Errorf("the deleted snapshot's image %s is still in the registry", sn.Image)
	}
	if err := c.DeleteTemplate(ctx, tpl.Name, false); err != nil {
		t.Fatalf("delete the template: %v", err)
	}
	if registryHas(t, env, tpl.Image) {
		t.Errorf("the deleted template's image %s is still in the registry", tpl.Image)
	}
	if got := execOK(t, c, sb.ID, "cat /opt/made/mark"); got != "root-fs\n" {
		t.Errorf("the snapshotted sandbox after all: %q", got)
	}
}

// startKubeDaemonWithRegistry starts a daemon whose driver keeps the
// images it makes in the test cluster's registry, with its credentials
// in a Secret of the daemon's namespace.
func startKubeDaemonWithRegistry(t *testing.T, extra ...string) *kubeDaemon {
	t.Helper()
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	return startKubeDaemonIn(t, env, ns, append([]string{
		"--kubernetes-registry", env.Registry, "--kubernetes-registry-url", "http://" + env.Registry,
		"--kubernetes-registry-secret", env.RegistrySecret(t, ns),
	}, extra...)...)
}

// layerInfo is a layer of an image's manifest.
type layerInfo struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// registryLayers are the layers of ref's manifest in the cluster's
// registry.
func registryLayers(t *testing.T, env *testk8s.Env, ref string) []layerInfo {
	t.Helper()
	resp := manifestCall(t, env, http.MethodGet, ref)
	defer resp.Body.Close()
	var m struct{ Layers []layerInfo }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&m) != nil {
		t.Fatalf("the manifest of %s: %s", ref, resp.Status)
	}
	return m.Layers
}

// registryHas says whether the cluster's registry has ref, an image of
// hotcell's own repositories (repo:tag, kept under its name).
func registryHas(t *testing.T, env *testk8s.Env, ref string) bool {
	t.Helper()
	resp := manifestCall(t, env, http.MethodHead, ref)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusNotFound:
		return false
	}
	t.Fatalf("HEAD %s in the registry: %s", ref, resp.Status)
	return false
}

// manifestCall asks the cluster's registry for ref's manifest (repo:tag)
// with its credentials.
func manifestCall(t *testing.T, env *testk8s.Env, method, ref string) *http.Response {
	t.Helper()
	repo, tag, ok := strings.Cut(ref, ":")
	if !ok {
		t.Fatalf("image %q has no tag", ref)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, fmt.Sprintf("http://%s/v2/%s/manifests/%s", env.Registry, repo, tag), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	req.SetBasicAuth(env.RegistryUser, env.RegistryPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
