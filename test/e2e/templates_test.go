package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// buildContext is a tar stream of files (name → content).
func buildContext(t *testing.T, files map[string]string) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// templateName is a name no other test or test binary on this engine uses,
// whose images are removed when the test ends (a forced delete leaves the
// ones sandboxes ran).
func templateName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "e2e-" + hex.EncodeToString(b)
	templateNamesMu.Lock()
	templateNames = append(templateNames, name)
	templateNamesMu.Unlock()
	t.Cleanup(func() { removeTemplateImages(name, false) })
	return name
}

// templateNames are the names templateName gave, for TestMain to remove
// what their tests' cleanups could not: an image a sandbox of the shared
// daemon (a pool's box, one the test left) still used then.
var (
	templateNamesMu sync.Mutex
	templateNames   []string
)

// removeTemplateImages removes the images left of template name; force
// (at the end of the run, once the shared daemon and its boxes are gone)
// removes them even if a container still refers to them. The engine
// untags at once but may take long to delete layers on a busy host: the
// wait is bounded, the untagged layers go with the engine's pruning.
func removeTemplateImages(name string, force bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "hotcell-tpl/"+name).Output()
	for _, ref := range strings.Fields(string(out)) {
		args := []string{"image", "rm", ref}
		if force {
			args = []string{"image", "rm", "-f", ref}
		}
		_ = exec.CommandContext(ctx, "docker", args...).Run()
	}
}

func wantTplStatus(t *testing.T, what string, err error, status int, field string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != status || !strings.Contains(ae.Message, field) {
		t.Errorf("%s: got %v, want %d naming %q", what, err, status, field)
	}
}

// TestTemplates builds a template from a Dockerfile FROM hotcell/base that
// adds a file and an env default, makes sandboxes from it, rebuilds it
// (a new version; the old sandbox keeps the old image), and deletes it
// (refused while used, then forced).
func TestTemplates(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	name := templateName(t)

	dockerfile := "FROM hotcell/base:latest\nCOPY hello.txt /opt/hello.txt\nRUN echo built-by-template\n"
	var log []string
	tpl, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"TPL_ENV": "from-template", "KEEP": "tpl"}},
	}, buildContext(t, map[string]string{"Dockerfile": dockerfile, "hello.txt": "v1\n"}), func(l string) { log = append(log, l) })
	if err != nil {
		t.Fatalf("build: %v\n%s", err, d.Logs())
	}
	if tpl.Name != name || tpl.Version != 1 || !strings.HasPrefix(tpl.Image, "hotcell-tpl/"+name+":1-") {
		t.Errorf("built: got %+v, want version 1 of %s", tpl, name)
	}
	if !strings.Contains(strings.Join(log, "\n"), "built-by-template") {
		t.Errorf("build log: got %q, want the RUN's output", log)
	}
	if got, err := d.C.GetTemplate(ctx, name); err != nil || got.Version != 1 || got.Defaults.Env["TPL_ENV"] != "from-template" {
		t.Errorf("get: got %+v, %v", got, err)
	}
	list, err := d.C.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range list {
		found = found || x.Name == name
	}
	if !found {
		t.Errorf("list: %s missing from %+v", name, list)
	}

	old := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Env: map[string]string{"KEEP": "req"}})
	if old.Template == nil || old.Template.Name != name || old.Template.Version != 1 || old.Image != tpl.Image {
		t.Errorf("sandbox from template: got template %+v image %q", old.Template, old.Image)
	}
	if out := mustOK(t, run(t, d, old.ID, "cat /opt/hello.txt; echo $TPL_ENV $KEEP"), "read"); out != "v1\nfrom-template req\n" {
		t.Errorf("in the sandbox: got %q, want the template's file, its env and the request's override", out)
	}
	if got, err := d.C.GetSandbox(ctx, old.ID); err != nil || got.Template == nil || got.Template.Version != 1 {
		t.Errorf("get sandbox: got template %+v, %v", got.Template, err)
	}

	// Rebuild: version 2, a new image; the old sandbox keeps version 1's.
	tpl2, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{},
		buildContext(t, map[string]string{"Dockerfile": dockerfile, "hello.txt": "v2\n"}), nil)
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if tpl2.Version != 2 || !strings.HasPrefix(tpl2.Image, "hotcell-tpl/"+name+":2-") {
		t.Errorf("rebuilt: got %+v, want version 2", tpl2)
	}
	fresh := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if out := mustOK(t, run(t, d, fresh.ID, "cat /opt/hello.txt"), "read"); out != "v2\n" || fresh.Template.Version != 2 {
		t.Errorf("new sandbox: got %q version %d, want v2", out, fresh.Template.Version)
	}
	if out := mustOK(t, run(t, d, old.ID, "cat /opt/hello.txt"), "read"); out != "v1\n" {
		t.Errorf("old sandbox after the rebuild: got %q, want v1", out)
	}

	// Delete: refused while sandboxes use it, then forced.
	err = d.C.DeleteTemplate(ctx, name, false)
	wantTplStatus(t, "delete while used", err, http.StatusConflict, old.ID)
	if _, err := d.C.GetTemplate(ctx, name); err != nil {
		t.Fatalf("a refused delete removed the template: %v", err)
	}
	if err := d.C.DeleteTemplate(ctx, name, true); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	_, err = d.C.GetTemplate(ctx, name)
	wantTplStatus(t, "get deleted", err, http.StatusNotFound, name)
	if out := mustOK(t, run(t, d, old.ID, "cat /opt/hello.txt"), "read"); out != "v1\n" {
		t.Errorf("old sandbox after the forced delete: got %q, want v1", out)
	}
}

