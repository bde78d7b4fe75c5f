package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestTemplateSave saves a running sandbox as a template: a sandbox made
// from it has the source's root filesystem file, its workspace file, its
// env and the save's override; a process that ran in the source during
// the save still runs; a failed save (a stopped source) leaves the
// template's version as it was; deleting the template removes its
// workspace seed.
func TestTemplateSave(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	name := templateName(t)

	src := newSandbox(t, d, client.CreateSandboxRequest{Env: map[string]string{"SRC_ENV": "from-source", "OVER": "source"}})
	mustOK(t, run(t, d, src.ID, "echo rootfs-file > /var/tmp/rootfs.txt && mkdir -p /workspace/sub && echo ws-file > /workspace/sub/ws.txt"), "write files")
	counter, err := d.C.StartProcess(ctx, src.ID, client.StartProcessRequest{
		Command: "i=0; while :; do i=$((i+1)); echo $i > /var/tmp/counter; sleep 0.1; done", Name: "counter"})
	if err != nil {
		t.Fatal(err)
	}

	tpl, err := d.C.SaveTemplate(ctx, src.ID, name, &client.TemplateDefaults{Env: map[string]string{"OVER": "save"}})
	if err != nil {
		t.Fatalf("save: %v\n%s", err, d.Logs())
	}
	if tpl.Name != name || tpl.Version != 1 || tpl.FromSandbox != src.ID || tpl.Workspace == nil || tpl.Workspace.SandboxID != src.ID ||
		!strings.HasPrefix(tpl.Image, "hotcell-tpl/"+name+":1-") {
		t.Errorf("saved: got %+v, want version 1 of %s from %s with a workspace seed", tpl, name, src.ID)
	}
	if tpl.Defaults.Env["SRC_ENV"] != "from-source" || tpl.Defaults.Env["OVER"] != "save" || tpl.Defaults.Runtime != src.Runtime ||
		tpl.Defaults.Limits != src.Limits {
		t.Errorf("defaults: got %+v, want the source's env, limits and runtime with the save's override", tpl.Defaults)
	}

	// The source's process went on through the commit's pause.
	before := mustOK(t, run(t, d, src.ID, "cat /var/tmp/counter"), "read counter")
	deadline := time.Now().Add(15 * time.Second)
	for {
		now := mustOK(t, run(t, d, src.ID, "cat /var/tmp/counter"), "read counter")
		if now != before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter in the source stayed at %q after the save", now)
		}
		time.Sleep(100 * time.Millisecond)
	}
	procs, err := d.C.ListProcesses(ctx, src.ID, client.ProcessListOptions{Name: "counter"})
	if err != nil || len(procs) != 1 || procs[0].ID != counter.ID || procs[0].State != client.ProcessRunning {
		t.Errorf("source's process after the save: got %+v, %v, want it running", procs, err)
	}

	made := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if made.Template == nil || made.Template.Name != name || made.Template.Version != 1 || made.Image != tpl.Image {
		t.Errorf("sandbox from the saved template: got template %+v image %q", made.Template, made.Image)
	}
	if out := mustOK(t, run(t, d, made.ID, "cat /var/tmp/rootfs.txt /workspace/sub/ws.txt; echo $SRC_ENV $OVER"), "read"); out != "rootfs-file\nws-file\nfrom-source save\n" {
		t.Errorf("in the sandbox from the saved template: got %q, want the root fs file, the workspace file and the env", out)
	}
	// Writes in the new sandbox's workspace are its own.
	mustOK(t, run(t, d, made.ID, "echo changed > /workspace/sub/ws.txt"), "write")
	if out := mustOK(t, run(t, d, src.ID, "cat /workspace/sub/ws.txt"), "read"); out != "ws-file\n" {
		t.Errorf("source's workspace after the copy's write: got %q", out)
	}

	// A save that fails (the source is stopped) records nothing: the
	// template stays at version 1 and still makes sandboxes.
	if _, err := d.C.StopSandbox(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	_, err = d.C.SaveTemplate(ctx, src.ID, name, nil)
	wantTplStatus(t, "save a stopped sandbox", err, http.StatusConflict, "")
	if got, err := d.C.GetTemplate(ctx, name); err != nil || got.Version != 1 || got.Image != tpl.Image {
		t.Errorf("after a failed save: got %+v, %v, want version 1 as it was", got, err)
	}
	again := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if out := mustOK(t, run(t, d, again.ID, "cat /workspace/sub/ws.txt"), "read"); out != "ws-file\n" {
		t.Errorf("sandbox after a failed save: got %q", out)
	}

	_, err = d.C.SaveTemplate(ctx, src.ID, "Bad Name", nil)
	wantTplStatus(t, "bad name", err, http.StatusBadRequest, "name")
	_, err = d.C.SaveTemplate(ctx, "sb-nosuchsandbox", name, nil)
	wantTplStatus(t, "unknown sandbox", err, http.StatusNotFound, "sb-nosuchsandbox")

	// The CLI saves a sandbox made from the template as its version 2.
	c := newCLI(t, d)
	if r := c.want(0, "template", "save", made.ID, "-t", name, "--env", "CLI=yes"); r.stdout != name+":2\n" {
		t.Errorf("template save: got %v, want %s:2", r, name)
	}
	if got, err := d.C.GetTemplate(ctx, name); err != nil || got.Version != 2 || got.FromSandbox != made.ID || got.Defaults.Env["CLI"] != "yes" {
		t.Errorf("after the CLI's save: got %+v, %v", got, err)
	}
	if r := c.run("template", "save", made.ID); r.code == 0 || !strings.Contains(r.stderr, "tag") {
		t.Errorf("template save without -t: got %v, want an error naming the flag", r)
	}

	// The seed is the template's: deleting the template deletes it.
	if err := d.C.DeleteTemplate(ctx, name, true); err != nil {
		t.Fatal(err)
	}
	bks, err := d.C.Backups(ctx, src.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bks {
		if b.ID == tpl.Workspace.BackupID {
			t.Errorf("the workspace seed %s outlived its template", b.ID)
		}
	}
}
