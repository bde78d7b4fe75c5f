package k8se2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// TestKubernetesE2BSDK: code written for E2B runs unchanged against a
// daemon whose sandboxes are pods. The real e2b npm SDK (test/e2e/e2b, the
// scripts the Docker daemon's E2B tests run) drives a `hotcell serve
// --driver kubernetes`:
//
//   - the control plane (control.test.mjs): create with envs, metadata and
//     a timeout, getInfo, setTimeout, connect, list, kill, a missing
//     sandbox, refusals naming the field, getHost and the preview,
//     getMetrics; and pause, which a pod cannot do, refused through the
//     SDK with an error that says so while the sandbox runs on;
//   - envd's process service (commands.test.mjs) and its filesystem
//     (files.test.mjs), each on pods of the base image made here, whose
//     envd tokens are derived as the daemon derives them.
func TestKubernetesE2BSDK(t *testing.T) {
	node := requireE2BSDK(t)
	// The control script keeps up to eight sandboxes at once, beside other
	// packages' pods on the node's 2 CPUs: a tenth of a CPU each.
	d := startKubeDaemon(t, "--default-limits", "cpus=0.1")
	image := testenv.BaseImage(t)
	d.k8s.ImportImage(t, image)
	drv, err := kubernetes.New(kubernetes.Config{Kubeconfig: d.k8s.Kubeconfig, PullPolicy: "Never"})
	if err != nil {
		t.Fatal(err)
	}
	testk8s.WaitImages(t, drv, image)

	ctx := t.Context()
	key, err := d.C.CreateAPIKey(ctx, "e2b-sdk-on-kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := config.EnsureToken(filepath.Join(d.DataDir, "e2b-secret"))
	if err != nil {
		t.Fatalf("read the daemon's e2b secret: %v", err)
	}
	envd := e2b.New(e2b.Options{Secret: []byte(secret)})
	base := "http://" + d.Addr
	// run runs node --test with args (the script last) and env.
	run := func(t *testing.T, args []string, env ...string) {
		t.Helper()
		script := args[len(args)-1]
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec"}, args...)...)
		cmd.Dir = e2bDir
		cmd.Env = append(os.Environ(),
			"E2B_API_URL="+base+"/e2b",
			"E2B_SANDBOX_URL="+base+"/e2b",
			"E2B_API_KEY="+key.Key,
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
	}
	// A pod of the base image with the E2B user account (until the base
	// image has it), as the Docker daemon's E2B tests make theirs.
	sandbox := func(t *testing.T) client.Sandbox {
		t.Helper()
		// Half a CPU: the scripts stream MiBs through these.
		sb, err := d.C.CreateSandbox(t.Context(), client.CreateSandboxRequest{Image: image, Limits: client.Limits{CPUs: 0.5}})
		if err != nil {
			t.Fatalf("create a sandbox of %s: %v\n%s", image, err, d.Logs())
		}
		t.Cleanup(func() { _ = d.C.DeleteSandbox(context.Background(), sb.ID) })
		execOK(t, d.C, sb.ID, "id user >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash user")
		return sb
	}

	t.Run("control", func(t *testing.T) {
		// A pod cannot pause: the script checks the refusal instead.
		run(t, []string{"control.test.mjs"}, "E2B_ENVD_VERSION="+e2b.EnvdVersion, "E2B_TEST_NO_PAUSE=1")
	})
	t.Run("commands", func(t *testing.T) {
		sb := sandbox(t)
		run(t, []string{"commands.test.mjs"},
			"E2B_TEST_SANDBOX_ID="+sb.ID,
			"E2B_TEST_ENVD_TOKEN="+envd.EnvdToken(sb.ID),
			"E2B_TEST_MISSING_ID=sb-missing-e2b-process",
			"E2B_TEST_MISSING_TOKEN="+envd.EnvdToken("sb-missing-e2b-process"),
			"E2B_TEST_OTHER_TOKEN="+envd.EnvdToken(sb.ID+"x"))
	})
	t.Run("files", func(t *testing.T) {
		sb, other := sandbox(t), sandbox(t)
		run(t, []string{"files.test.mjs"},
			"E2B_TEST_SANDBOX_ID="+sb.ID,
			"E2B_TEST_ENVD_TOKEN="+envd.EnvdToken(sb.ID),
			"E2B_TEST_OTHER_ID="+other.ID,
			"E2B_TEST_OTHER_TOKEN="+envd.EnvdToken(other.ID))
	})
}

// e2bDir holds the E2B scripts and the SDK that scripts/test installs
// there (npm ci).
var e2bDir = filepath.Join("..", "e2e", "e2b")

// requireE2BSDK returns the node binary once the e2b SDK is installed in
// e2bDir; without either the test skips, or fails in CI.
func requireE2BSDK(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "needs Node.js 20.18 or newer for the e2b SDK: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e2bDir, "node_modules", "e2b", "package.json")); err != nil {
		testenv.SkipOrFail(t, "needs the e2b SDK in test/e2e/e2b (cd test/e2e/e2b && npm ci): %v", err)
	}
	return node
}
