package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// A box is put on a hotcell network by the driver, not by the engine: the
// box starts with no network (driver.NetworkNone) and Connect adds a veth
// pair, one end a port of the network's bridge in the host's namespace,
// the other eth0 in the box's, with an address the driver picks, and a
// default route via the gateway. On a user-defined network the engine
// gives every container it attaches an embedded DNS resolver at start (a
// re-exec of dockerd and eleven iptables processes in the box's namespace,
// each waiting on the host-wide xtables lock), which cost a box's start
// ~100 ms here (bench/README.md); hotcell's boxes use hotcell's own
// resolver and never needed it.
//
// The address is the reservation: the host end is named hcvXXXXXXXX, the
// address in hex, so two daemons (or two connects) cannot take one address
// (the kernel refuses the second name, cheaply: before it makes anything),
// and a daemon after a restart needs no record of them: it skips the
// names the kernel refuses. The pair goes with the
// box's network namespace when the box stops, is killed or the engine
// restarts, so nothing is left to clean up after a crash; the next start
// is networked again by the egress controller's Apply. The engine's own
// IPAM hands out addresses only in its ip range (the lowest sixteenth of
// the subnet on a network this driver made), which the driver never
// uses; on a network made before that, without a range, the addresses of
// the engine's endpoints are skipped and the driver counts down from the
// top of the subnet, away from where the engine counts up.
//
// The box cannot change its address or take another's: it has neither
// CAP_NET_ADMIN nor CAP_NET_RAW (Capabilities), as with the engine's veth.

// vethPrefix starts the name of the host end of a box's veth.
const vethPrefix = "hcv"

// boxIface is the name of the box's end.
const boxIface = "eth0"

// vethName is the host end's name for box address a.
func vethName(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%s%02x%02x%02x%02x", vethPrefix, b[0], b[1], b[2], b[3])
}

// boxNet is what the driver needs of a network to put boxes on it.
type boxNet struct {
	bridge  string
	subnet  netip.Prefix
	gateway netip.Addr
	// engine is the engine's ip range; invalid on a network without one,
	// whose endpoints are then skipped one by one.
	engine netip.Prefix

	mu   sync.Mutex
	next netip.Addr // the next address to try, counting down
}

// errNoVeth says the driver cannot network boxes itself here (the daemon
// does not see the bridge or the box's processes: it runs in another
// network or PID namespace than the engine); the engine attaches them.
var errNoVeth = errors.New("no veth networking here")

// network returns the cached facts of network name.
func (d *Driver) network(ctx context.Context, name string) (*boxNet, error) {
	d.netsMu.Lock()
	n := d.nets[name]
	d.netsMu.Unlock()
	if n != nil {
		return n, nil
	}
	res, err := d.c.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return nil, classify("inspect network "+name, err)
	}
	if res.Network.Driver != "bridge" || len(res.Network.IPAM.Config) != 1 {
		return nil, fmt.Errorf("network %s: not a bridge with one subnet: %w", name, errNoVeth)
	}
	c := res.Network.IPAM.Config[0]
	n = &boxNet{subnet: c.Subnet.Masked(), gateway: c.Gateway.Unmap(), engine: c.IPRange}
	if !n.subnet.Addr().Is4() {
		return nil, fmt.Errorf("network %s: subnet %s is not IPv4: %w", name, n.subnet, errNoVeth)
	}
	if !n.gateway.IsValid() {
		n.gateway = n.subnet.Addr().Next()
	}
	if n.bridge, err = d.NetworkBridge(ctx, name); err != nil {
		return nil, err
	}
	if _, err := netlink.LinkByName(n.bridge); err != nil {
		return nil, fmt.Errorf("network %s: bridge %s: %v: %w", name, n.bridge, err, errNoVeth)
	}
	d.netsMu.Lock()
	if d.nets == nil {
		d.nets = map[string]*boxNet{}
	}
	if had := d.nets[name]; had != nil {
		n = had
	} else {
		d.nets[name] = n
	}
	d.netsMu.Unlock()
	return n, nil
}

// forgetNetwork drops the cached facts of network name (removed or made
// anew: its bridge is another).
func (d *Driver) forgetNetwork(name string) {
	d.netsMu.Lock()
	delete(d.nets, name)
	d.netsMu.Unlock()
}

// engineRange is the ip range the engine's IPAM gets on a network this
// driver makes: the lowest sixteenth of the subnet (with the gateway), or
// none for a subnet too small to split.
func engineRange(subnet netip.Prefix) netip.Prefix {
	if subnet.Bits() > 26 {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(subnet.Masked().Addr(), subnet.Bits()+4)
}

// openBoxNetns opens the network namespace of the running box c. The pid
// is taken by a pidfd, checked to be a process in the box's cgroup (whose
// path names the container) and checked again to be alive after the
// namespace is open, so the namespace is the box's even if the pid were
// reused meanwhile. A box that is not running is errdefs.ErrConflict.
func openBoxNetns(c container.InspectResponse) (netns.NsHandle, error) {
	if c.State == nil || (!c.State.Running && !c.State.Paused) || c.State.Pid <= 0 {
		return netns.None(), fmt.Errorf("box %s is not running: %w", c.Name, errdefs.ErrConflict)
	}
	pid := c.State.Pid
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return netns.None(), fmt.Errorf("box %s is not running: %w", c.Name, errdefs.ErrConflict)
	}
	if err != nil {
		return netns.None(), fmt.Errorf("box %s: pidfd: %v: %w", c.Name, err, errNoVeth)
	}
	defer unix.Close(fd)
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err != nil || c.ID == "" || !strings.Contains(string(cg), c.ID) {
		return netns.None(), fmt.Errorf("box %s: pid %d is not in its cgroup: %w", c.Name, pid, errNoVeth)
	}
	ns, err := netns.GetFromPath(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return netns.None(), fmt.Errorf("box %s: open its network namespace: %w", c.Name, err)
	}
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		ns.Close()
		return netns.None(), fmt.Errorf("box %s stopped meanwhile: %w", c.Name, errdefs.ErrConflict)
	}
	return ns, nil
}

