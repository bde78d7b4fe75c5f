package e2e

import (
	"net/http"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestTemplateWorkspaceSeed: a template built with workspace=/opt/seed
// gives every sandbox made from it that directory's contents in
// /workspace (a subdirectory and the user's ownership included); a create
// that restores a backup of its own starts from that instead; a seed path
// inside /workspace or relative is a 400 naming workspace.
func TestTemplateWorkspaceSeed(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	name := templateName(t)
	dockerfile := "FROM hotcell/base:latest\nCOPY seed /opt/seed/\nRUN chown -R user /opt/seed\n"
	tpl, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{Workspace: "/opt/seed"}, buildContext(t, map[string]string{
		"Dockerfile": dockerfile, "seed/README": "seeded\n", "seed/src/main.py": "print('hi')\n",
	}), nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if tpl.WorkspaceFrom != "/opt/seed" {
		t.Errorf("built: got workspaceFrom %q", tpl.WorkspaceFrom)
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if out := mustOK(t, run(t, d, sb.ID, "cat /workspace/README /workspace/src/main.py; stat -c %U /workspace/src/main.py"), "read"); out != "seeded\nprint('hi')\nuser\n" {
		t.Errorf("workspace of a sandbox from the seeded template: got %q", out)
	}

	// A create that restores a backup starts from the backup, not the seed.
	other := newSandbox(t, d, client.CreateSandboxRequest{Image: "hotcell/base:latest"})
	mustOK(t, run(t, d, other.ID, "echo from-backup > /workspace/mine"), "write")
	bk, err := d.C.CreateBackup(ctx, other.ID, client.BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restored := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Restore: &client.RestoreSource{SandboxID: other.ID, BackupID: bk.ID}})
	if out := mustOK(t, run(t, d, restored.ID, "cat /workspace/mine; ls /workspace"), "read"); out != "from-backup\nmine\n" {
		t.Errorf("workspace of a create that restores: got %q, want the backup's only", out)
	}

	for _, bad := range []string{"/workspace/x", "opt/seed", "/"} {
		_, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{Workspace: bad},
			buildContext(t, map[string]string{"Dockerfile": dockerfile}), nil)
		wantTplStatus(t, "workspace "+bad, err, http.StatusBadRequest, "workspace")
	}
}
