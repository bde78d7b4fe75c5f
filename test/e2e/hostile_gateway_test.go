package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	dockerdrv "github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// pyBurst is a sandbox program that spends a token budget as fast as it
// can: argv[1] streamed chat calls at once, then argv[2] one after the
// other, each with max_tokens 400 and no stream_options (so an upstream
// reports no usage unless the gateway asks for it). It prints the status
// of every call.
const pyBurst = `import os, sys, json, threading, http.client, urllib.parse
u = urllib.parse.urlparse(os.environ["HOTCELL_BUDGET_BASE_URL"] + "/chat/completions")
tok = os.environ["HOTCELL_BUDGET_TOKEN"]
body = json.dumps({"model": "m", "stream": True, "max_tokens": 400, "messages": [{"role": "user", "content": "hi"}]})
def call(out, i):
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.request("POST", u.path, body=body, headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        out[i] = r.status
    except Exception as e:
        out[i] = "error"
n, m = int(sys.argv[1]), int(sys.argv[2])
out = [None] * n
ts = [threading.Thread(target=call, args=(out, i)) for i in range(n)]
for t in ts: t.start()
for t in ts: t.join()
for _ in range(m):
    o = [None]
    call(o, 0)
    out += o
print(" ".join(str(x) for x in out))
`

// hostileGatewayDaemon runs a daemon with two providers, each on a fake
// upstream of its own: "budget" with a 1,500-token budget per sandbox,
// and "openai" whose key is in a file the test rotates.
func hostileGatewayDaemon(t *testing.T) (d *testdaemon.Daemon, budgetUp, openaiUp *gatewaytest.Upstream, keyFile string) {
	t.Helper()
	testenv.RequireDocker(t)
	budgetUp, openaiUp = gatewaytest.New(t), gatewaytest.New(t)
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	budgetKey := write("budget.key", gatewaytest.OpenAIKey)
	keyFile = write("openai.key", gatewaytest.OpenAIKey)
	providers := write("providers.toml", fmt.Sprintf(`
[[provider]]
name = "budget"
kind = "openai"
base_url = "%s/v1"
key_file = %q
budget_tokens = 1500

[[provider]]
name = "openai"
kind = "openai"
base_url = "%s/v1"
key_file = %q
`, budgetUp.URL, budgetKey, openaiUp.URL, keyFile))
	d = testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--providers-file", providers}})
	t.Cleanup(d.Close)
	return d, budgetUp, openaiUp, keyFile
}

