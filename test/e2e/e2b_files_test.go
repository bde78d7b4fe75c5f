package e2e

import (
	"path/filepath"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestE2BFiles runs the e2b SDK's filesystem calls against the daemon:
// files.write (single, multiple, stream, gzip) and read (text, bytes,
// blob, stream, gzip), list with depth, exists, getInfo, makeDir, rename,
// remove, watchDir (recursive, stop), signed uploadUrl/downloadUrl fetched
// with plain HTTP (tampered, expired, read-for-write, other path and other
// sandbox refused), and the error cases (missing file, unknown user,
// another sandbox's envd token). Two sandboxes of the base image are made
// here, their envd tokens derived as the daemon derives them, so the test
// needs no control plane.
func TestE2BFiles(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	image := testenv.BaseImage(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: image})
	other := newSandbox(t, d, client.CreateSandboxRequest{Image: image})
	secret, _, err := config.EnsureToken(filepath.Join(d.DataDir, "e2b-secret"))
	if err != nil {
		t.Fatalf("read the daemon's e2b secret: %v", err)
	}
	srv := e2b.New(e2b.Options{Secret: []byte(secret)})
	runE2BNodeOn(t, d, "files.test.mjs",
		"E2B_TEST_SANDBOX_ID="+sb.ID,
		"E2B_TEST_ENVD_TOKEN="+srv.EnvdToken(sb.ID),
		"E2B_TEST_OTHER_ID="+other.ID,
		"E2B_TEST_OTHER_TOKEN="+srv.EnvdToken(other.ID),
	)
}
