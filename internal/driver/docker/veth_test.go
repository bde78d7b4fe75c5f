package docker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/vishvananda/netlink"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

// vethNetwork makes a hotcell network on a free /24 of 10.216.0.0/16 and
// removes it when the test ends.
func vethNetwork(t *testing.T, d *docker.Driver) (string, netip.Prefix, netip.Addr) {
	t.Helper()
	used := map[netip.Prefix]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			used[netip.PrefixFrom(p.Addr(), 24).Masked()] = true
		}
	}
	name := "hc-t-" + randomID(t)
	for range 50 {
		var b [1]byte
		_, _ = rand.Read(b[:])
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 216, b[0], 0}), 24)
		if used[subnet] {
			continue
		}
		gw, err := d.EnsureNetwork(t.Context(), name, subnet)
		if err != nil {
			t.Logf("network on %s: %v (trying another)", subnet, err)
			continue
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := d.RemoveNetwork(ctx, name); err != nil {
				t.Errorf("remove network %s: %v", name, err)
			}
		})
		return name, subnet, gw
	}
	t.Fatal("no free /24 in 10.216.0.0/16")
	return "", netip.Prefix{}, netip.Addr{}
}

// vethBox creates and starts a box with no network, as the egress
// controller does.
func vethBox(t *testing.T, d *docker.Driver, c *client.Client) string {
	t.Helper()
	spec := newSpec(t, c)
	spec.Network = driver.NetworkNone
	if err := d.Create(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context(), spec.ID); err != nil {
		t.Fatal(err)
	}
	return spec.ID
}

// hostVeth returns the host end named for address a, or nil.
func hostVeth(t *testing.T, a netip.Addr) netlink.Link {
	t.Helper()
	b := a.As4()
	l, err := netlink.LinkByName(fmt.Sprintf("hcv%02x%02x%02x%02x", b[0], b[1], b[2], b[3]))
	if err != nil {
		return nil
	}
	return l
}

// TestVethNetwork: a box started with no network is put on a hotcell
// network by the driver's own veth: an address of the driver's range (never
// the engine's), IPv6 off, the gateway reachable over TCP, the host end a
// port of the network's bridge. Connect is idempotent, two boxes get two
// addresses, Disconnect and Stop leave no veth on the host, and a box
// started again is networked again by Connect.
func TestVethNetwork(t *testing.T) {
	testenv.RequireRoot(t, "veths and network namespaces")
	d, c := newDriver(t)
	ctx := t.Context()
	netName, subnet, gw := vethNetwork(t, d)
	bridge, err := d.NetworkBridge(ctx, netName)
	if err != nil {
		t.Fatal(err)
	}
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Fatalf("bridge %s: %v", bridge, err)
	}
	engine := netip.PrefixFrom(subnet.Addr(), 28)

	ln, err := net.Listen("tcp4", netip.AddrPortFrom(gw, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("gateway answers\n"))
			conn.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	a := vethBox(t, d, c)
	if addr, err := d.BoxAddress(ctx, a, netName); err != nil || addr.IsValid() {
		t.Fatalf("address before connect: %v, %v; want none", addr, err)
	}
	for range 2 { // idempotent
		if err := d.Connect(ctx, a, netName); err != nil {
			t.Fatalf("connect: %v", err)
		}
	}
	addrA, err := d.BoxAddress(ctx, a, netName)
	if err != nil || !subnet.Contains(addrA) || engine.Contains(addrA) || addrA == gw {
		t.Fatalf("address of a: %v, %v; want one of %s outside the engine's %s", addrA, err, subnet, engine)
	}
	hv := hostVeth(t, addrA)
	if hv == nil || hv.Attrs().MasterIndex != br.Attrs().Index {
		t.Fatalf("host end of %s: %v; want a port of %s", addrA, hv, bridge)
	}
	out, code := dockerExec(t, c, a, "sh", "-c", "ip -4 addr show eth0; cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6; ip route")
	if code != 0 || !strings.Contains(out, addrA.String()+"/24") || !strings.Contains(out, "\n1\n") || !strings.Contains(out, "default via "+gw.String()) {
		t.Fatalf("the box's view (exit %d):\n%s\nwant %s/24 on eth0, IPv6 off, default via %s", code, out, addrA, gw)
	}
	out, code = dockerExec(t, c, a, "sh", "-c", fmt.Sprintf("nc %s %d </dev/null", gw, port))
	if code != 0 || !strings.Contains(out, "gateway answers") {
		t.Fatalf("the gateway from the box (exit %d): %q", code, out)
	}

	b := vethBox(t, d, c)
	if err := d.Connect(ctx, b, netName); err != nil {
		t.Fatal(err)
	}
	addrB, err := d.BoxAddress(ctx, b, netName)
	if err != nil || !subnet.Contains(addrB) || addrB == addrA {
		t.Fatalf("address of b: %v, %v; want another than a's %s", addrB, err, addrA)
	}

	if err := d.Disconnect(ctx, a, netName); err != nil {
		t.Fatal(err)
	}
	if addr, err := d.BoxAddress(ctx, a, netName); err != nil || addr.IsValid() {
		t.Fatalf("address after disconnect: %v, %v; want none", addr, err)
	}
	if hostVeth(t, addrA) != nil {
		t.Fatalf("host end of %s still there after disconnect", addrA)
	}
	if err := d.Disconnect(ctx, a, netName); err != nil {
		t.Fatalf("second disconnect: %v", err)
	}

	if err := d.Stop(ctx, b, time.Second); err != nil {
		t.Fatal(err)
	}
	// The kernel destroys a namespace, and its veths, after its last user
	// is gone, in the background.
	for deadline := time.Now().Add(10 * time.Second); hostVeth(t, addrB) != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("host end of %s still there 10 s after the box stopped", addrB)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if addr, err := d.BoxAddress(ctx, b, netName); err != nil || addr.IsValid() {
		t.Fatalf("address of a stopped box: %v, %v; want none", addr, err)
	}
	if err := d.Start(ctx, b); err != nil {
		t.Fatal(err)
	}
	if addr, err := d.BoxAddress(ctx, b, netName); err != nil || addr.IsValid() {
		t.Fatalf("address after a start, before connect: %v, %v; want none", addr, err)
	}
	if err := d.Connect(ctx, b, netName); err != nil {
		t.Fatal(err)
	}
	if addr, err := d.BoxAddress(ctx, b, netName); err != nil || !subnet.Contains(addr) || hostVeth(t, addr) == nil {
		t.Fatalf("address after a start and connect: %v, %v", addr, err)
	}
}

