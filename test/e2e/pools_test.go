package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// poolTemplate builds a small template FROM hotcell/base with an env
// default on daemon d and returns its name.
func poolTemplate(t *testing.T, d *testdaemon.Daemon, marker string) string {
	t.Helper()
	name := templateName(t)
	_, err := d.C.BuildTemplate(t.Context(), name, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"TPL": "tpl", "OWNER": "nobody"}},
	}, buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\nRUN echo " + marker + " > /opt/marker\n"}), nil)
	if err != nil {
		t.Fatalf("build template: %v\n%s", err, d.Logs())
	}
	// Before the template's images are removed (an earlier cleanup):
	// the pool's boxes still run them.
	t.Cleanup(func() { drainPool(d, name) })
	return name
}

// drainPool removes the pool of name and waits, up to a minute, until no
// box of d runs one of the template's images.
func drainPool(d *testdaemon.Daemon, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = d.C.DeleteTemplatePool(ctx, name)
	inst, err := os.ReadFile(filepath.Join(d.DataDir, "instance"))
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		out, err := exec.CommandContext(ctx, "docker", "ps", "-a", "--filter", "label=hotcell.instance="+strings.TrimSpace(string(inst)), "--format", "{{.Image}}").Output()
		if err != nil || !strings.Contains(string(out), "hotcell-tpl/"+name+":") {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPool polls the pool of name until cond holds, failing after a minute.
func waitPool(t *testing.T, d *testdaemon.Daemon, name, what string, cond func(client.PoolStatus) bool) client.PoolStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, err := d.C.GetTemplatePool(t.Context(), name)
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool of %s: %s: not reached in 90s: last %+v, %v\n%s", name, what, st, err, d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// instanceBoxes lists the ids of every container of daemon d (pooled or
// not) with their state, as the engine sees them.
func instanceBoxes(t *testing.T, d *testdaemon.Daemon) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.DataDir, "instance"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=hotcell.instance="+strings.TrimSpace(string(b)),
		"--format", `{{.Label "hotcell.id"}} {{.State}}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	boxes := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if id, st, ok := strings.Cut(line, " "); ok {
			boxes[id] = st
		}
	}
	return boxes
}

// pooledIDs are the boxes of d that the API does not list.
func pooledIDs(t *testing.T, d *testdaemon.Daemon) []string {
	t.Helper()
	list, err := d.C.ListSandboxes(t.Context(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for id := range instanceBoxes(t, d) {
		if !slices.ContainsFunc(list, func(sb client.Sandbox) bool { return sb.ID == id }) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestPoolClaim: a pool keeps its boxes ready and hidden; a create from
// the template claims one and gets its own env (seen by an exec, over the
// template's), labels, egress policy (enforced) and timeouts; a bad
// config is a 400 naming its field.
func TestPoolClaim(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	name := poolTemplate(t, d, "claim")

	for _, c := range []struct {
		cfg   client.PoolConfig
		field string
	}{
		{client.PoolConfig{Min: -1}, "min"},
		{client.PoolConfig{Min: 5000}, "min"},
		{client.PoolConfig{Min: 4, Max: 2}, "max"},
		{client.PoolConfig{Min: 1, RefillPerSecond: 1000}, "refillPerSecond"},
	} {
		_, err := d.C.SetTemplatePool(ctx, name, c.cfg)
		wantTplStatus(t, fmt.Sprintf("pool %+v", c.cfg), err, http.StatusBadRequest, c.field)
	}
	_, err := d.C.SetTemplatePool(ctx, "no-such-template", client.PoolConfig{Min: 1})
	wantTplStatus(t, "pool of a missing template", err, http.StatusNotFound, "no-such-template")
	_, err = d.C.GetTemplatePool(ctx, name)
	wantTplStatus(t, "get before a pool", err, http.StatusNotFound, name)

	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: 2, RefillPerSecond: 10}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, name, "2 ready", func(s client.PoolStatus) bool { return s.Ready == 2 })
	// Hidden: not listed, not counted, no events.
	if list, _ := d.C.ListSandboxes(ctx, client.ListOptions{}); len(list) != 0 {
		t.Errorf("list with a pool of 2: got %d sandboxes, want 0", len(list))
	}
	if h, _ := d.C.Host(ctx); h.Sandboxes != 0 {
		t.Errorf("host count with a pool of 2: got %d, want 0", h.Sandboxes)
	}
	pooled := pooledIDs(t, d)
	if len(pooled) != 2 {
		t.Fatalf("pooled boxes on the engine: got %v, want 2", pooled)
	}
	for _, id := range pooled {
		if _, err := d.C.GetSandbox(ctx, id); err == nil {
			t.Errorf("get of pooled box %s: served, want 404", id)
		}
	}
	if evs, _ := d.C.HostEvents(ctx, client.EventsOptions{}); len(evs) != 0 {
		t.Errorf("host events with only a pool: got %+v, want none", evs)
	}
	tpl, err := d.C.GetTemplate(ctx, name)
	if err != nil || tpl.Pool == nil || tpl.Pool.Config.Min != 2 {
		t.Errorf("template with its pool: got %+v, %v", tpl.Pool, err)
	}

	sb := newSandbox(t, d, client.CreateSandboxRequest{
		Template: name,
		Env:      map[string]string{"OWNER": "alice", "EXTRA": "x"},
		Labels:   map[string]string{"who": "alice"},
		Egress:   &client.EgressPolicy{Mode: "none"},
		Timeouts: &client.Timeouts{IdleSeconds: 3600},
	})
	if !slices.Contains(pooled, sb.ID) {
		t.Errorf("create with a ready pool: got %s, want one of the pooled %v", sb.ID, pooled)
	}
	if sb.Labels["who"] != "alice" || sb.Env["OWNER"] != "alice" || sb.Template == nil || sb.Egress == nil || sb.Egress.Mode != "none" {
		t.Errorf("claimed sandbox: got labels %v env %v template %+v egress %+v", sb.Labels, sb.Env, sb.Template, sb.Egress)
	}
	if sb.Timeouts == nil || sb.Timeouts.IdleSeconds != 3600 || time.Since(sb.CreatedAt) > time.Minute {
		t.Errorf("claimed sandbox timeouts: got %+v created %v, want idle 3600 counting from the claim", sb.Timeouts, sb.CreatedAt)
	}
	out := mustOK(t, run(t, d, sb.ID, `echo "$TPL $OWNER $EXTRA"; cat /opt/marker; ls /sys/class/net`), "exec after claim")
	if want := "tpl alice x\nclaim\nlo\n"; out != want {
		t.Errorf("exec in the claimed box: got %q, want %q (the claimer's env over the template's, no network under egress none)", out, want)
	}
	// A background process and a terminal get the env too.
	proc, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: `echo "$OWNER" > /tmp/proc-env`})
	if err != nil {
		t.Fatal(err)
	}
	waitProcessExit(t, d, sb.ID, proc.ID)
	if out := mustOK(t, run(t, d, sb.ID, "cat /tmp/proc-env"), "read"); out != "alice\n" {
		t.Errorf("background process in the claimed box: got %q, want alice", out)
	}
	evs, err := d.C.SandboxEvents(ctx, sb.ID, client.EventsOptions{})
	if err != nil || len(evs) != 1 || evs[0].Type != "created" || evs[0].Fields["pool"] != name {
		t.Errorf("events of the claimed sandbox: got %+v, %v, want one created event from the pool", evs, err)
	}
	st := waitPool(t, d, name, "refilled after a claim", func(s client.PoolStatus) bool { return s.Ready == 2 })
	if st.Claims != 1 || st.Misses != 0 {
		t.Errorf("pool after one claim: got claims %d misses %d, want 1, 0", st.Claims, st.Misses)
	}
	if ids := pooledIDs(t, d); slices.Contains(ids, sb.ID) || len(ids) != 2 {
		t.Errorf("pool after the claim: got %v, want 2 boxes without %s", ids, sb.ID)
	}

	// The env survives a stop and start (a new agent process).
	if _, err := d.C.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if out := mustOK(t, run(t, d, sb.ID, `echo "$OWNER"`), "exec after restart"); out != "alice\n" {
		t.Errorf("env after stop/start: got %q, want alice", out)
	}

	// A request with other memory, CPU and pids limits claims a box, whose
	// running container gets them (runc's cgroups, changed by the engine
	// at the claim).
	ready := pooledIDs(t, d)
	limits := client.Limits{MemoryMB: 300, CPUs: 0.5, PidsLimit: 123}
	resized := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Limits: limits})
	if !slices.Contains(ready, resized.ID) {
		t.Errorf("a create with other memory, CPU and pids limits: got %s, want one of the pooled %v", resized.ID, ready)
	}
	if resized.Limits.MemoryMB != 300 || resized.Limits.CPUs != 0.5 || resized.Limits.PidsLimit != 123 {
		t.Errorf("claimed sandbox's limits: got %+v, want %+v", resized.Limits, limits)
	}
	if hc := inspectHost(t, resized.ID); hc.Memory != 300<<20 || hc.MemorySwap != 300<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 123 {
		t.Errorf("claimed box's container: got %+v (pids %v), want memory and swap 300 MiB, 0.5 CPU, 123 pids", hc, hc.PidsLimit)
	}
	if cg := readCgroup(t, d, resized.ID); cg["pids.max"] != "123" || cg["memory.max"] != fmt.Sprint(300<<20) {
		t.Errorf("claimed box's cgroup: got %v, want pids.max 123, memory.max %d", cg, 300<<20)
	}
	if got, err := d.C.GetSandbox(ctx, resized.ID); err != nil || got.Limits != resized.Limits {
		t.Errorf("get of the resized sandbox: got %+v, %v, want limits %+v", got.Limits, err, resized.Limits)
	}
	// Raised too (on cgroup v1 the swap limit must go up first).
	raised := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Limits: client.Limits{MemoryMB: 3000, CPUs: 1.5, PidsLimit: 2000}})
	if !slices.Contains(ready, raised.ID) {
		t.Errorf("a create with higher limits: got %s, want one of the pooled %v", raised.ID, ready)
	}
	if cg := readCgroup(t, d, raised.ID); cg["pids.max"] != "2000" || cg["memory.max"] != fmt.Sprint(3000<<20) {
		t.Errorf("raised box's cgroup: got %v, want pids.max 2000, memory.max %d", cg, 3000<<20)
	}
	// The disk cannot change on a running box (the workspace is a
	// filesystem of its size): such a request misses and makes a box.
	miss := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Limits: client.Limits{DiskMB: 777}})
	if slices.Contains(pooledIDs(t, d), miss.ID) || slices.Contains(pooled, miss.ID) || slices.Contains(ready, miss.ID) {
		t.Errorf("a create with another disk size took pooled box %s", miss.ID)
	}
	if st, _ := d.C.GetTemplatePool(ctx, name); st.Misses != 1 || st.Claims != 3 {
		t.Errorf("after two claims with other limits and a create with another disk: got claims %d, misses %d, want 3, 1", st.Claims, st.Misses)
	}

	// Deleting the template is refused while it has a pool.
	err = d.C.DeleteTemplate(ctx, name, false)
	wantTplStatus(t, "delete a template with a pool", err, http.StatusConflict, "pool")
	if err := d.C.DeleteTemplatePool(ctx, name); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(pooledIDs(t, d)) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if ids := pooledIDs(t, d); len(ids) != 0 {
		t.Errorf("after the pool's delete: boxes %v remain", ids)
	}
}

// TestPoolConcurrentClaims: N creates at once from a pool of N each get a
// box of their own, and the pool refills.
func TestPoolConcurrentClaims(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	name := poolTemplate(t, d, "concurrent")
	const n = 6
	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: n, RefillPerSecond: 20}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, name, "full", func(s client.PoolStatus) bool { return s.Ready == n })
	pooled := pooledIDs(t, d)
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: name, Env: map[string]string{"OWNER": fmt.Sprint("claimer-", i)}})
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
				return
			}
			ids[i] = sb.ID
		}()
	}
	wg.Wait()
	seen := map[string]int{}
	for i, id := range ids {
		if id == "" {
			continue
		}
		if j, dup := seen[id]; dup {
			t.Errorf("claims %d and %d both got %s", j, i, id)
		}
		seen[id] = i
		if !slices.Contains(pooled, id) {
			t.Errorf("claim %d got %s, not a pooled box (%v)", i, id, pooled)
		}
		if out := mustOK(t, run(t, d, id, `echo "$OWNER"`), "exec"); out != fmt.Sprint("claimer-", i, "\n") {
			t.Errorf("claim %d (%s): got env %q, want its own", i, id, out)
		}
	}
	st := waitPool(t, d, name, "refilled", func(s client.PoolStatus) bool { return s.Ready >= n })
	if st.Claims != n {
		t.Errorf("claims: got %d, want %d", st.Claims, n)
	}
	for _, id := range pooledIDs(t, d) {
		if _, dup := seen[id]; dup {
			t.Errorf("a claimed box %s is back in the pool", id)
		}
	}
}

// TestPoolRestartAndReplace: a pool comes back with the daemon with the
// same boxes (none leaked); a rebuilt template's pool replaces its boxes;
// a pooled box whose container was killed is replaced, never handed out.
func TestPoolRestartAndReplace(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	name := poolTemplate(t, d, "v1")
	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: 2, RefillPerSecond: 10}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, name, "full", func(s client.PoolStatus) bool { return s.Ready == 2 })
	// A box claimed before the restart keeps its claimer's env after it
	// (the agent gets it again when it connects to the new daemon).
	early := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Env: map[string]string{"OWNER": "before-restart"}})
	waitPool(t, d, name, "refilled", func(s client.PoolStatus) bool { return s.Ready == 2 })
	before := pooledIDs(t, d)

	d.Restart()
	if out := mustOK(t, run(t, d, early.ID, `echo "$OWNER"`), "exec after restart"); out != "before-restart\n" {
		t.Errorf("a claimed box's env after a daemon restart: got %q", out)
	}
	waitPool(t, d, name, "back after a restart", func(s client.PoolStatus) bool { return s.Ready == 2 })
	if after := pooledIDs(t, d); !slices.Equal(after, before) {
		t.Errorf("pooled boxes after a restart: got %v, want the same %v (re-adopted, none leaked or added)", after, before)
	}
	if n := len(instanceBoxes(t, d)); n != 3 {
		t.Errorf("boxes on the engine after a restart: got %d, want 3 (2 pooled, 1 claimed)", n)
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Env: map[string]string{"OWNER": "after-restart"}})
	if !slices.Contains(before, sb.ID) {
		t.Errorf("claim after a restart: got %s, want one of %v", sb.ID, before)
	}
	if out := mustOK(t, run(t, d, sb.ID, `echo "$OWNER"; cat /opt/marker`), "exec"); out != "after-restart\nv1\n" {
		t.Errorf("claimed after a restart: got %q", out)
	}
	waitPool(t, d, name, "refilled", func(s client.PoolStatus) bool { return s.Ready == 2 })

	// A killed box is replaced, not handed out.
	killed := pooledIDs(t, d)
	for _, id := range killed {
		if out, err := exec.Command("docker", "kill", "hotcell-"+id).CombinedOutput(); err != nil {
			// The container's name may differ: kill by label.
			out2, err2 := exec.Command("sh", "-c", "docker kill $(docker ps -q --filter label=hotcell.id="+id+")").CombinedOutput()
			if err2 != nil {
				t.Fatalf("kill %s: %v %s / %v %s", id, err, out, err2, out2)
			}
		}
	}
	fresh := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if slices.Contains(killed, fresh.ID) {
		t.Errorf("a create got killed pooled box %s", fresh.ID)
	}
	mustOK(t, run(t, d, fresh.ID, "true"), "exec in a box made after the pool's were killed")
	waitPool(t, d, name, "replaced the killed boxes", func(s client.PoolStatus) bool {
		ids := pooledIDs(t, d)
		return s.Ready == 2 && len(ids) == 2 && !slices.Contains(ids, killed[0]) && !slices.Contains(ids, killed[1])
	})

	// A rebuild: the pool replaces its boxes with the new version's. The
	// old boxes are noted before the build: at 10 a second the pool can
	// finish replacing them before the build's call returns.
	old := pooledIDs(t, d)
	if _, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"TPL": "tpl", "OWNER": "nobody"}},
	}, buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\nRUN echo v2 > /opt/marker\n"}), nil); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, name, "version 2 boxes", func(s client.PoolStatus) bool {
		ids := pooledIDs(t, d)
		return s.Version == 2 && s.Ready == 2 && len(ids) == 2 && !slices.Contains(ids, old[0]) && !slices.Contains(ids, old[1])
	})
	v2 := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if out := mustOK(t, run(t, d, v2.ID, "cat /opt/marker"), "exec"); out != "v2\n" || v2.Template.Version != 2 {
		t.Errorf("claim after a rebuild: got %q version %d, want v2", out, v2.Template.Version)
	}
	if err := d.C.DeleteTemplatePool(context.WithoutCancel(ctx), name); err != nil {
		t.Error(err)
	}
}

// TestPoolCLI: hotcell template pool sets, shows and removes a pool, and
// template ls shows its size, claims and misses.
func TestPoolCLI(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := sharedDaemon(t)
	c := newCLI(t, d)
	name := poolTemplate(t, d, "cli")
	if r := c.run("template", "pool", name, "--min", "-3"); r.code == 0 || !strings.Contains(r.stderr, "min") {
		t.Errorf("bad min: got %v, want an error naming min", r)
	}
	if r := c.run("template", "pool", name, "--max", "3"); r.code == 0 || !strings.Contains(r.stderr, "--min") {
		t.Errorf("--max without --min: got %v, want an error asking for --min", r)
	}
	if r := c.want(0, "template", "pool", name, "--min", "1", "--refill", "5"); !strings.Contains(r.stdout, "min 1, max 1, refill 5/s") {
		t.Errorf("set: got %v", r)
	}
	waitPool(t, d, name, "1 ready", func(s client.PoolStatus) bool { return s.Ready == 1 })
	if r := c.want(0, "template", "pool", name); !strings.Contains(r.stdout, "1 ready, 0 being made") {
		t.Errorf("show: got %v", r)
	}
	id := strings.TrimSpace(c.want(0, "create", "--template", name, "--label", "test="+sanitizeLabel(t.Name())).stdout)
	t.Cleanup(func() { _ = d.C.DeleteSandbox(context.WithoutCancel(t.Context()), id) })
	r := c.want(0, "template", "ls")
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, name+" ") {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) < 3 || f[len(f)-2] != "1" || f[len(f)-1] != "0" || !strings.Contains(r.stdout, "POOL") {
		t.Errorf("ls: got %q in\n%s, want the pool with 1 claim and 0 misses", line, r.stdout)
	}
	if r := c.want(0, "template", "pool", name, "--min", "0"); !strings.Contains(r.stderr, "removed") {
		t.Errorf("remove: got %v", r)
	}
	if r := c.run("template", "pool", name); r.code == 0 || !strings.Contains(r.stderr, "no pool") {
		t.Errorf("show after remove: got %v, want no pool", r)
	}
}

// metricsBody scrapes d's /metrics.
func metricsBody(t *testing.T, d *testdaemon.Daemon) string {
	t.Helper()
	tok, _ := os.ReadFile(filepath.Join(d.DataDir, "token"))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+d.Addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return readAll(resp)
}

// TestPoolGateway: boxes claimed from one pool each get a gateway token
// minted for their own id at claim: it works from its box and is metered
// to it, another box's token does not; the pool's figures are on /metrics.
func TestPoolGateway(t *testing.T) {
	d, _ := gatewayDaemon(t)
	ctx := t.Context()
	name := poolTemplate(t, d, "gw")
	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: 2, RefillPerSecond: 10}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, name, "2 ready", func(s client.PoolStatus) bool { return s.Ready == 2 })
	pooled := pooledIDs(t, d)
	a := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Gateway: []string{"openai"}})
	b := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Gateway: []string{"openai"}})
	if !slices.Contains(pooled, a.ID) || !slices.Contains(pooled, b.ID) {
		t.Fatalf("claims: got %s and %s, want the pooled %v", a.ID, b.ID, pooled)
	}
	if got, _ := d.C.GetSandbox(ctx, a.ID); got.Env["OPENAI_API_KEY"] != "" {
		t.Errorf("the claimed sandbox's record shows its token: %v", got.Env)
	}
	tokenOf := func(id string) (string, string) {
		out := execOut(t, d, id, client.ExecRequest{Command: `printf '%s %s' "$OPENAI_BASE_URL" "$OPENAI_API_KEY"`})
		u, tok, _ := strings.Cut(out, " ")
		if !strings.HasPrefix(tok, "hcgw_") {
			t.Fatalf("gateway env of claimed box %s: got %q", id, out)
		}
		return u, tok
	}
	aURL, aTok := tokenOf(a.ID)
	_, bTok := tokenOf(b.ID)
	if aTok == bTok {
		t.Fatal("two claimed boxes got the same token")
	}
	if st, body := postFrom(t, d, a.ID, aURL+"/chat/completions", `{}`, "Authorization", "Bearer "+aTok); st != 200 {
		t.Errorf("a with its own token: got %d %s", st, body)
	}
	if st, body := postFrom(t, d, a.ID, aURL+"/chat/completions", `{}`, "Authorization", "Bearer "+bTok); st != 401 {
		t.Errorf("a with b's token: got %d %s, want 401 (a token works only from its own box)", st, body)
	}
	body := metricsBody(t, d)
	if want := fmt.Sprintf(`hotcell_gateway_requests_total{provider="openai",sandbox=%q} 1`, a.ID); !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s: the claimer's call is not metered to it", want)
	}
	if strings.Contains(body, fmt.Sprintf(`hotcell_gateway_requests_total{provider="openai",sandbox=%q}`, b.ID)) {
		t.Errorf("/metrics meters a request to %s, which made none", b.ID)
	}
	for _, want := range []string{
		fmt.Sprintf(`hotcell_pool_claims_total{template=%q} 2`, name),
		fmt.Sprintf(`hotcell_pool_misses_total{template=%q} 0`, name),
		fmt.Sprintf(`hotcell_pool_min{template=%q} 2`, name),
		fmt.Sprintf(`hotcell_pool_refill_seconds_count{template=%q}`, name),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The token dies with the claimer, and a box claimed later has none of
	// the earlier claimers' tokens.
	if err := d.C.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if st := hostPost(t, gatewayURL(d)+"/openai/chat/completions", aTok); st != 401 {
		t.Errorf("a's token after a is destroyed: got %d, want 401", st)
	}
	waitPool(t, d, name, "refilled", func(s client.PoolStatus) bool { return s.Ready == 2 })
	c := newSandbox(t, d, client.CreateSandboxRequest{Template: name})
	if out := execOut(t, d, c.ID, client.ExecRequest{Command: `env | grep -c hcgw_ || true`}); strings.TrimSpace(out) != "0" {
		t.Errorf("a box claimed without gateway has a token in its env: %q", out)
	}
	if err := d.C.DeleteTemplatePool(ctx, name); err != nil {
		t.Error(err)
	}
}

// TestPoolsSetting: a daemon started with a pools entry in its config file
// waits for the template it names, fills the pool once the template is
// built, and a create from the template claims from it; the API shows the
// configured size.
func TestPoolsSetting(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	name := templateName(t)
	conf := filepath.Join(t.TempDir(), "hotcell.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("pools = %q\n", name+"=2:3:10")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--config", conf}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	// No template yet: the pool waits for it and makes nothing.
	time.Sleep(time.Second)
	if ids := pooledIDs(t, d); len(ids) != 0 {
		t.Fatalf("boxes before the pool's template exists: %v", ids)
	}
	if _, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Env: map[string]string{"FROM_CONFIG": "yes"}},
	}, buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\n"}), nil); err != nil {
		t.Fatalf("build template: %v\n%s", err, d.Logs())
	}
	t.Cleanup(func() { drainPool(d, name) })
	st := waitPool(t, d, name, "2 ready from the config", func(s client.PoolStatus) bool { return s.Ready == 2 })
	if st.Config.Min != 2 || st.Config.Max != 3 || st.Config.RefillPerSecond != 10 {
		t.Errorf("pool from the config: got %+v, want min 2, max 3, refill 10", st.Config)
	}
	pooled := pooledIDs(t, d)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Template: name, Env: map[string]string{"OWNER": "cfg"}})
	if !slices.Contains(pooled, sb.ID) {
		t.Errorf("create from a template pooled by the config: got %s, want one of %v", sb.ID, pooled)
	}
	if out := mustOK(t, run(t, d, sb.ID, `echo "$FROM_CONFIG $OWNER"`), "exec"); out != "yes cfg\n" {
		t.Errorf("exec in the claimed box: got %q, want %q", out, "yes cfg\n")
	}
	if st, err := d.C.GetTemplatePool(ctx, name); err != nil || st.Claims != 1 || st.Misses != 0 {
		t.Errorf("pool after the claim: got %+v, %v; want 1 claim, no miss", st, err)
	}
}
