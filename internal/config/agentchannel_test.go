package config

import (
	"slices"
	"strings"
	"testing"
)

// TestAgentAdvertiseList: agent_advertise takes the listeners of every
// daemon of a set, separated by commas (spaces around them dropped), in
// the order agents try them; a bad entry or a repeated one is an error
// naming agent_advertise and the entry.
func TestAgentAdvertiseList(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	for _, tc := range []struct {
		value string
		want  []string
	}{
		{"10.0.0.1:8091", []string{"10.0.0.1:8091"}},
		{"10.0.0.1:8091, 10.0.0.2:8091", []string{"10.0.0.1:8091", "10.0.0.2:8091"}},
		{"hotcell-agents.hotcell.svc:8091", []string{"hotcell-agents.hotcell.svc:8091"}},
		{"[fd00::1]:8091,daemon-b:9000", []string{"[fd00::1]:8091", "daemon-b:9000"}},
	} {
		c, err := Load(flags(t, "--agent-binary", agent, "--agent-channel", "tcp", "--agent-advertise", tc.value), envMap(nil))
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		if got := c.AgentAdvertiseAddrs(); !slices.Equal(got, tc.want) {
			t.Errorf("%q: addresses %q, want %q", tc.value, got, tc.want)
		}
	}
	c, err := Load(flags(t, "--agent-binary", agent), envMap(nil))
	if err != nil || c.AgentAdvertiseAddrs() != nil {
		t.Errorf("unset: addresses %q (%v), want none", c.AgentAdvertiseAddrs(), err)
	}

	for _, tc := range []struct{ value, want string }{
		{"10.0.0.1:8091,", `"" is not`},
		{"10.0.0.1:8091,10.0.0.2", `"10.0.0.2" is not`},
		{"10.0.0.1:8091,:8091", `":8091" is not`},
		{"10.0.0.1:0", `"10.0.0.1:0" is not`},
		{"10.0.0.1:8091, 10.0.0.1:8091", "twice"},
	} {
		_, err := Load(flags(t, "--agent-binary", agent, "--agent-advertise", tc.value), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), "agent_advertise ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error naming agent_advertise and saying %s", tc.value, err, tc.want)
		}
	}
}
