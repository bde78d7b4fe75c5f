package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEgressSettings(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	c, err := Load(flags(t, "--agent-binary", agent, "--egress-subnet", "10.99.1.7/24",
		"--egress-dns-upstream", "127.0.0.1:5353, 192.0.2.53", "--egress-default-mode", "ALLOWLIST"), envMap(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	got := c.Egress()
	if got.Subnet.String() != "10.99.1.0/24" || got.DefaultMode != "allowlist" || got.GatewayPort != 8090 || got.Network != "hotcell-egress" {
		t.Errorf("got %+v", got)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:5353", "192.0.2.53:53"}, got.Upstreams); diff != "" {
		t.Errorf("upstreams (-want +got):\n%s", diff)
	}
}

func TestEgressAllowPrivate(t *testing.T) {
	t.Parallel()
	c, err := Load(flags(t, "--agent-binary", fakeAgent(t), "--egress-allow-private", "10.1.2.3/16, 192.168.7.7"), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Egress().AllowPrivate
	if len(got) != 2 || got[0].String() != "10.1.0.0/16" || got[1].String() != "192.168.7.7/32" {
		t.Errorf("got %v, want [10.1.0.0/16 192.168.7.7/32]", got)
	}
}

func TestEgressBad(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	for _, tc := range []struct{ flag, value string }{
		{"--egress-subnet", "10.0.0.0"},
		{"--egress-subnet", "fd00::/64"},
		{"--egress-subnet", "10.0.0.0/30"},
		{"--egress-default-mode", "closed"},
		{"--egress-gateway-port", "70000"},
		{"--egress-dns-upstream", "dns.example:53"},
		{"--egress-network", "a/b"},
		{"--egress-allow-private", "10.1.0.0/40"},
		{"--egress-allow-private", "fd00::/8"},
	} {
		_, err := Load(flags(t, "--agent-binary", agent, tc.flag, tc.value), envMap(nil))
		key := strings.ReplaceAll(strings.TrimPrefix(tc.flag, "--"), "-", "_")
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s %s: got %v, want an error naming %s", tc.flag, tc.value, err, key)
		}
	}
}

func TestHostResolvers(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# c\nnameserver 192.0.2.1\nsearch x\nnameserver fe80::1%eth0\nnameserver bad\n"), 0o644)
	got, err := hostResolvers(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"192.0.2.1:53", "[fe80::1]:53"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
