package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps daemon-only dependencies out of the agent, which runs in
// every sandbox and must stay small and static.
func TestDeps(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	banned := []string{
		"github.com/moby", "modernc.org/sqlite", "github.com/docker", "github.com/spf13/cobra",
		"github.com/coreos/go-iptables", "github.com/google/nftables", "github.com/miekg/dns", "github.com/prometheus",
		"k8s.io/",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("hotcell-agent depends on %s", dep)
			}
		}
	}
}
