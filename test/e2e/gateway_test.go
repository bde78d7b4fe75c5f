package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// gatewayDaemon starts a daemon whose LLM gateway forwards to a fake
// upstream on the host's loopback. The keys are in files only the daemon
// reads.
func gatewayDaemon(t *testing.T) (*testdaemon.Daemon, *gatewaytest.Upstream) {
	t.Helper()
	testenv.RequireDocker(t)
	up := gatewaytest.New(t)
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	okey := write("openai.key", gatewaytest.OpenAIKey+"\n")
	akey := write("anthropic.key", gatewaytest.AnthropicKey)
	providers := write("providers.toml", fmt.Sprintf(`
[[provider]]
name = "openai"
kind = "openai"
base_url = "%[1]s/v1"
key_file = %[2]q

[[provider]]
name = "anthropic"
kind = "anthropic"
base_url = "%[1]s"
key_file = %[3]q

[[provider]]
name = "limited"
kind = "openai"
base_url = "%[1]s/v1"
key_file = %[2]q
budget_requests = 2
`, up.URL, okey, akey))
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--providers-file", providers}})
	t.Cleanup(d.Close)
	return d, up
}

// gatewayURL is the gateway as the host reaches it: the egress network's
// gateway address.
func gatewayURL(d *testdaemon.Daemon) string {
	return "http://" + d.EgressSubnet.Masked().Addr().Next().String() + ":8090"
}

// pyPost is a python3 program that POSTs argv[2] to argv[1] with the
// header argv[3]: argv[4] and prints the status and the body.
const pyPost = `import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST", headers={"Content-Type": "application/json", sys.argv[3]: sys.argv[4]})
try:
    r = urllib.request.urlopen(req, timeout=30)
    print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
`

// pyStream prints the arrival time of every line of a streamed answer.
const pyStream = `import os, sys, time, json, http.client, urllib.parse
u = urllib.parse.urlparse(os.environ["OPENAI_BASE_URL"] + "/chat/completions")
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
c.request("POST", u.path, body=json.dumps({"model": "m", "stream": True, "stream_options": {"include_usage": True}}),
          headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
r = c.getresponse()
print("status", r.status, flush=True)
while True:
    line = r.readline()
    if not line:
        break
    if line.strip():
        print("%.6f %s" % (time.time(), line.decode().strip()), flush=True)
`

// pyScan looks for the keys given on stdin in every process's env and
// command line and in every regular file under / (but /proc, /sys and
// /dev, and files over 64 MiB), and prints where it found one.
const pyScan = `import os, sys
keys = [k.encode() for k in sys.stdin.read().split()]
hits, files = [], 0
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for n in ("environ", "cmdline"):
            try:
                d = open("/proc/%s/%s" % (pid, n), "rb").read()
            except Exception:
                continue
            if any(k in d for k in keys):
                hits.append("/proc/%s/%s" % (pid, n))
for root, dirs, names in os.walk("/"):
    if root == "/":
        dirs[:] = [x for x in dirs if x not in ("proc", "sys", "dev")]
    for n in names:
        p = os.path.join(root, n)
        try:
            if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > (64 << 20):
                continue
            d = open(p, "rb").read()
        except Exception:
            continue
        files += 1
        if any(k in d for k in keys):
            hits.append(p)
print("scanned %d files" % files)
for h in hits:
    print("HIT", h)
`

func execOut(t *testing.T, d *testdaemon.Daemon, id string, req client.ExecRequest) string {
	t.Helper()
	if req.TimeoutMs == 0 {
		req.TimeoutMs = 60_000
	}
	res, err := d.C.Exec(t.Context(), id, req)
	if err != nil {
		t.Fatalf("exec %v: %v", req.Argv, err)
	}
	return mustOK(t, res, strings.Join(req.Argv, " "))
}

// postFrom runs pyPost in a sandbox and returns the status and body.
func postFrom(t *testing.T, d *testdaemon.Daemon, id, url, body, header, value string) (int, string) {
	t.Helper()
	out := execOut(t, d, id, client.ExecRequest{Argv: []string{"python3", "-c", pyPost, url, body, header, value}})
	status, rest, _ := strings.Cut(out, "\n")
	n, err := strconv.Atoi(strings.TrimSpace(status))
	if err != nil {
		t.Fatalf("post %s: output %q", url, out)
	}
	return n, rest
}