// TestTemplateBuildFails: a RUN that exits 1 returns its log and the
// error, and records nothing.
func TestTemplateBuildFails(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	name := templateName(t)
	var log []string
	_, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{},
		buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\nRUN echo about-to-fail && exit 1\n"}),
		func(l string) { log = append(log, l) })
	wantTplStatus(t, "failed build", err, http.StatusBadRequest, "dockerfile")
	if !strings.Contains(strings.Join(log, "\n"), "about-to-fail") {
		t.Errorf("failed build log: got %q, want the RUN's output", log)
	}
	_, err = d.C.GetTemplate(ctx, name)
	wantTplStatus(t, "get after a failed build", err, http.StatusNotFound, name)
	if out, err := exec.Command("docker", "image", "ls", "-q", "hotcell-tpl/"+name).Output(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("images after a failed build: %q, %v, want none", out, err)
	}
}

// TestTemplateBadInput: malformed builds and creates are 400s naming the
// field, and a create from an unknown template is a 404.
func TestTemplateBadInput(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	ok := func() *bytes.Reader {
		return buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\n"})
	}
	for _, tc := range []struct {
		what, name string
		opts       client.BuildTemplateOptions
		field      string
	}{
		{"no name", "", client.BuildTemplateOptions{}, "name"},
		{"upper-case name", "Bad", client.BuildTemplateOptions{}, "name"},
		{"name with a slash", "a/b", client.BuildTemplateOptions{}, "name"},
		{"dockerfile outside the context", "okname", client.BuildTemplateOptions{Dockerfile: "../Dockerfile"}, "dockerfile"},
		{"bad default limit", "okname", client.BuildTemplateOptions{Defaults: &client.TemplateDefaults{Limits: client.Limits{MemoryMB: 1}}}, "defaults.limits.memoryMb"},
		{"bad default runtime", "okname", client.BuildTemplateOptions{Defaults: &client.TemplateDefaults{Runtime: "kvm"}}, "defaults.runtime"},
	} {
		_, err := d.C.BuildTemplate(ctx, tc.name, tc.opts, ok(), nil)
		wantTplStatus(t, tc.what, err, http.StatusBadRequest, tc.field)
	}
	_, err := d.C.BuildTemplate(ctx, "okname", client.BuildTemplateOptions{}, bytes.NewReader(nil), nil)
	wantTplStatus(t, "empty context", err, http.StatusBadRequest, "body")

	_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "x", Image: "hotcell/base:latest"})
	wantTplStatus(t, "template and image", err, http.StatusBadRequest, "template")
	_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "Bad Name"})
	wantTplStatus(t, "bad template name", err, http.StatusBadRequest, "template")
	_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "no-such-template-e2e"})
	wantTplStatus(t, "unknown template", err, http.StatusNotFound, "no-such-template-e2e")
	err = d.C.DeleteTemplate(ctx, "no-such-template-e2e", false)
	wantTplStatus(t, "delete unknown", err, http.StatusNotFound, "no-such-template-e2e")
}

// TestTemplateCLI: hotcell template build streams the build and prints
// NAME:VERSION, create --template makes a sandbox from it, template ls
// shows it, and template rm refuses while it is used, then forced.
func TestTemplateCLI(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	c := newCLI(t, d)
	name := templateName(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile.tpl"), []byte("FROM hotcell/base:latest\nCOPY note /opt/note\nRUN echo cli-build-step\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "note"), []byte("from-cli\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := c.want(0, "template", "build", "-t", name, "-f", "Dockerfile.tpl", "--env", "CLI_ENV=yes", dir)
	if r.stdout != name+":1\n" || !strings.Contains(r.stderr, "cli-build-step") {
		t.Errorf("build: got %v, want %s:1 and the build output", r, name)
	}
	if r := c.want(0, "template", "ls"); !strings.Contains(r.stdout, name) || !strings.Contains(r.stdout, "hotcell-tpl/"+name+":1-") {
		t.Errorf("ls: got %v", r)
	}
	id := strings.TrimSpace(c.want(0, "create", "--template", name, "--label", "test="+sanitizeLabel(t.Name())).stdout)
	t.Cleanup(func() { _ = d.C.DeleteSandbox(context.WithoutCancel(t.Context()), id) })
	if out := mustOK(t, run(t, d, id, "cat /opt/note; echo $CLI_ENV"), "read"); out != "from-cli\nyes\n" {
		t.Errorf("sandbox from the CLI's template: got %q", out)
	}
	if r := c.want(0, "inspect", id); !strings.Contains(r.stdout, name+" version 1") {
		t.Errorf("inspect: got %v, want the template and its version", r)
	}
	if r := c.want(1, "template", "rm", name); !strings.Contains(r.stderr, id) {
		t.Errorf("rm while used: got %v, want the sandbox named", r)
	}
	c.want(0, "template", "rm", "--force", name)
	if r := c.run("template", "build", "-t", "Bad", dir); r.code == 0 || !strings.Contains(r.stderr, "name") {
		t.Errorf("bad name: got %v, want an error naming name", r)
	}
}
