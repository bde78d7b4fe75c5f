package main

import (
	"strings"
	"testing"
)

// TestEgressNodeBadFlags: egress-node refuses bad settings before it
// touches the cluster or the firewall, naming the flag.
func TestEgressNodeBadFlags(t *testing.T) {
	base := []string{"egress-node", "--node", "n1", "--resolver", "10.244.0.1", "--pod-range", "10.244.0.0/16", "--upstream", "127.0.0.1"}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"egress-node", "--resolver", "10.244.0.1", "--pod-range", "10.244.0.0/16"}, "--node"},
		{append(append([]string{}, base...), "--resolver", "fe80::1"), "--resolver"},
		{append(append([]string{}, base...), "--pod-range", "cni0"), "--pod-range"},
		{append(append([]string{}, base...), "--allow", "10.0.0.1"), "--allow"},
		{append(append([]string{}, base...), "--allow-private", "10.1.0.0"), "--allow-private"},
		{append(append([]string{}, base...), "--upstream", "dns.example:53"), "--upstream"},
		{append(append([]string{}, base...), "--metrics-listen", "9469"), "--metrics-listen"},
		{[]string{"egress-node", "--node", "n1", "--pod-range", "10.244.0.0", "--teardown"}, "--pod-range"},
	} {
		res := runCLI(t, nil, tt.args...)
		if res.code != 2 || !strings.Contains(res.stderr, tt.want) {
			t.Errorf("%v: got %+v, want exit 2 and %q", tt.args, res, tt.want)
		}
	}
}
