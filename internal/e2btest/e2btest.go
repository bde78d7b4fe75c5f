// Package e2btest runs the scripts of the real e2b npm SDK (test/e2e/e2b,
// the SDK pinned at 2.51.0 by its package-lock.json, installed by `npm ci`
// in scripts/test) with Node against a daemon: the E2B tests of every
// backend (the Docker daemon's in test/e2e, the Kubernetes driver's in
// test/k8se2e) run the same scripts through it.
package e2btest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testenv"
)

// NodeTimeout bounds one node run; every script sets tighter per-test
// timeouts of its own.
const NodeTimeout = 10 * time.Minute

var sdk struct {
	once sync.Once
	dir  string
	node string
	err  error
}

// RequireSDK returns the node binary and the scripts' directory, with the
// SDK installed there (npm ci, once per test process, when scripts/test
// has not done it). No Node.js skips t, or fails it in CI; so does an SDK
// that cannot be installed.
func RequireSDK(t testing.TB) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "needs Node.js 20.18 or newer for the e2b SDK: %v", err)
	}
	sdk.once.Do(func() {
		sdk.node = node
		root, err := testenv.ModuleRoot()
		if err != nil {
			sdk.err = err
			return
		}
		sdk.dir = filepath.Join(root, "test", "e2e", "e2b")
		_, errSDK := os.Stat(filepath.Join(sdk.dir, "node_modules", "e2b", "package.json"))
		_, errCode := os.Stat(filepath.Join(sdk.dir, "node_modules", "@e2b", "code-interpreter", "package.json"))
		if errSDK == nil && errCode == nil {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			sdk.err = err
			return
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = sdk.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			sdk.err = &exec.Error{Name: "npm ci in test/e2e/e2b: " + strings.TrimSpace(string(out)), Err: err}
		}
	})
	if sdk.err != nil {
		testenv.SkipOrFail(t, "needs the e2b npm SDK in test/e2e/e2b (npm ci): %v", sdk.err)
	}
	return sdk.node, sdk.dir
}

// Target is the daemon a script runs against.
type Target struct {
	// Addr is its API's host:port.
	Addr string
	// Token is its API token, for the script to check through hotcell's
	// own API what the SDK did.
	Token string
	// APIKey is an E2B API key of it.
	APIKey string
	// Template is the template id the script's sandboxes are made from:
	// an image with bash and the E2B user account.
	Template string
	// Logs returns the tail of its log, for a failure; nil for none.
	Logs func() string
}

// Run runs `node --test <script>` from test/e2e/e2b against tg and fails
// t, with node's output and the daemon's log, when node fails. It returns
// node's output, so that a script can hand values (a sandbox id) to the
// Go test that runs the next step. The script gets:
//
//   - E2B_API_URL and E2B_SANDBOX_URL: http://<Addr>/e2b;
//   - E2B_API_KEY and E2B_TEMPLATE: tg's;
//   - HOTCELL_URL and HOTCELL_TOKEN: hotcell's own API;
//
// and env, NAME=value variables that add to or override those.
func Run(t testing.TB, tg Target, script string, env ...string) string {
	t.Helper()
	node, dir := RequireSDK(t)
	base := "http://" + tg.Addr
	ctx, cancel := context.WithTimeout(t.Context(), NodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", filepath.Join(dir, script))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+base+"/e2b",
		"E2B_SANDBOX_URL="+base+"/e2b",
		"E2B_API_KEY="+tg.APIKey,
		"E2B_TEMPLATE="+tg.Template,
		"HOTCELL_URL="+base,
		"HOTCELL_TOKEN="+strings.TrimSpace(tg.Token),
		"NO_COLOR=1",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		logs := ""
		if tg.Logs != nil {
			logs = tg.Logs()
		}
		t.Fatalf("node --test e2b/%s: %v\n%s\n--- daemon log (tail) ---\n%s", script, err, out, logs)
	}
	t.Logf("node --test e2b/%s:\n%s", script, out)
	return string(out)
}
