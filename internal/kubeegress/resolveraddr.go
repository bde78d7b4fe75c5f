package kubeegress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ResolverLabel labels the link-local resolver address egress-node puts
// on the node's loopback interface when the node lacks it: one address
// for every node of a cluster whose nodes' gateways on the pod network
// differ, as NodeLocal DNSCache does with 169.254.20.10. A pod's packets
// to it follow its default route to its own node and are delivered
// there, as to any of the node's addresses. Loopback rather than a dummy
// interface: every kernel has it (these hosts' has no dummy driver), and
// it is always up. The label is how a teardown tells hotcell's address
// from the node's own.
const ResolverLabel = "lo:hotcell-dns"

// EnsureResolverAddr makes sure the node has addr, where the resolver
// listens. An address one of its interfaces already has (the node's own on
// the pod network, or one a previous run put on loopback) is used as it
// is. A link-local one (169.254.0.0/16) that it lacks is put on loopback,
// labelled ResolverLabel, and it reports that it added it. Any other
// address is an error: taking it would take another host's address
// (another node's gateway, say) away from this node's traffic.
func EnsureResolverAddr(addr netip.Addr) (added bool, err error) {
	if !addr.Is4() {
		return false, fmt.Errorf("resolver address %s is not an IPv4 address", addr)
	}
	has, err := nodeHas(addr)
	if err != nil || has {
		return false, err
	}
	if !addr.IsLinkLocalUnicast() {
		return false, fmt.Errorf("resolver address %s is not an address of this node: give the node's own address on the pod network, or a link-local address (169.254.0.0/16) the same on every node, which egress-node puts on the node's loopback", addr)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return false, fmt.Errorf("the node's loopback interface: %w", err)
	}
	// Link scope: the address answers what comes to the node for it, and
	// is never the source of the node's own packets elsewhere.
	a := &netlink.Addr{IPNet: hostNet(addr), Label: ResolverLabel, Scope: int(netlink.SCOPE_LINK)}
	if err := netlink.AddrAdd(lo, a); err != nil && !errors.Is(err, unix.EEXIST) {
		return false, fmt.Errorf("put resolver address %s on the node's loopback: %w", addr, err)
	}
	return true, nil
}

// RemoveResolverAddr takes addr off the node's loopback if egress-node put
// it there (labelled ResolverLabel); otherwise it does nothing.
func RemoveResolverAddr(addr netip.Addr) error {
	return removeResolverAddrs(func(a netip.Addr) bool { return a == addr })
}

// RemoveResolverAddrs takes every address egress-node put on the node's
// loopback off it (an uninstall).
func RemoveResolverAddrs() error {
	return removeResolverAddrs(func(netip.Addr) bool { return true })
}

func removeResolverAddrs(match func(netip.Addr) bool) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("the node's loopback interface: %w", err)
	}
	as, err := netlink.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list the node's loopback addresses: %w", err)
	}
	for _, a := range as {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Label != ResolverLabel || !match(ip.Unmap()) {
			continue
		}
		if err := netlink.AddrDel(lo, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("take resolver address %s off the node's loopback: %w", ip, err)
		}
	}
	return nil
}

func hostNet(addr netip.Addr) *net.IPNet {
	return &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

// nodeHas reports whether one of the node's interfaces has addr.
func nodeHas(addr netip.Addr) (bool, error) {
	as, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return false, fmt.Errorf("list the node's addresses: %w", err)
	}
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			return true, nil
		}
	}
	return false, nil
}
