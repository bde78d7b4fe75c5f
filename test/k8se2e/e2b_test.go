package k8se2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/e2btest"
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
	e2btest.RequireSDK(t)
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
	target := e2btest.Target{Addr: d.Addr, Token: string(token), APIKey: key.Key, Template: image, Logs: d.Logs}
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
		e2btest.Run(t, target, "control.test.mjs", "E2B_ENVD_VERSION="+e2b.EnvdVersion, "E2B_TEST_NO_PAUSE=1")
	})
	t.Run("commands", func(t *testing.T) {
		sb := sandbox(t)
		e2btest.Run(t, target, "commands.test.mjs",
			"E2B_TEST_SANDBOX_ID="+sb.ID,
			"E2B_TEST_ENVD_TOKEN="+envd.EnvdToken(sb.ID),
			"E2B_TEST_MISSING_ID=sb-missing-e2b-process",
			"E2B_TEST_MISSING_TOKEN="+envd.EnvdToken("sb-missing-e2b-process"),
			"E2B_TEST_OTHER_TOKEN="+envd.EnvdToken(sb.ID+"x"))
	})
	t.Run("files", func(t *testing.T) {
		sb, other := sandbox(t), sandbox(t)
		e2btest.Run(t, target, "files.test.mjs",
			"E2B_TEST_SANDBOX_ID="+sb.ID,
			"E2B_TEST_ENVD_TOKEN="+envd.EnvdToken(sb.ID),
			"E2B_TEST_OTHER_ID="+other.ID,
			"E2B_TEST_OTHER_TOKEN="+envd.EnvdToken(other.ID))
	})
}
