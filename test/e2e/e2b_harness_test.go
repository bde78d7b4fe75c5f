package e2e

// The harness of the E2B tests: the real e2b npm SDK run by Node against a
// real daemon (internal/e2btest). Each E2B surface has its own Go test
// calling runE2BNode with its own test/e2e/e2b/<name>.test.mjs.

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hotcell/hotcell/internal/e2btest"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// runE2BNode runs `node --test test/e2e/e2b/<script>` against the shared
// daemon and fails t, with node's output, when node fails. See
// runE2BNodeOn for the environment the script gets; env adds NAME=value
// variables (or overrides them).
func runE2BNode(t *testing.T, script string, env ...string) string {
	t.Helper()
	return runE2BNodeOn(t, sharedDaemon(t), script, env...)
}

// runE2BNodeOn is runE2BNode against daemon d (a test's own daemon, e.g.
// one it restarts between two node runs), through e2btest.Run: it returns
// node's output, so that a script can hand values (a sandbox id) to the Go
// test that runs the next step. The script's E2B_API_KEY is an API key
// minted on d with `hotcell keys create` (e2bKey), and its E2B_TEMPLATE
// an image with bash and the E2B user account (hotcell/base; the test
// daemons' default image is busybox, which is what "base" means there).
func runE2BNodeOn(t *testing.T, d *testdaemon.Daemon, script string, env ...string) string {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatalf("read the daemon's token: %v", err)
	}
	return e2btest.Run(t, e2btest.Target{
		Addr: d.Addr, Token: string(token), APIKey: e2bKey(t, d),
		Template: testenv.BaseImage(t), Logs: d.Logs,
	}, script, env...)
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
