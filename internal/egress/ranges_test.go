package egress

import (
	"net/netip"
	"slices"
	"testing"
)

func TestSubtract(t *testing.T) {
	t.Parallel()
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		from, cut, want []netip.Prefix
	}{
		{"nothing cut", pfx("10.0.0.0/8"), nil, pfx("10.0.0.0/8")},
		{"disjoint", pfx("10.0.0.0/8"), pfx("192.168.0.0/16"), pfx("10.0.0.0/8")},
		{"whole", pfx("10.0.0.0/8", "172.16.0.0/12"), pfx("10.0.0.0/7"), pfx("172.16.0.0/12")},
		{"a /10 out of a /8", pfx("10.0.0.0/8"), pfx("10.64.0.0/10"), pfx("10.128.0.0/9", "10.0.0.0/10")},
		{"an address", pfx("192.168.0.0/30"), pfx("192.168.0.2/32"), pfx("192.168.0.0/31", "192.168.0.3/32")},
		{"unmasked cut", pfx("10.0.0.0/8"), pfx("10.1.2.3/9"), pfx("10.128.0.0/9")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := subtract(tc.from, tc.cut)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBlockedAddr(t *testing.T) {
	t.Parallel()
	f := newFirewall(nil, nil, "n", netip.MustParsePrefix("10.214.5.0/24"), netip.MustParseAddr("10.214.5.1"), nil,
		[]netip.Prefix{netip.MustParsePrefix("10.50.0.0/16"), netip.MustParsePrefix("100.64.0.0/10")})
	for addr, want := range map[string]bool{
		"203.0.113.7":     false,
		"8.8.8.8":         false,
		"10.1.2.3":        true,
		"10.50.1.1":       false, // allowed by the operator
		"172.20.0.1":      true,
		"192.168.1.1":     true,
		"198.19.255.1":    true,
		"100.100.100.200": true, // metadata wins over the allowed 100.64/10
		"100.65.0.1":      false,
		"168.63.129.16":   true,
		"169.254.169.254": true,
		"169.254.1.1":     true,
		"127.0.0.1":       true,
		"0.0.0.0":         true,
		"255.255.255.255": true,
		"224.0.0.251":     true,
		"10.214.5.9":      true, // another sandbox
		"2001:db8::1":     true, // no IPv6
	} {
		if got := f.blockedAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("blockedAddr(%s): got %v, want %v", addr, got, want)
		}
	}
}
