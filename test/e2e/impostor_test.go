package e2e

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestImpostorAgent: code in a sandbox, as root, dials the daemon's agent
// socket and answers as the agent (whatever comes out of a sandbox is
// untrusted). Its statuses are not the API's: a 401 does not reach the
// client as a wrong token, and a status below 100 does not break the
// daemon's answer. Two impostors and the real agent take the session in
// turns; every answer names who gave it.
func TestImpostorAgent(t *testing.T) {
	d := testdaemon.Start(t) // its own: the session fight is not for others to see
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	ctx := t.Context()
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/impostor"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/workspace/impostor", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// One exec starts both: once an impostor holds the session, execs go
	// to it too. An impostor that takes the session before this exec's
	// answer is back cuts the answer off (the session it came on is
	// replaced), so the exec's own result does not count: the loop below
	// fails if no impostor ever answers.
	if _, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: `/workspace/impostor a '401 Unauthorized' unauthenticated >/tmp/a.log 2>&1 </dev/null &
/workspace/impostor b '099 Odd' not_found >/tmp/b.log 2>&1 </dev/null &`}); err != nil {
		t.Logf("starting the impostors: %v (an impostor took the session first)", err)
	}

	want := map[string]struct {
		status int
		code   string
	}{
		"impostor a": {502, "internal"},
		"impostor b": {404, "not_found"},
	}
	seen := map[string]bool{}
	for deadline := time.Now().Add(2 * time.Minute); len(seen) < len(want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("saw only %v of the impostors answer\n%s", seen, d.Logs())
		}
		_, err := d.C.ReadFile(ctx, sb.ID, "/workspace/missing", nil)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("read through an impostor: got %v, want an error document (a broken answer means the daemon failed on the impostor's status)", err)
		}
		if errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("an agent's answer reached the client as a wrong token: %v", err)
		}
		for who, w := range want {
			if !strings.Contains(apiErr.Message, who) {
				continue
			}
			seen[who] = true
			if apiErr.Status != w.status || apiErr.Code != w.code {
				t.Errorf("%s: got %d %q (%s), want %d %q", who, apiErr.Status, apiErr.Code, apiErr.Message, w.status, w.code)
			}
		}
	}
}
