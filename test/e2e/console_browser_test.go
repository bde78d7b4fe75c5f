package e2e

// The web console's end-to-end test: Debian's chromium, headless, driven
// by playwright-core (test/e2e/console, pinned by its package-lock.json,
// installed by `npm ci` in scripts/test; it downloads no browser) through
// test/e2e/console/console.test.mjs, against a real daemon.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// chromiumPath is Debian's chromium (scripts/lib.sh ensure_chromium).
const chromiumPath = "/usr/bin/chromium"

var consoleDeps struct {
	once sync.Once
	err  error
}

// requireConsoleDeps returns node, with playwright-core installed in
// test/e2e/console (npm ci, once per test process, when scripts/test has
// not done it) and Debian's chromium present. Without them the test skips,
// or fails in CI.
func requireConsoleDeps(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "needs Node.js to drive the browser: %v", err)
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.SkipOrFail(t, "needs Debian's chromium (apt-get install chromium; scripts/test does): %v", err)
	}
	consoleDeps.once.Do(func() {
		if _, err := os.Stat(filepath.Join("console", "node_modules", "playwright-core", "package.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = "console"
		if out, err := cmd.CombinedOutput(); err != nil {
			consoleDeps.err = &exec.Error{Name: "npm ci in test/e2e/console: " + strings.TrimSpace(string(out)), Err: err}
		}
	})
	if consoleDeps.err != nil {
		testenv.SkipOrFail(t, "needs playwright-core in test/e2e/console (npm ci): %v", consoleDeps.err)
	}
	return node
}

// TestConsoleBrowser drives the console in a real headless Chromium against
// the shared daemon: a wrong key refused, sign in, create from the form and
// see it running, a terminal's echo on screen, resize, reload and
// re-attach, an upload seen in the browser and through the API, a process
// log followed, a stats chart updating, an egress change and its denial
// listed, a page of another origin refused (fetch, form and WebSocket),
// destroy and see it leave. Screenshots go to $HOTCELL_CONSOLE_SCREENSHOTS
// (relative to the repository: docs/console refreshes the README's), else
// to a temp dir.
func TestConsoleBrowser(t *testing.T) {
	t.Parallel()
	node := requireConsoleDeps(t)
	d := sharedDaemon(t)
	label := sanitizeLabel(t.Name())
	t.Cleanup(func() {
		// Whatever the browser created and did not destroy.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := d.C.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			return
		}
		for _, sb := range list {
			if sb.Labels["test"] == label {
				_ = d.C.DeleteSandbox(ctx, sb.ID)
			}
		}
	})
	tpl := strings.ToLower(label) + "-tpl"
	t.Cleanup(func() { _ = d.C.DeleteTemplate(context.Background(), tpl, true) })
	runConsoleNode(t, node, d, "console.test.mjs", "HOTCELL_LABEL="+label, "HOTCELL_TEMPLATE="+tpl)
}

// TestConsoleBrowserGateway: a sandbox's LLM gateway use shows on its
// Gateway tab against the provider's budget (a daemon with a fake upstream).
func TestConsoleBrowserGateway(t *testing.T) {
	t.Parallel()
	node := requireConsoleDeps(t)
	d, _ := gatewayDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t), Gateway: []string{"limited"}})
	res := run(t, d, sb.ID, `curl -sS --max-time 30 -H "Authorization: Bearer $HOTCELL_LIMITED_TOKEN" -H 'content-type: application/json' -d '{"model":"m","messages":[]}' "$HOTCELL_LIMITED_BASE_URL/chat/completions"`)
	if !strings.Contains(res.Stdout, "hello from the fake upstream") {
		t.Fatalf("the sandbox's call through the gateway: %+v", res)
	}
	runConsoleNode(t, node, d, "gateway.test.mjs", "HOTCELL_SANDBOX="+sb.ID)
}

// runConsoleNode runs `node --test test/e2e/console/<script>` against d
// and fails t, with node's output, when node fails. The script gets
// HOTCELL_URL, HOTCELL_TOKEN (to check from the API's side), HOTCELL_KEY
// (a fresh API key to sign in with), CHROMIUM and SCREENSHOTS, and env.
func runConsoleNode(t *testing.T, node string, d *testdaemon.Daemon, script string, env ...string) {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	name := keyName(t, "browser")
	key, err := d.C.CreateAPIKey(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.C.DeleteAPIKey(context.Background(), name) })
	shots := os.Getenv("HOTCELL_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if !filepath.IsAbs(shots) {
		shots = filepath.Join("..", "..", shots) // relative to the repository, not test/e2e
		if shots, err = filepath.Abs(shots); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 14*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", filepath.Join("console", script))
	cmd.Env = append(os.Environ(),
		"HOTCELL_URL=http://"+d.Addr,
		"HOTCELL_TOKEN="+strings.TrimSpace(string(token)),
		"HOTCELL_KEY="+key.Key,
		"CHROMIUM="+chromiumPath,
		"SCREENSHOTS="+shots,
		"NO_COLOR=1",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test console/%s: %v\n%s\n--- daemon log (tail) ---\n%s", script, err, out, tail(d.Logs(), 8000))
	}
	t.Logf("node --test console/%s:\n%s", script, out)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