// boxAddr returns the box's address in subnet and the link that has it,
// seen through h (a handle in the box's namespace).
func boxAddr(h *netlink.Handle, subnet netip.Prefix) (netip.Addr, netlink.Link, error) {
	links, err := h.LinkList()
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("list the box's links: %w", err)
	}
	for _, l := range links {
		addrs, err := h.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return netip.Addr{}, nil, fmt.Errorf("list the box's addresses: %w", err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && subnet.Contains(ip) {
				return ip, l, nil
			}
		}
	}
	return netip.Addr{}, nil, nil
}

// vethAddress reports the address of the running box c on n; the zero
// Addr when it has none.
func vethAddress(c container.InspectResponse, n *boxNet) (netip.Addr, error) {
	ns, err := openBoxNetns(c)
	if errors.Is(err, errdefs.ErrConflict) {
		return netip.Addr{}, nil
	}
	if err != nil {
		return netip.Addr{}, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("box %s: netlink in its namespace: %w", c.Name, err)
	}
	defer h.Close()
	a, _, err := boxAddr(h, n.subnet)
	return a, err
}

// vethConnect puts the running box c on n (nothing if it is on it already).
// skip are addresses the engine gave (on a network without an ip range).
func vethConnect(c container.InspectResponse, n *boxNet, skip map[netip.Addr]bool) error {
	ns, err := openBoxNetns(c)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("box %s: netlink in its namespace: %w", c.Name, err)
	}
	defer h.Close()
	if a, _, err := boxAddr(h, n.subnet); err != nil || a.IsValid() {
		return err
	}
	// A veth without the address is one a connect left half made (the
	// daemon died in it): it goes, with its host end.
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("box %s: list its links: %w", c.Name, err)
	}
	for _, l := range links {
		if l.Type() == "veth" {
			if err := h.LinkDel(l); err != nil {
				return fmt.Errorf("box %s: remove a half-made link %s: %w", c.Name, l.Attrs().Name, err)
			}
		}
	}
	br, err := netlink.LinkByName(n.bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", n.bridge, err)
	}
	addr, err := n.allocate(br, ns, skip)
	if err != nil {
		return fmt.Errorf("box %s: %w", c.Name, err)
	}
	if err := configureBox(h, addr, n); err != nil {
		_ = netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: vethName(addr)}})
		return fmt.Errorf("box %s: %w", c.Name, err)
	}
	return nil
}

// allocate makes the veth pair of the next free address, its box end in
// ns, and returns the address. Free is what the kernel says: the host
// end's name is taken for an address in use.
func (n *boxNet) allocate(br netlink.Link, ns netns.NsHandle, skip map[netip.Addr]bool) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	last := lastAddr(n.subnet)
	if !n.next.IsValid() || !n.subnet.Contains(n.next) {
		n.next = last.Prev()
	}
	size := 1 << (32 - n.subnet.Bits())
	for range size {
		a := n.next
		if n.next = a.Prev(); !n.subnet.Contains(n.next) || n.next == n.subnet.Addr() {
			n.next = last.Prev()
		}
		if a == n.subnet.Addr() || a == last || a == n.gateway || skip[a] || (n.engine.IsValid() && n.engine.Contains(a)) {
			continue
		}
		err := netlink.LinkAdd(&netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{
				Name:        vethName(a),
				MasterIndex: br.Attrs().Index,
				MTU:         br.Attrs().MTU,
				Flags:       net.FlagUp,
			},
			PeerName:      boxIface,
			PeerNamespace: netlink.NsFd(ns),
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return netip.Addr{}, fmt.Errorf("make veth %s: %w", vethName(a), err)
		}
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("every address of the sandboxes' network (%s) is taken (each running sandbox holds one): stop or destroy sandboxes, or give the daemon a larger subnet with --egress-subnet (HOTCELL_EGRESS_SUBNET): %w", n.subnet, errdefs.ErrUnavailable)
}

// configureBox gives the box's end its address, brings it up and routes
// everything via the gateway.
func configureBox(h *netlink.Handle, addr netip.Addr, n *boxNet) error {
	l, err := h.LinkByName(boxIface)
	if err != nil {
		return fmt.Errorf("find %s: %w", boxIface, err)
	}
	ipn := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(n.subnet.Bits(), 32)}
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("bring %s up: %w", boxIface, err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: n.gateway.AsSlice()}); err != nil {
		return fmt.Errorf("default route via %s: %w", n.gateway, err)
	}
	return nil
}

// vethDisconnect takes the running box c off n: its veth goes.
func vethDisconnect(c container.InspectResponse, n *boxNet) error {
	ns, err := openBoxNetns(c)
	if errors.Is(err, errdefs.ErrConflict) {
		return nil // stopped: its veth went with its namespace
	}
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("box %s: netlink in its namespace: %w", c.Name, err)
	}
	defer h.Close()
	_, l, err := boxAddr(h, n.subnet)
	if err != nil || l == nil {
		return err
	}
	if err := h.LinkDel(l); err != nil {
		return fmt.Errorf("box %s: remove %s: %w", c.Name, l.Attrs().Name, err)
	}
	return nil
}

// lastAddr is the last (broadcast) address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