func hostPost(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestGatewayEndToEnd(t *testing.T) {
	d, up := gatewayDaemon(t)
	image := testenv.BaseImage(t)
	ctx := t.Context()

	// Bad input at create.
	_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Image: image, Gateway: []string{"openai", "nope"}})
	if err == nil || !strings.Contains(err.Error(), "gateway[1]") {
		t.Errorf("unknown provider: got %v, want a 400 naming gateway[1]", err)
	}
	_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Image: image, Gateway: []string{"openai"}, Env: map[string]string{"OPENAI_API_KEY": "x"}})
	if err == nil || !strings.Contains(err.Error(), "env.OPENAI_API_KEY") {
		t.Errorf("env set by the gateway: got %v, want a 400 naming env.OPENAI_API_KEY", err)
	}

	// The rest runs under each runtime: the gateway is reached from inside
	// the box over its network, whichever kernel serves the box.
	forEachRuntime(t, func(t *testing.T, rt string) {
		a := newSandbox(t, d, client.CreateSandboxRequest{Image: image, Runtime: rt, Gateway: []string{"openai", "anthropic", "limited"}})
		if !slices.Equal(a.Gateway, []string{"openai", "anthropic", "limited"}) {
			t.Errorf("sandbox gateway: got %v", a.Gateway)
		}
		if got, _ := d.C.GetSandbox(ctx, a.ID); len(got.Env) != 0 {
			t.Errorf("the sandbox record shows env %v; tokens must not be in it", got.Env)
		}
		envOut := execOut(t, d, a.ID, client.ExecRequest{Argv: []string{"sh", "-c", "env | grep -E '^(OPENAI|ANTHROPIC|HOTCELL_)' | sort"}})
		env := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(envOut), "\n") {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
		if !strings.HasPrefix(env["OPENAI_API_KEY"], "hcgw_") || env["OPENAI_BASE_URL"] != "http://host.docker.internal:8090/openai" ||
			!strings.HasPrefix(env["ANTHROPIC_API_KEY"], "hcgw_") || env["HOTCELL_LIMITED_BASE_URL"] == "" {
			t.Fatalf("sandbox env: got\n%s", envOut)
		}

		t.Run("openai json with python", func(t *testing.T) {
			out := execOut(t, d, a.ID, client.ExecRequest{Argv: []string{"python3", "-c",
				`import os, json, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=b'{"model":"m","messages":[]}',
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]["content"])`}})
			if strings.TrimSpace(out) != "hello from the fake upstream" {
				t.Errorf("got %q", out)
			}
			last, _ := up.Last()
			if got := last.Header.Get("Authorization"); got != "Bearer "+gatewaytest.OpenAIKey {
				t.Errorf("upstream Authorization: got %q, want the real key", got)
			}
		})

		t.Run("anthropic json with curl", func(t *testing.T) {
			out := execOut(t, d, a.ID, client.ExecRequest{Command: `curl -sS --max-time 30 -H "x-api-key: $ANTHROPIC_API_KEY" -H 'content-type: application/json' -d '{"model":"m"}' "$ANTHROPIC_BASE_URL/v1/messages"`})
			if !strings.Contains(out, "hello from the fake upstream") {
				t.Errorf("got %q", out)
			}
			last, _ := up.Last()
			if last.Header.Get("X-Api-Key") != gatewaytest.AnthropicKey || strings.Contains(fmt.Sprint(last.Header), "hcgw_") {
				t.Errorf("upstream headers: got %v", last.Header)
			}
		})

		t.Run("stream arrives chunk by chunk", func(t *testing.T) {
			held, release := up.Hold()
			defer release()
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := d.C.Exec(context.WithoutCancel(ctx), a.ID, client.ExecRequest{Argv: []string{"python3", "-c", pyStream}, TimeoutMs: 60_000})
				done <- result{res.Stdout + res.Stderr, err}
			}()
			select {
			case <-held:
			case <-time.After(30 * time.Second):
				t.Fatal("the upstream never started the stream")
			}
			time.Sleep(500 * time.Millisecond)
			releasedAt := float64(time.Now().UnixNano()) / 1e9
			release()
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			var before, after int
			for _, l := range strings.Split(r.out, "\n") {
				ts, line, ok := strings.Cut(l, " ")
				f, err := strconv.ParseFloat(ts, 64)
				if !ok || err != nil || !strings.HasPrefix(line, "data:") {
					continue
				}
				if f < releasedAt {
					before++
				} else {
					after++
				}
			}
			// The upstream sent StreamChunks events, then held the rest: they
			// must have reached the program before the release.
			if before != gatewaytest.StreamChunks || after < 2 {
				t.Errorf("events before the release %d (want %d), after %d (want the last, usage and [DONE]); output:\n%s", before, gatewaytest.StreamChunks, after, r.out)
			}
		})

		t.Run("usage", func(t *testing.T) {
			u, err := d.C.Usage(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]client.GatewayUsage{}
			for _, p := range u.Providers {
				byName[p.Provider] = p
			}
			o, an := byName["openai"], byName["anthropic"]
			// One JSON answer and one stream, 11 + 7 tokens each.
			if o.Requests != 2 || o.InputTokens != 22 || o.OutputTokens != 14 || o.TotalTokens != 36 || o.BytesOut == 0 || o.BytesIn == 0 {
				t.Errorf("openai usage: got %+v", o)
			}
			if an.Requests != 1 || an.InputTokens != 25 || an.OutputTokens != 15 {
				t.Errorf("anthropic usage: got %+v", an)
			}
			if byName["limited"].Budget.Requests != 2 {
				t.Errorf("limited budget: got %+v", byName["limited"])
			}
			tok, _ := os.ReadFile(filepath.Join(d.DataDir, "token"))
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.Addr+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf(`hotcell_gateway_tokens_total{kind="input",provider="openai",sandbox=%q} 22`, a.ID)
			if body := readAll(resp); !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		})

		t.Run("budget", func(t *testing.T) {
			var got []int
			var last string
			for range 3 {
				st, body := postFrom(t, d, a.ID, env["HOTCELL_LIMITED_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+env["HOTCELL_LIMITED_TOKEN"])
				got = append(got, st)
				last = body
			}
			if !slices.Equal(got, []int{200, 200, 429}) {
				t.Fatalf("statuses: got %v, want 200 200 429", got)
			}
			var doc struct {
				Error struct{ Code, Budget string } `json:"error"`
			}
			if json.Unmarshal([]byte(last), &doc); doc.Error.Budget != "requests" || doc.Error.Code != "budget_exceeded" {
				t.Errorf("429 body: got %s", last)
			}
			// One audit line per request, the refused one too.
			logs := d.Logs()
			if !strings.Contains(logs, "gateway request") || !strings.Contains(logs, "provider=limited") || !strings.Contains(logs, "code=budget_exceeded") {
				t.Error("no audit lines for the budget requests in the daemon log")
			}
		})

		t.Run("the key never enters the sandbox", func(t *testing.T) {
			out := execOut(t, d, a.ID, client.ExecRequest{Argv: []string{"python3", "-c", pyScan},
				Stdin: gatewaytest.OpenAIKey + "\n" + gatewaytest.AnthropicKey + "\n", TimeoutMs: 300_000})
			if strings.Contains(out, "HIT") || !strings.Contains(out, "scanned") {
				t.Errorf("scan: %s", out)
			}
			t.Logf("key scan: %s", strings.TrimSpace(out))
			// The scan itself works: it finds the sandbox's own token.
			out = execOut(t, d, a.ID, client.ExecRequest{Argv: []string{"python3", "-c", pyScan}, Stdin: env["OPENAI_API_KEY"], TimeoutMs: 300_000})
			if !strings.Contains(out, "HIT /proc/") {
				t.Errorf("control scan for the token found nothing: %s", out)
			}
			for _, secret := range []string{gatewaytest.OpenAIKey, gatewaytest.AnthropicKey, env["OPENAI_API_KEY"]} {
				if strings.Contains(d.LogsSince(0), secret) {
					t.Errorf("the daemon log holds a secret (%.10s...)", secret)
				}
			}
		})

		t.Run("allowlist sandbox reaches the gateway; tokens are per sandbox", func(t *testing.T) {
			b := newSandbox(t, d, client.CreateSandboxRequest{Image: image, Runtime: rt, Gateway: []string{"openai"},
				Egress: &client.EgressPolicy{Mode: client.EgressAllowlist, Allow: []string{"192.0.2.1:443"}}})
			bEnv := execOut(t, d, b.ID, client.ExecRequest{Command: `printf '%s %s' "$OPENAI_BASE_URL" "$OPENAI_API_KEY"`})
			bURL, bTok, _ := strings.Cut(bEnv, " ")
			if st, body := postFrom(t, d, b.ID, bURL+"/chat/completions", `{}`, "Authorization", "Bearer "+bTok); st != 200 {
				t.Errorf("allowlist sandbox with its own token: got %d %s", st, body)
			}
			if st, body := postFrom(t, d, b.ID, bURL+"/chat/completions", `{}`, "Authorization", "Bearer "+env["OPENAI_API_KEY"]); st != 401 {
				t.Errorf("sandbox b with a's token: got %d %s, want 401", st, body)
			}
			if st, body := postFrom(t, d, b.ID, env["ANTHROPIC_BASE_URL"]+"/v1/messages", `{}`, "x-api-key", bTok); st != 401 {
				t.Errorf("b's openai token for anthropic: got %d %s, want 401", st, body)
			}
		})

		t.Run("rotate", func(t *testing.T) {
			cred, err := d.C.RotateGatewayToken(ctx, a.ID, "openai")
			if err != nil {
				t.Fatal(err)
			}
			if cred.Token == env["OPENAI_API_KEY"] || cred.TokenFile == "" {
				t.Fatalf("rotate: got %+v", cred)
			}
			if st, _ := postFrom(t, d, a.ID, env["OPENAI_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+env["OPENAI_API_KEY"]); st != 401 {
				t.Errorf("old token after rotation: got %d, want 401", st)
			}
			tok := strings.TrimSpace(execOut(t, d, a.ID, client.ExecRequest{Argv: []string{"cat", cred.TokenFile}}))
			if tok != cred.Token {
				t.Errorf("token file: got %q, want the new token", tok)
			}
			if st, body := postFrom(t, d, a.ID, env["OPENAI_BASE_URL"]+"/chat/completions", `{}`, "Authorization", "Bearer "+tok); st != 200 {
				t.Errorf("new token: got %d %s", st, body)
			}
			env["OPENAI_API_KEY"] = tok
		})

		t.Run("revoke and destroy", func(t *testing.T) {
			// From the host (outside the sandbox network) a token is checked
			// for what it is, not where it comes from.
			gw := gatewayURL(d)
			if st := hostPost(t, gw+"/anthropic/v1/messages", env["ANTHROPIC_API_KEY"]); st != 200 {
				t.Errorf("anthropic token from the host: got %d, want 200", st)
			}
			sb, err := d.C.RevokeGateway(ctx, a.ID, "anthropic")
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(sb.Gateway, "anthropic") {
				t.Errorf("after revoke the sandbox still lists anthropic: %v", sb.Gateway)
			}
			if st := hostPost(t, gw+"/anthropic/v1/messages", env["ANTHROPIC_API_KEY"]); st != 401 {
				t.Errorf("revoked token: got %d, want 401", st)
			}
			// Tokens and usage outlive a daemon restart; the gateway comes back.
			// A call is counted when the gateway's handler ends, just after
			// the caller has the answer's last byte: wait until no call
			// holds a reservation.
			var before client.SandboxUsage
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				before, err = d.C.Usage(ctx, a.ID)
				if err != nil {
					t.Fatal(err)
				}
				inFlight := slices.ContainsFunc(before.Providers, func(p client.GatewayUsage) bool { return p.ReservedTokens > 0 })
				if !inFlight || time.Now().After(deadline) {
					break
				}
			}
			d.Stop(syscall.SIGTERM)
			d.Restart()
			after, err := d.C.Usage(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(before.Providers, after.Providers) {
				t.Errorf("usage across a restart: before %+v, after %+v", before.Providers, after.Providers)
			}
			if st := hostPost(t, gw+"/openai/chat/completions", env["OPENAI_API_KEY"]); st != 200 {
				t.Errorf("openai token before destroy: got %d, want 200", st)
			}
			n := len(up.Requests())
			if err := d.C.DeleteSandbox(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if st := hostPost(t, gw+"/openai/chat/completions", env["OPENAI_API_KEY"]); st != 401 {
				t.Errorf("destroyed sandbox's token: got %d, want 401", st)
			}
			if got := len(up.Requests()); got != n {
				t.Errorf("refused requests reached the upstream: %d more", got-n)
			}
			if _, err := d.C.Usage(ctx, a.ID); err == nil {
				t.Error("usage of a destroyed sandbox: got nil error, want 404")
			}
		})
	})
}
