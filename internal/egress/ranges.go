package egress

import (
	"net/netip"
	"slices"
)

// Open mode means the public internet, not everything the host can route
// to: these ranges are dropped in every mode, before any allowlist entry.

// MetadataAddrs are cloud instance metadata services outside link-local
// (which is dropped whole): Alibaba's 100.100.100.200, Azure's wire server
// 168.63.129.16, and the link-local 169.254.169.254 for clarity. AWS's
// IPv6 fd00:ec2::254 is unreachable as the egress network has no IPv6.
var MetadataAddrs = []netip.Prefix{
	netip.MustParsePrefix("169.254.169.254/32"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("168.63.129.16/32"),
}

// PrivateRanges are dropped unless the operator allows some of them
// (egress_allow_private): RFC 1918, shared address space (CGNAT,
// RFC 6598) and the benchmarking range (RFC 2544), where a host's LAN,
// databases and admin panels live.
var PrivateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("198.18.0.0/15"),
}

// multicastReserved is multicast (224/4), reserved (240/4) and the limited
// broadcast 255.255.255.255 in one prefix.
var multicastReserved = netip.MustParsePrefix("224.0.0.0/3")

var (
	linkLocalPrefix = netip.MustParsePrefix(linkLocal)
	loopback4       = netip.MustParsePrefix("127.0.0.0/8")
	thisNetwork     = netip.MustParsePrefix("0.0.0.0/8")
)

// subtract returns the parts of from that lie outside every prefix of
// cut, as a list of prefixes (IPv4 only).
func subtract(from, cut []netip.Prefix) []netip.Prefix {
	out := slices.Clone(from)
	for _, c := range cut {
		c = c.Masked()
		var next []netip.Prefix
		for _, p := range out {
			next = append(next, subtractOne(p, c)...)
		}
		out = next
	}
	return out
}

// subtractOne returns p without c.
func subtractOne(p, c netip.Prefix) []netip.Prefix {
	if !p.Overlaps(c) {
		return []netip.Prefix{p}
	}
	if c.Bits() <= p.Bits() {
		return nil // c covers p
	}
	// p holds c: split p in halves until the half holding c is c.
	var out []netip.Prefix
	for p.Bits() < c.Bits() {
		lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
		hi := netip.PrefixFrom(nextBlock(lo), p.Bits()+1)
		if lo.Contains(c.Addr()) {
			out = append(out, hi)
			p = lo
		} else {
			out = append(out, lo)
			p = hi
		}
	}
	return out
}

// nextBlock is the first address after prefix p.
func nextBlock(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += 1 << (32 - p.Bits())
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// blockedPrivate are the private ranges still blocked once the operator's
// allowed networks are taken out.
func blockedPrivate(allow []netip.Prefix) []netip.Prefix {
	return subtract(PrivateRanges, allow)
}

// blockedAddr says whether the firewall drops traffic from a sandbox to a
// in every mode (the host's own public addresses aside, which the rules
// find by address type). The resolver does not learn such answers.
func (f *firewall) blockedAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() {
		return true // the network has no IPv6
	}
	for _, p := range []netip.Prefix{multicastReserved, linkLocalPrefix, loopback4, thisNetwork, f.subnet} {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range MetadataAddrs {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range f.private {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// BlockedRanges are the IPv4 ranges refused in every mode, whatever the
// rules of a sandbox (the host's own addresses aside, which only the host
// knows): multicast and reserved, link-local, this network, loopback, the
// metadata services and the private ranges less allowPrivate. A
// Kubernetes NetworkPolicy expresses them as an ipBlock's except.
func BlockedRanges(allowPrivate []netip.Prefix) []netip.Prefix {
	out := []netip.Prefix{thisNetwork, loopback4, linkLocalPrefix, multicastReserved}
	for _, m := range MetadataAddrs {
		if !linkLocalPrefix.Contains(m.Addr()) {
			out = append(out, m)
		}
	}
	return append(out, blockedPrivate(allowPrivate)...)
}
