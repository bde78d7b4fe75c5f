package e2e

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// e2bProcessEnv makes a sandbox of the base image for the process tests,
// with the E2B user account (until the base image has it), and returns the
// environment that hands it to sandbox.mjs: its id and envd token, a
// missing sandbox's id and token, and another sandbox's token. The tokens
// are derived as the daemon derives them, from its data dir's secret, so
// the tests need no control plane.
func e2bProcessEnv(t *testing.T, d *testdaemon.Daemon) (id string, env []string) {
	t.Helper()
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	mustOK(t, run(t, d, sb.ID, "id user >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash user"), "add the E2B user")
	secret, _, err := config.EnsureToken(filepath.Join(d.DataDir, "e2b-secret"))
	if err != nil {
		t.Fatalf("read the daemon's e2b secret: %v", err)
	}
	srv := e2b.New(e2b.Options{Secret: []byte(secret)})
	return sb.ID, []string{
		"E2B_TEST_SANDBOX_ID=" + sb.ID,
		"E2B_TEST_ENVD_TOKEN=" + srv.EnvdToken(sb.ID),
		"E2B_TEST_MISSING_ID=sb-missing-e2b-process",
		"E2B_TEST_MISSING_TOKEN=" + srv.EnvdToken("sb-missing-e2b-process"),
		"E2B_TEST_OTHER_TOKEN=" + srv.EnvdToken(sb.ID+"x"),
	}
}

// TestE2BCommands runs commands.* of the real e2b SDK: foreground runs
// (exit codes, cwd, envs, users, timeout, callbacks, MiBs of output),
// background processes with stdin, kill, connect, and refused callers.
func TestE2BCommands(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	_, env := e2bProcessEnv(t, d)
	runE2BNodeOn(t, d, "commands.test.mjs", env...)
}

// TestE2BPty runs pty.* of the real e2b SDK.
func TestE2BPty(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	_, env := e2bProcessEnv(t, d)
	runE2BNodeOn(t, d, "pty.test.mjs", env...)
}

// TestE2BCommandsConnectAfterRestart starts a background command through
// the SDK, restarts the daemon, and has a new SDK client reattach to the
// command by pid, feed it and see its output: the process is the agent's,
// not the daemon's.
func TestE2BCommandsConnectAfterRestart(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	_, env := e2bProcessEnv(t, d)
	out := runE2BNodeOn(t, d, "commands_restart.test.mjs", append(env, "PHASE=start")...)
	m := regexp.MustCompile(`PID=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the first phase printed no PID=:\n%s", out)
	}
	d.Restart()
	runE2BNodeOn(t, d, "commands_restart.test.mjs", append(env, "PHASE=connect", "E2B_TEST_PID="+m[1])...)
}
