package e2e

import (
	"context"
	"testing"

	"github.com/hotcell/hotcell/client"
)

// TestE2BTemplate: the e2b SDK's Sandbox.create('<name>') makes a sandbox
// from hotcell template <name>, built or saved from a sandbox.
func TestE2BTemplate(t *testing.T) {
	d := sharedDaemon(t)
	requireE2BSDK(t)
	ctx := t.Context()
	built := templateName(t)
	dockerfile := "FROM hotcell/base:latest\nRUN echo from-e2b-template > /opt/e2b-tpl.txt\n"
	if _, err := d.C.BuildTemplate(ctx, built, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"TPL_ENV": "from-template", "KEEP": "tpl"}},
	}, buildContext(t, map[string]string{"Dockerfile": dockerfile}), nil); err != nil {
		t.Fatalf("build: %v", err)
	}
	saved := templateName(t)
	src := newSandbox(t, d, client.CreateSandboxRequest{Image: "hotcell/base:latest"})
	mustOK(t, run(t, d, src.ID, "echo seeded > /workspace/seed.txt"), "write the seed")
	if _, err := d.C.SaveTemplate(ctx, src.ID, saved, nil); err != nil {
		t.Fatalf("save: %v", err)
	}
	t.Cleanup(func() {
		_ = d.C.DeleteTemplate(context.Background(), built, true)
		_ = d.C.DeleteTemplate(context.Background(), saved, true)
	})
	runE2BNode(t, "template.test.mjs", "E2B_HOTCELL_TEMPLATE="+built, "E2B_SAVED_TEMPLATE="+saved)
}
