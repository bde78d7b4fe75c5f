package docker

import (
	"net/netip"
	"testing"
)

func TestVethName(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"10.214.3.254", "0.0.0.0", "255.255.255.255", "10.0.0.10"} {
		a := netip.MustParseAddr(s)
		name := vethName(a)
		if len(name) > 15 {
			t.Errorf("%s: name %q is longer than an interface name can be", s, name)
		}
		if got, ok := vethAddr(name); !ok || got != a {
			t.Errorf("vethAddr(%q) = %v, %v; want %s", name, got, ok, a)
		}
	}
	for _, name := range []string{"eth0", "hc0a0b0c", "hc0a0b0c0d0", "hc0A0B0C0D", "hcxx0b0c0d", "veth0a0b0c0d"} {
		if a, ok := vethAddr(name); ok {
			t.Errorf("vethAddr(%q) = %v; want no address", name, a)
		}
	}
}

func TestEngineRange(t *testing.T) {
	t.Parallel()
	for subnet, want := range map[string]string{
		"10.214.3.0/24": "10.214.3.0/28",
		"172.30.0.0/16": "172.30.0.0/20",
		"10.215.8.0/21": "10.215.8.0/25",
		"10.0.0.0/27":   "",
	} {
		got := engineRange(netip.MustParsePrefix(subnet))
		if (want == "" && got.IsValid()) || (want != "" && got != netip.MustParsePrefix(want)) {
			t.Errorf("engineRange(%s) = %v; want %q", subnet, got, want)
		}
	}
	if got := lastAddr(netip.MustParsePrefix("10.215.8.0/21")); got != netip.MustParseAddr("10.215.15.255") {
		t.Errorf("lastAddr = %v", got)
	}
}
