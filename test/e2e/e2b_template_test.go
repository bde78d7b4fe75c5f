package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/e2btest"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestE2BTemplate: the e2b SDK's Sandbox.create('<name>') makes a sandbox
// from hotcell template <name>, built or saved from a sandbox.
func TestE2BTemplate(t *testing.T) {
	d := sharedDaemon(t)
	e2btest.RequireSDK(t)
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

// TestE2BTemplatePool: the e2b SDK's Sandbox.create('<name>') of a
// hotcell template with a warm pool claims one of its ready boxes (the
// pool counts a claim and no miss, and the sandbox is one the pool held),
// and the claimed box has the create's envs over the template's and its
// metadata (checked by the script, in the box and on hotcell's record).
func TestE2BTemplatePool(t *testing.T) {
	testenv.RequireDocker(t)
	e2btest.RequireSDK(t)
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	name := templateName(t)
	if _, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"TPL_ENV": "from-template", "OWNER": "nobody"}},
	}, buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\n"}), nil); err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { drainPool(d, name) })
	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: 2, RefillPerSecond: 10}); err != nil {
		t.Fatal(err)
	}
	before := waitPool(t, d, name, "2 ready", func(s client.PoolStatus) bool { return s.Ready == 2 })
	pooled := pooledIDs(t, d)

	out := runE2BNodeOn(t, d, "template_pool.test.mjs", "E2B_HOTCELL_TEMPLATE="+name)
	_, rest, ok := strings.Cut(out, "E2B_POOLED_SANDBOX=")
	if !ok {
		t.Fatalf("the script printed no sandbox id:\n%s", out)
	}
	id := strings.Fields(rest)[0]
	if !slices.Contains(pooled, id) {
		t.Errorf("the E2B create got sandbox %s, want one of the pooled %v", id, pooled)
	}
	after, err := d.C.GetTemplatePool(ctx, name)
	if err != nil || after.Claims != before.Claims+1 || after.Misses != before.Misses {
		t.Errorf("pool after the E2B create: got %+v, %v; want one more claim (was %d) and no miss (was %d)", after, err, before.Claims, before.Misses)
	}
}
