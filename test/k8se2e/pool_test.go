package k8se2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// podsByID maps each hotcell sandbox pod of the namespace to its
// name/uid: a pod of the same sandbox made again has another uid.
func (d *kubeDaemon) podsByID(t *testing.T) map[string]string {
	t.Helper()
	out := d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pods", "-l", "hotcell.id",
		"-o", `jsonpath={range .items[*]}{.metadata.labels.hotcell\.id} {.metadata.name}/{.metadata.uid}{"\n"}{end}`)
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if id, pod, ok := strings.Cut(line, " "); ok {
			m[id] = pod
		}
	}
	return m
}

// waitPool waits until template name's pool holds ready boxes and no
// box being made.
func (d *kubeDaemon) waitPool(t *testing.T, name string, ready int) client.PoolStatus {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := d.C.GetTemplatePool(t.Context(), name)
		if err == nil && st.Ready == ready && st.Creating == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool of %s: %+v, %v; want %d ready\n%s", name, st, err, ready, d.Logs())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestKubernetesTemplatePool: on the Kubernetes driver a template is
// registered from an image the cluster has (no build), and its warm pool is
// a set of ready pods: it fills to min, a create from the template claims
// one of them (a hit: the pod existed before the create) with the
// claimer's env, concurrent claims get distinct pods, the pool refills, a
// create with other CPU and memory limits takes a pooled pod and resizes
// it in place, one with another disk is a miss, a
// daemon restart re-adopts the pool's pods instead of making new ones,
// deleting the template is refused while it has a pool or sandboxes, and
// the pool drains to no pod.
func TestKubernetesTemplatePool(t *testing.T) {
	d := startKubeDaemon(t)
	ctx := t.Context()
	image := testenv.BusyboxImage(t)
	const name = "kpool"

	_, err := d.C.TemplateFromImage(ctx, name, "127.0.0.1:1/hotcell/not-on-the-cluster:latest", client.TemplateFromImageOptions{})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, "image") {
		t.Errorf("template from an image no node has: got %v, want 400 naming image", err)
	}
	tpl, err := d.C.TemplateFromImage(ctx, name, image, client.TemplateFromImageOptions{
		Defaults: &client.TemplateDefaults{
			Env: map[string]string{"TPL": "from-template"},
			// The test cluster's node has 2 CPUs for every test at once;
			// a box asks for its limits.
			Limits: client.Limits{CPUs: 0.1, MemoryMB: 128},
		},
	})
	if err != nil {
		t.Fatalf("template from image: %v\n%s", err, d.Logs())
	}
	if tpl.Version != 1 || tpl.Image != image || !tpl.FromImage {
		t.Errorf("template: %+v, want version 1 of image %s, fromImage", tpl, image)
	}

	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: 2}); err != nil {
		t.Fatalf("set pool: %v", err)
	}
	d.waitPool(t, name, 2)
	pooled := d.podsByID(t)
	if len(pooled) != 2 {
		t.Fatalf("pods of a pool of 2: %v", pooled)
	}

	// A restart re-adopts the pool's pods: the same two, no new one.
	d.Restart()
	d.waitPool(t, name, 2)
	if after := d.podsByID(t); fmt.Sprint(after) != fmt.Sprint(pooled) {
		t.Errorf("pods after the restart: %v, want the pool's %v re-adopted", after, pooled)
	}

	// Two claims at once: each a pod of the pool, not the same one, with
	// its own env over the template's.
	sbs := make([]client.Sandbox, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range sbs {
		wg.Go(func() {
			sbs[i], errs[i] = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
				Template: name, Env: map[string]string{"CLAIM": fmt.Sprint(i)}, Labels: map[string]string{"test": "k8se2e"},
			})
		})
	}
	wg.Wait()
	for i, sb := range sbs {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v\n%s", i, errs[i], d.Logs())
		}
		if pod, ok := pooled[sb.ID]; !ok {
			t.Errorf("claim %d got sandbox %s, not one of the pool's pods %v", i, sb.ID, pooled)
		} else if now := d.pods(t, sb.ID); len(now) != 1 || now[0] != pod {
			t.Errorf("claim %d: pods of %s now %v, want the pooled pod %s", i, sb.ID, now, pod)
		}
		if got := execOK(t, d.C, sb.ID, "echo $TPL $CLAIM"); got != fmt.Sprintf("from-template %d\n", i) {
			t.Errorf("claim %d: env %q, want the template's and the claimer's", i, got)
		}
		if sb.Template == nil || sb.Template.Name != name || sb.Template.Version != 1 {
			t.Errorf("claim %d: template %+v", i, sb.Template)
		}
	}
	if sbs[0].ID == sbs[1].ID {
		t.Errorf("two claims got the same sandbox %s", sbs[0].ID)
	}
	st := d.waitPool(t, name, 2) // refilled
	if st.Claims != 2 || st.Misses != 0 {
		t.Errorf("pool after two claims: %+v, want 2 claims and no miss", st)
	}
	all := d.podsByID(t)
	if len(all) != 4 {
		t.Errorf("pods after the refill: %v, want the 2 claimed and 2 new", all)
	}
	var fresh []string
	for id := range all {
		if _, ok := pooled[id]; !ok {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) != 2 {
		t.Errorf("new pods after the refill: %v, want 2", fresh)
	}

	// A create with other CPU and memory limits takes a pooled pod and
	// resizes it in place (the pod's resize subresource), as on Docker:
	// the same pod, whose cgroups inside show the new limits.
	before := d.podsByID(t)
	resized, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: name, Limits: client.Limits{CPUs: 0.2, MemoryMB: 192}})
	if err != nil {
		t.Fatalf("create with other limits: %v\n%s", err, d.Logs())
	}
	if pod, ok := before[resized.ID]; !ok {
		t.Errorf("a create with other limits got sandbox %s, not one of the pool's pods %v", resized.ID, before)
	} else if now := d.pods(t, resized.ID); len(now) != 1 || now[0] != pod {
		t.Errorf("pods of the resized claim %s: %v, want the pooled pod %s", resized.ID, now, pod)
	}
	if resized.Limits.CPUs != 0.2 || resized.Limits.MemoryMB != 192 {
		t.Errorf("the resized claim's limits: %+v", resized.Limits)
	}
	const cgroups = `if [ -f /sys/fs/cgroup/cpu.max ]; then set -- $(cat /sys/fs/cgroup/cpu.max); echo "cpu=$1 mem=$(cat /sys/fs/cgroup/memory.max)"; ` +
		`else echo "cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"; fi`
	if got, want := execOK(t, d.C, resized.ID, cgroups), "cpu=20000 mem=201326592\n"; got != want {
		t.Errorf("cgroups inside the resized claim: %q, want %q", got, want)
	}
	if got := execOK(t, d.C, resized.ID, "echo $TPL"); got != "from-template\n" {
		t.Errorf("the resized claim's env: %q", got)
	}
	if st, err := d.C.GetTemplatePool(ctx, name); err != nil || st.Claims != 3 || st.Misses != 0 {
		t.Errorf("pool after a claim with other limits: %+v, %v; want 3 claims, no miss", st, err)
	}
	d.waitPool(t, name, 2)

	// Another disk is a miss, as on Docker: the workspace is a volume of
	// its size.
	before = d.podsByID(t)
	other, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: name, Limits: client.Limits{CPUs: 0.1, MemoryMB: 128, DiskMB: 200}})
	if err != nil {
		t.Fatalf("create with another disk: %v", err)
	}
	if _, ok := before[other.ID]; ok {
		t.Errorf("a create with another disk took pooled pod %s", other.ID)
	}
	if st, err := d.C.GetTemplatePool(ctx, name); err != nil || st.Claims != 3 || st.Misses != 1 {
		t.Errorf("pool after a create with another disk: %+v, %v; want 3 claims, 1 miss", st, err)
	}
	if got := execOK(t, d.C, other.ID, "echo $TPL"); got != "from-template\n" {
		t.Errorf("the missed create's env: %q", got)
	}
	for _, id := range []string{resized.ID, other.ID} {
		if err := d.C.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// The template cannot go while it has a pool or sandboxes.
	err = d.C.DeleteTemplate(ctx, name, false)
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Errorf("delete a template with a pool: got %v, want 409", err)
	}
	if err := d.C.DeleteTemplatePool(ctx, name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := d.podsByID(t)
		for _, sb := range sbs {
			delete(left, sb.ID)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods after the pool's delete: %v, want only the claimed sandboxes'", left)
		}
		time.Sleep(300 * time.Millisecond)
	}
	err = d.C.DeleteTemplate(ctx, name, false)
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, sbs[0].ID) {
		t.Errorf("delete a template sandboxes use: got %v, want 409 naming them", err)
	}
	for _, sb := range sbs {
		if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.C.DeleteTemplate(ctx, name, false); err != nil {
		t.Errorf("delete the unused template: %v", err)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for left := d.podsByID(t); len(left) > 0; left = d.podsByID(t) {
		if time.Now().After(deadline) {
			t.Fatalf("pods left after every sandbox and the pool went: %v", left)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
