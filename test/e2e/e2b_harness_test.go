package e2e

// The harness of the E2B tests: the real e2b npm SDK (test/e2e/e2b, pinned
// at 2.51.0 by its package-lock.json, installed by `npm ci` in scripts/test)
// run by Node against a real daemon. Each E2B surface has its own Go test
// calling runE2BNode with its own test/e2e/e2b/<name>.test.mjs.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// e2bNodeTimeout bounds one node run; every .mjs sets tighter per-test
// timeouts of its own.
const e2bNodeTimeout = 10 * time.Minute

// runE2BNode runs `node --test test/e2e/e2b/<script>` against the shared
// daemon and fails t, with node's output, when node fails. See
// runE2BNodeOn for the environment the script gets; env adds NAME=value
// variables (or overrides them).
func runE2BNode(t *testing.T, script string, env ...string) string {
	t.Helper()
	return runE2BNodeOn(t, sharedDaemon(t), script, env...)
}

// runE2BNodeOn is runE2BNode against daemon d (a test's own daemon, e.g.
// one it restarts between two node runs). It returns node's output, so
// that a script can hand values (a sandbox id) to the Go test that runs
// the next step. The script gets:
//
//   - E2B_API_URL and E2B_SANDBOX_URL: http://<d.Addr>/e2b;
//   - E2B_API_KEY: an API key minted on d with `hotcell keys create`
//     (e2bKey);
//   - E2B_TEMPLATE: a template id whose image has bash and the E2B user
//     account (hotcell/base; the test daemons' default image is busybox,
//     which is what "base" means there);
//   - HOTCELL_URL and HOTCELL_TOKEN: hotcell's own API, to check from the
//     other side what the SDK did.
func runE2BNodeOn(t *testing.T, d *testdaemon.Daemon, script string, env ...string) string {
	t.Helper()
	node := requireE2BSDK(t)
	image := testenv.BaseImage(t)
	token, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatalf("read the daemon's token: %v", err)
	}
	base := "http://" + d.Addr
	ctx, cancel := context.WithTimeout(t.Context(), e2bNodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", filepath.Join("e2b", script))
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+base+"/e2b",
		"E2B_SANDBOX_URL="+base+"/e2b",
		"E2B_API_KEY="+e2bKey(t, d),
		"E2B_TEMPLATE="+image,
		"HOTCELL_URL="+base,
		"HOTCELL_TOKEN="+strings.TrimSpace(string(token)),
		"NO_COLOR=1",
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test e2b/%s: %v\n%s\n--- daemon log (tail) ---\n%s", script, err, out, d.Logs())
	}
	t.Logf("node --test e2b/%s:\n%s", script, out)
	return string(out)
}

var e2bKeys struct {
	sync.Mutex
	byDataDir map[string]string
}

// e2bKey returns an API key of daemon d, minted with `hotcell keys create`
// on first use (the key lives in d's database, so it outlives a restart).
func e2bKey(t *testing.T, d *testdaemon.Daemon) string {
	t.Helper()
	e2bKeys.Lock()
	defer e2bKeys.Unlock()
	if k := e2bKeys.byDataDir[d.DataDir]; k != "" {
		return k
	}
	r := newCLI(t, d).want(0, "keys", "create", "e2b-sdk-tests")
	key := strings.TrimSpace(r.stdout)
	if e2bKeys.byDataDir == nil {
		e2bKeys.byDataDir = map[string]string{}
	}
	e2bKeys.byDataDir[d.DataDir] = key
	return key
}

var e2bSDK struct {
	once sync.Once
	node string
	err  error
}

// requireE2BSDK returns the node binary, with the e2b SDK installed in
// test/e2e/e2b (npm ci, once per test process, when scripts/test has not
// done it). No Node.js skips the test, or fails it in CI.
func requireE2BSDK(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "needs Node.js 20.18 or newer for the e2b SDK: %v", err)
	}
	e2bSDK.once.Do(func() {
		e2bSDK.node = node
		_, errSDK := os.Stat(filepath.Join("e2b", "node_modules", "e2b", "package.json"))
		_, errCode := os.Stat(filepath.Join("e2b", "node_modules", "@e2b", "code-interpreter", "package.json"))
		if errSDK == nil && errCode == nil {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			e2bSDK.err = err
			return
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = "e2b"
		if out, err := cmd.CombinedOutput(); err != nil {
			e2bSDK.err = &exec.Error{Name: "npm ci in test/e2e/e2b: " + strings.TrimSpace(string(out)), Err: err}
		}
	})
	if e2bSDK.err != nil {
		testenv.SkipOrFail(t, "needs the e2b npm SDK in test/e2e/e2b (npm ci): %v", e2bSDK.err)
	}
	return e2bSDK.node
}
