package docker

import (
	"net/netip"
	"testing"
)

func TestVethName(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]string{
		"10.214.3.254":    "hcv0ad603fe",
		"0.0.0.0":         "hcv00000000",
		"255.255.255.255": "hcvffffffff",
	} {
		// An interface name has at most 15 bytes.
		if got := vethName(netip.MustParseAddr(s)); got != want || len(got) > 15 {
			t.Errorf("vethName(%s) = %q; want %q", s, got, want)
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