// TestHostileGateway: a sandbox tries to spend more than its token budget
// with streams that report no usage, to use the shared key for files and
// batches, to use another sandbox's token, and the operator rotates the
// upstream key under it. The budget holds, the paths and the token are
// refused, the new key is used by the next call without a restart; the
// daemon and a neighbour sandbox keep working.
func TestHostileGateway(t *testing.T) {
	d, budgetUp, openaiUp, keyFile := hostileGatewayDaemon(t)
	image := testenv.BaseImage(t)
	ctx := t.Context()
	a := newSandbox(t, d, client.CreateSandboxRequest{Image: image, Gateway: []string{"budget", "openai"}})
	b := newSandbox(t, d, client.CreateSandboxRequest{Image: image, Gateway: []string{"openai"}})
	envOf := func(id string) map[string]string {
		out := execOut(t, d, id, client.ExecRequest{Argv: []string{"sh", "-c", "env | grep -E '^(OPENAI|HOTCELL_)'"}})
		env := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
		return env
	}
	aEnv, bEnv := envOf(a.ID), envOf(b.ID)

	t.Run("token budget holds against streams without usage", func(t *testing.T) {
		const budget, maxTokens = 1500, 400
		out := strings.TrimSpace(execOut(t, d, a.ID, client.ExecRequest{Argv: []string{"python3", "-c", pyBurst, "8", "4"}, TimeoutMs: 180_000}))
		var ok, refused int
		for _, s := range strings.Fields(out) {
			switch s {
			case "200":
				ok++
			case "429":
				refused++
			default:
				t.Errorf("call status %s; all: %s", s, out)
			}
		}
		// What one call may reserve: its body, as forwarded, / 4 and its
		// max_tokens.
		var reservation int64
		for _, r := range budgetUp.Requests() {
			reservation = max(reservation, int64(len(r.Body)+3)/4+maxTokens)
		}
		billed := budgetUp.Billed()
		t.Logf("statuses %s; upstream billed %d tokens for %d calls (one reservation: %d)", out, billed, len(budgetUp.Requests()), reservation)
		if billed > budget+reservation {
			t.Errorf("the upstream billed %d tokens, more than the budget %d and one reservation %d", billed, budget, reservation)
		}
		if ok == 0 || refused == 0 {
			t.Errorf("%d calls passed and %d were refused: want both (statuses %s)", ok, refused, out)
		}
		u, err := d.C.Usage(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range u.Providers {
			if p.Provider == "budget" && p.TotalTokens < billed {
				t.Errorf("usage counts %d tokens, the upstream billed %d", p.TotalTokens, billed)
			}
		}
	})

	t.Run("the shared key is only for model calls", func(t *testing.T) {
		n := len(openaiUp.Requests())
		for _, path := range []string{"/files", "/batches", "/vector_stores", "/fine_tuning/jobs"} {
			st, body := postFrom(t, d, a.ID, aEnv["HOTCELL_OPENAI_BASE_URL"]+path, `{}`, "Authorization", "Bearer "+aEnv["HOTCELL_OPENAI_TOKEN"])
			if st != 403 || !strings.Contains(body, "permission_denied") {
				t.Errorf("POST %s: got %d %s, want 403 permission_denied", path, st, body)
			}
		}
		if got := len(openaiUp.Requests()); got != n {
			t.Errorf("refused paths reached the upstream: %d requests", got-n)
		}
	})

	t.Run("a token works only from its own sandbox", func(t *testing.T) {
		st, body := postFrom(t, d, b.ID, aEnv["HOTCELL_OPENAI_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+aEnv["HOTCELL_OPENAI_TOKEN"])
		if st != 401 || !strings.Contains(body, "another sandbox") {
			t.Errorf("a's token from b: got %d %s, want 401", st, body)
		}
		if st, body := postFrom(t, d, a.ID, aEnv["HOTCELL_OPENAI_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+aEnv["HOTCELL_OPENAI_TOKEN"]); st != 200 {
			t.Errorf("a's token from a: got %d %s", st, body)
		}
	})

	t.Run("a rotated key is used without a restart", func(t *testing.T) {
		pid := d.PID()
		call := func() int {
			st, _ := postFrom(t, d, a.ID, aEnv["HOTCELL_OPENAI_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+aEnv["HOTCELL_OPENAI_TOKEN"])
			return st
		}
		// The operator rotates the key upstream and in the key file.
		rotate := func(key string) {
			openaiUp.SetOpenAIKey(key)
			if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		rotate("sk-fake-openai-ROTATED-admin-4e1f")
		if st := call(); st != 401 {
			t.Fatalf("before the reload: got %d, want the upstream's 401 for the old key", st)
		}
		res, err := d.C.ReloadGateway(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(res.Changed, ",") != "openai" {
			t.Errorf("reload: got %+v, want openai changed", res)
		}
		if st := call(); st != 200 {
			t.Errorf("after the reload: got %d, want 200", st)
		}
		if last, _ := openaiUp.Last(); last.Header.Get("Authorization") != "Bearer sk-fake-openai-ROTATED-admin-4e1f" {
			t.Errorf("upstream Authorization after the reload: got %q", last.Header.Get("Authorization"))
		}

		// SIGHUP does the same. The reload runs when the signal arrives,
		// so the check polls (bounded) rather than races it.
		rotate("sk-fake-openai-ROTATED-hup-7c2a")
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		var st int
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if st = call(); st == 200 {
				break
			}
		}
		if st != 200 {
			t.Errorf("after SIGHUP: got %d, want 200 with the new key", st)
		}
		if d.PID() != pid {
			t.Errorf("the daemon was restarted: pid %d, was %d", d.PID(), pid)
		}
		// A reload that cannot read a key changes nothing.
		os.Remove(keyFile)
		if _, err := d.C.ReloadGateway(ctx); err == nil || !strings.Contains(err.Error(), "openai") {
			t.Errorf("reload with the key file gone: got %v, want an error naming openai", err)
		}
		if st := call(); st != 200 {
			t.Errorf("after a failed reload: got %d, want 200 with the key in use", st)
		}
		for _, k := range []string{"ROTATED-admin", "ROTATED-hup"} {
			if strings.Contains(d.Logs(), k) {
				t.Errorf("the daemon log holds a key (%s)", k)
			}
		}
	})

	// The daemon and the neighbour are fine.
	if _, err := d.C.Host(ctx); err != nil {
		t.Errorf("daemon after the attacks: %v", err)
	}
	if out := execOut(t, d, b.ID, client.ExecRequest{Argv: []string{"echo", "ok"}}); strings.TrimSpace(out) != "ok" {
		t.Errorf("neighbour exec: got %q", out)
	}
	if st, body := postFrom(t, d, b.ID, bEnv["OPENAI_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+bEnv["OPENAI_API_KEY"]); st != 200 {
		t.Errorf("neighbour's own gateway call: got %d %s", st, body)
	}
}

// TestHostileGatewaySnapshotTokens: a sandbox's gateway tokens are not in
// its container's config, so a snapshot (which commits that config into
// an image) and the forks made from it do not carry the parent's live
// tokens: a fork without the gateway has none, and one with it gets its
// own, which dies with the fork while the parent's keeps working.
func TestHostileGatewaySnapshotTokens(t *testing.T) {
	t.Parallel()
	d, _ := gatewayDaemon(t)
	ctx := t.Context()
	gw := gatewayURL(d)
	parent := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t), Gateway: []string{"openai"}})
	token := strings.TrimSpace(execOut(t, d, parent.ID, client.ExecRequest{Argv: []string{"printenv", "OPENAI_API_KEY"}}))
	if !strings.HasPrefix(token, "hcgw_") {
		t.Fatalf("the parent's OPENAI_API_KEY: got %q, want a gateway token", token)
	}
	inspectEnv := func(what, ref string) {
		t.Helper()
		out, err := exec.Command("docker", "inspect", "--format", "{{json .Config.Env}}", ref).CombinedOutput()
		if err != nil {
			t.Fatalf("docker inspect %s: %v: %s", ref, err, out)
		}
		if strings.Contains(string(out), token) || strings.Contains(string(out), "hcgw_") {
			t.Errorf("%s's config holds a gateway token: %s", what, out)
		}
	}
	inspectEnv("the parent's container", dockerdrv.ContainerName(parent.ID))

	sn, err := d.C.CreateSnapshot(ctx, parent.ID)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Cleanup(func() { _ = d.C.DeleteSnapshot(context.Background(), parent.ID, sn.ID) })
	inspectEnv("the snapshot image", sn.Image)

	plain, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: sn.ID})
	if err != nil {
		t.Fatalf("fork without the gateway: %v", err)
	}
	t.Cleanup(func() { _ = d.C.DeleteSandbox(context.Background(), plain.ID) })
	if out := execOut(t, d, plain.ID, client.ExecRequest{Command: "env | grep hcgw_ || true"}); strings.TrimSpace(out) != "" {
		t.Errorf("a fork without the gateway holds tokens: %q", out)
	}

	withGW, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: sn.ID, Gateway: []string{"openai"}})
	if err != nil {
		t.Fatalf("fork with the gateway: %v", err)
	}
	own := strings.TrimSpace(execOut(t, d, withGW.ID, client.ExecRequest{Argv: []string{"printenv", "OPENAI_API_KEY"}}))
	if !strings.HasPrefix(own, "hcgw_") || own == token {
		t.Errorf("the fork's OPENAI_API_KEY: got %q, want a token of its own (the parent's is %q)", own, token)
	}
	if err := d.C.DeleteSandbox(ctx, withGW.ID); err != nil {
		t.Fatal(err)
	}
	if st := hostPost(t, gw+"/openai/chat/completions", own); st != 401 {
		t.Errorf("the destroyed fork's token: got %d, want 401", st)
	}
	if st := hostPost(t, gw+"/openai/chat/completions", token); st != 200 {
		t.Errorf("the parent's token after its fork went: got %d, want 200", st)
	}
	// The token still reaches every process after the box restarts.
	if _, err := d.C.StopSandbox(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.StartSandbox(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(execOut(t, d, parent.ID, client.ExecRequest{Argv: []string{"printenv", "OPENAI_API_KEY"}})); got != token {
		t.Errorf("OPENAI_API_KEY after stop and start: got %q, want %q", got, token)
	}
}
