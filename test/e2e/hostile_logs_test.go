package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// TestHostileLogsNoEnvValues: a secret handed to a sandbox as an
// environment variable of an interactive exec (which carries it in the
// WebSocket URL's query, env=NAME=value) or inside a setup command never
// reaches the daemon's log, at debug level, while the log does record
// those requests and commands.
func TestHostileLogsNoEnvValues(t *testing.T) {
	const secret = "hunter2-xyz"
	d := testdaemon.Start(t) // logs at debug level
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{
		Env: map[string]string{"CREATE_SECRET": secret},
		// The first fails, so that the daemon logs it at info level.
		Setup: []string{"TOKEN=" + secret + " sh -c 'exit 3' " + secret, "echo never"},
	})
	if len(sb.Setup) != 1 || sb.Setup[0].ExitCode != 3 {
		t.Fatalf("setup results: got %+v, want one that exited 3", sb.Setup)
	}

	term, err := d.C.OpenTerminal(t.Context(), sb.ID, client.TerminalOptions{
		Argv: []string{"sh", "-c", `echo "got:$SECRET"`},
		Env:  map[string]string{"SECRET": secret},
	})
	if err != nil {
		t.Fatalf("open terminal: %v", err)
	}
	defer term.Close()
	out := collect(term)
	out.await(t, "got:"+secret) // the value did reach the process
	wantExit(t, term, 0, "")
	<-out.done

	// The request log line is written when the handler returns, which
	// may be just after the client saw the exit.
	// The whole log, not the tail Logs keeps: a secret anywhere must fail.
	logs := d.LogsSince(0)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs, "env=SECRET") && time.Now().Before(deadline); logs = d.LogsSince(0) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"env=SECRET", "setup[0] (sh, "} {
		if !strings.Contains(logs, want) {
			t.Errorf("daemon log does not record %q: the check below would prove nothing\n%s", want, logs)
		}
	}
	if strings.Contains(logs, secret) {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("daemon log holds the secret: %s", line)
			}
		}
	}
}
