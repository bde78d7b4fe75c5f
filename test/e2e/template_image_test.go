package e2e

import (
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestTemplateFromImage registers an existing image as a template with no
// build (the way templates are made on Kubernetes): sandboxes run it with
// the template's defaults, registering again is the next version, bad
// input is a 400 naming the field, and deleting the template leaves the
// image, which hotcell did not make.
func TestTemplateFromImage(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	name := templateName(t)
	// An image of the test's own, so that its survival is the test's to see.
	ref := "hotcell-e2e-img/" + name + ":v1"
	if out, err := exec.Command("docker", "tag", "hotcell/base:latest", ref).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", ref).Run() })

	tpl, err := d.C.TemplateFromImage(ctx, name, ref, client.TemplateFromImageOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"TPL_ENV": "from-image"}},
	})
	if err != nil {
		t.Fatalf("template from image: %v\n%s", err, d.Logs())
	}
	if tpl.Name != name || tpl.Version != 1 || tpl.Image != ref || !tpl.FromImage {
		t.Errorf("registered: got %+v, want version 1 of %s on image %s, fromImage", tpl, name, ref)
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if sb.Image != ref || sb.Template == nil || sb.Template.Version != 1 {
		t.Errorf("sandbox from the template: image %q template %+v", sb.Image, sb.Template)
	}
	if out := mustOK(t, run(t, d, sb.ID, "echo $TPL_ENV"), "env"); out != "from-image\n" {
		t.Errorf("in the sandbox: got %q, want the template's env", out)
	}
	tpl2, err := d.C.TemplateFromImage(ctx, name, ref, client.TemplateFromImageOptions{})
	if err != nil || tpl2.Version != 2 || tpl2.Image != ref {
		t.Errorf("registered again: got %+v, %v, want version 2", tpl2, err)
	}

	// Bad input: 400 naming the field, nothing recorded.
	_, err = d.C.TemplateFromImage(ctx, name, "127.0.0.1:1/hotcell/missing-"+name+":latest", client.TemplateFromImageOptions{})
	wantTplStatus(t, "missing image", err, http.StatusBadRequest, "image")
	_, err = d.C.TemplateFromImage(ctx, name, "", client.TemplateFromImageOptions{})
	wantTplStatus(t, "empty image", err, http.StatusBadRequest, "image")
	_, err = d.C.TemplateFromImage(ctx, "Bad", ref, client.TemplateFromImageOptions{})
	wantTplStatus(t, "bad name", err, http.StatusBadRequest, "name")
	_, err = d.C.TemplateFromImage(ctx, name, ref, client.TemplateFromImageOptions{Defaults: &client.TemplateDefaults{Runtime: "kvm"}})
	wantTplStatus(t, "bad default runtime", err, http.StatusBadRequest, "defaults.runtime")
	tok := daemonToken(t, d)
	for _, tc := range []struct {
		what, query, body, field string
	}{
		{"image and a build context", url.Values{"name": {name}, "image": {ref}}.Encode(), "not a tar", "image"},
		{"image and a dockerfile", url.Values{"name": {name}, "image": {ref}, "dockerfile": {"Dockerfile"}}.Encode(), "", "dockerfile"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.Addr+"/v1/templates?"+tc.query, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.field) {
			t.Errorf("%s: got %d %s, want 400 naming %s", tc.what, resp.StatusCode, body, tc.field)
		}
	}
	if got, err := d.C.GetTemplate(ctx, name); err != nil || got.Version != 2 {
		t.Errorf("after the refusals: got %+v, %v, want version 2 still the latest", got, err)
	}

	// The CLI: template build --image registers the next version; with a
	// context directory or -f it is a usage error.
	c := newCLI(t, d)
	if r := c.want(0, "template", "build", "-t", name, "--image", ref, "--env", "CLI_ENV=yes"); r.stdout != name+":3\n" {
		t.Errorf("template build --image: got %v, want %s:3", r, name)
	}
	if got, err := d.C.GetTemplate(ctx, name); err != nil || got.Version != 3 || got.Image != ref || got.Defaults.Env["CLI_ENV"] != "yes" {
		t.Errorf("after the CLI's registration: got %+v, %v", got, err)
	}
	if r := c.run("template", "build", "-t", name, "--image", ref, t.TempDir()); r.code == 0 || !strings.Contains(r.stderr, "--image") {
		t.Errorf("--image with a context directory: got %v, want a usage error naming --image", r)
	}

	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.C.DeleteTemplate(ctx, name, false); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", ref).CombinedOutput(); err != nil {
		t.Errorf("deleting the template removed image %s, which it did not build: %v: %s", ref, err, out)
	}
}
