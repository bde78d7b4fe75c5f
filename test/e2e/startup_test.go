package e2e

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestSecondDaemonOnTakenEgressNetwork: a daemon started on the egress
// network (and so the DNS address) another daemon serves fails at start
// with an error that says so and names the flags that give it a network of
// its own. The first daemon's rules stay as they were and it goes on.
func TestSecondDaemonOnTakenEgressNetwork(t *testing.T) {
	testenv.RequireRoot(t, "the test reads the firewall rules with iptables-save")
	first := testdaemon.Start(t)
	t.Cleanup(first.Close)
	sb := newSandbox(t, first, client.CreateSandboxRequest{})
	before := rules(t, first.EgressNetwork, first.EgressSubnet)

	exitErr, log := testdaemon.StartFailing(t, testdaemon.Options{ShareEgressOf: first})
	if exitErr == nil {
		t.Fatalf("a second daemon on %s started:\n%s", first.EgressNetwork, log)
	}
	for _, want := range []string{"egress network " + first.EgressNetwork, "is in use", "another hotcell daemon", "--egress-network", "--egress-subnet"} {
		if !strings.Contains(log, want) {
			t.Errorf("the second daemon's error does not say %q:\n%s", want, log)
		}
	}
	if diff := cmp.Diff(before, rules(t, first.EgressNetwork, first.EgressSubnet)); diff != "" {
		t.Errorf("the failed start changed the first daemon's rules (-before +after):\n%s", diff)
	}
	mustOK(t, run(t, first, sb.ID, "echo ok"), "exec on the first daemon")
	if _, err := first.C.GetSandbox(t.Context(), sb.ID); err != nil {
		t.Errorf("the first daemon after the second's failed start: %v", err)
	}
}