// TestHostileVethAddress: root in a box (with the box's capabilities)
// cannot change its address, take a neighbour's, add one, move its link
// down or change its route: the firewall keys a box's rules on its address.
func TestHostileVethAddress(t *testing.T) {
	testenv.RequireRoot(t, "veths and network namespaces")
	d, c := newDriver(t)
	ctx := t.Context()
	netName, _, gw := vethNetwork(t, d)
	a, b := vethBox(t, d, c), vethBox(t, d, c)
	for _, id := range []string{a, b} {
		if err := d.Connect(ctx, id, netName); err != nil {
			t.Fatal(err)
		}
	}
	addrA, _ := d.BoxAddress(ctx, a, netName)
	addrB, _ := d.BoxAddress(ctx, b, netName)
	for _, cmd := range []string{
		"ip addr add " + addrB.String() + "/24 dev eth0",
		"ip addr del " + addrA.String() + "/24 dev eth0",
		"ip addr add 10.216.255.77/32 dev lo",
		"ip link set eth0 down",
		"ip link set eth0 address 02:00:00:00:00:01",
		"ip route replace default via " + gw.Next().String(),
		"ip link add dummy0 type dummy",
	} {
		out, code := dockerExec(t, c, a, "sh", "-c", cmd+" 2>&1")
		if code == 0 {
			t.Errorf("%q in the box succeeded: %s", cmd, out)
		}
	}
	if addr, err := d.BoxAddress(ctx, a, netName); err != nil || addr != addrA {
		t.Fatalf("a's address after the attempts: %v, %v; want %s", addr, err, addrA)
	}
	out, _ := dockerExec(t, c, a, "sh", "-c", "ip -4 addr; ip route")
	if strings.Contains(out, addrB.String()) || !strings.Contains(out, "default via "+gw.String()) {
		t.Fatalf("a's network after the attempts:\n%s", out)
	}
}

// TestVethNetworkFromBefore: on a network an earlier hotcell made (no ip
// range for the engine), a box the engine attached keeps its endpoint and
// address (BoxAddress reports it, Connect leaves it, Disconnect is the
// engine's), and the driver never hands out an address of the engine's
// endpoints, here the top one, where the driver starts counting.
func TestVethNetworkFromBefore(t *testing.T) {
	testenv.RequireRoot(t, "veths and network namespaces")
	d, c := newDriver(t)
	ctx := t.Context()
	name, subnet, gw := vethNetwork(t, d)
	// Made again as an earlier hotcell made it: without the engine's range.
	if err := d.RemoveNetwork(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver:  "bridge",
		IPAM:    &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet, Gateway: gw}}},
		Options: map[string]string{"com.docker.network.bridge.enable_icc": "false"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnsureNetwork(ctx, name, subnet); err != nil {
		t.Fatalf("a network from before is refused: %v", err)
	}
	top := netip.MustParseAddr(strings.TrimSuffix(subnet.Addr().String(), ".0") + ".254")

	old := vethBox(t, d, c)
	if err := d.Disconnect(ctx, old, driver.NetworkNone); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NetworkConnect(ctx, name, client.NetworkConnectOptions{
		Container:      docker.ContainerName(old),
		EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: top}},
	}); err != nil {
		t.Fatal(err)
	}
	if a, err := d.BoxAddress(ctx, old, name); err != nil || a != top {
		t.Fatalf("the engine-attached box's address: %v, %v; want %s", a, err, top)
	}
	if err := d.Connect(ctx, old, name); err != nil {
		t.Fatal(err)
	}
	if hostVeth(t, top) != nil {
		t.Fatalf("Connect gave the engine-attached box a veth of its own")
	}

	fresh := vethBox(t, d, c)
	if err := d.Connect(ctx, fresh, name); err != nil {
		t.Fatal(err)
	}
	if a, err := d.BoxAddress(ctx, fresh, name); err != nil || !subnet.Contains(a) || a == top {
		t.Fatalf("the new box's address: %v, %v; want one of %s other than the engine's %s", a, err, subnet, top)
	}

	if err := d.Disconnect(ctx, old, name); err != nil {
		t.Fatal(err)
	}
	if a, err := d.BoxAddress(ctx, old, name); err != nil || a.IsValid() {
		t.Fatalf("after disconnect: %v, %v; want no address", a, err)
	}
}
