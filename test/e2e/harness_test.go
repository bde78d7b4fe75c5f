// Package e2e drives hotcell end to end: a real `hotcell serve` process, a
// real Docker Engine, real agents in real containers, through the public API
// with the Go SDK.
package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// sharedDaemon returns the daemon most tests share. It belongs to the test
// binary (TestMain closes it), not to the test that starts it.
func sharedDaemon(t *testing.T) *testdaemon.Daemon {
	t.Helper()
	return testdaemon.Shared(t)
}

func TestMain(m *testing.M) {
	// The tests that clone a repository clone a local one (makeRepo); a
	// daemon refuses host paths unless the operator opts in.
	testdaemon.SetSharedOptions(testdaemon.Options{Args: []string{"--allow-local-repos"}})
	code := m.Run()
	testdaemon.CloseShared()
	for _, name := range templateNames {
		removeTemplateImages(name, true)
	}
	os.Exit(code)
}

// newSandbox creates a sandbox and destroys it when the test ends.
func newSandbox(t *testing.T, d *testdaemon.Daemon, req client.CreateSandboxRequest) client.Sandbox {
	t.Helper()
	if req.Labels == nil {
		req.Labels = map[string]string{}
	}
	req.Labels["test"] = sanitizeLabel(t.Name())
	sb, err := d.C.CreateSandbox(t.Context(), req)
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Errorf("destroy %s: %v", sb.ID, err)
		}
	})
	return sb
}

func sanitizeLabel(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, s)
	if len(s) > 60 {
		s = s[:60]
	}
	return strings.Trim(s, "-.")
}

// run execs a shell command and fails the test on a transport error.
func run(t *testing.T, d *testdaemon.Daemon, id, command string) client.ExecResult {
	t.Helper()
	res, err := d.C.Exec(t.Context(), id, client.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

func mustOK(t *testing.T, res client.ExecResult, what string) string {
	t.Helper()
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d, stdout %q, stderr %q", what, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b)
}
