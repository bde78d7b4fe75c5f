package docker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

var _ driver.Networker = (*Driver)(nil)

// EnsureNetwork creates the bridge network name with subnet and its first
// address as gateway, or finds it. Inter-container traffic on it is off
// (enable_icc=false) so boxes cannot talk to each other even before the
// egress rules are in place. IPv6 is explicitly off: the egress firewall
// is IPv4, and an engine whose default turns IPv6 on must not give boxes a
// way around it. The engine's IPAM gets the lowest sixteenth of the subnet
// (engineRange): the rest is the driver's, for the boxes it networks
// itself (veth.go). An existing network with another subnet, IPv6 on,
// inter-container traffic on or another driver is a conflict naming it,
// never reused as it is: the firewall rules are keyed on the subnet.
func (d *Driver) EnsureNetwork(ctx context.Context, name string, subnet netip.Prefix) (netip.Addr, error) {
	gw := subnet.Masked().Addr().Next()
	d.forgetNetwork(name)
	res, err := d.c.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		off := false
		_, err = d.c.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver:     "bridge",
			EnableIPv6: &off,
			IPAM: &network.IPAM{Config: []network.IPAMConfig{{
				Subnet:  subnet.Masked(),
				IPRange: engineRange(subnet),
				Gateway: gw,
			}}},
			Options: map[string]string{
				"com.docker.network.bridge.enable_icc": "false",
			},
			Labels: map[string]string{driver.LabelManaged: "true"},
		})
		if err != nil && !cerrdefs.IsConflict(err) && !cerrdefs.IsAlreadyExists(err) {
			return netip.Addr{}, classify("create network "+name, err)
		}
		// Made now, or by another daemon meanwhile: check it as found.
		res, err = d.c.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	}
	if err != nil {
		return netip.Addr{}, classify("inspect network "+name, err)
	}
	n := res.Network
	switch {
	case n.EnableIPv6:
		return netip.Addr{}, fmt.Errorf("network %s has IPv6 enabled, which would let boxes around the IPv4 egress firewall; remove it (docker network rm %s) or configure another egress_network: %w", name, name, errdefs.ErrConflict)
	case n.Driver != "bridge":
		return netip.Addr{}, fmt.Errorf("network %s has driver %s, not bridge; remove it or configure another egress_network: %w", name, n.Driver, errdefs.ErrConflict)
	case n.Options["com.docker.network.bridge.enable_icc"] != "false":
		return netip.Addr{}, fmt.Errorf("network %s lets containers talk to each other (enable_icc is not false); remove it or configure another egress_network: %w", name, errdefs.ErrConflict)
	}
	for _, c := range res.Network.IPAM.Config {
		if c.Subnet.Masked() != subnet.Masked() {
			continue
		}
		if c.Gateway.IsValid() {
			return c.Gateway, nil
		}
		return gw, nil // the engine's default gateway is the first address
	}
	return netip.Addr{}, fmt.Errorf("network %s exists without subnet %s; remove it or configure its subnet: %w", name, subnet, errdefs.ErrConflict)
}

// NetworkBridge returns the host interface of the bridge network name.
func (d *Driver) NetworkBridge(ctx context.Context, name string) (string, error) {
	res, err := d.c.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return "", classify("inspect network "+name, err)
	}
	if b := res.Network.Options["com.docker.network.bridge.name"]; b != "" {
		return b, nil
	}
	if len(res.Network.ID) < 12 {
		return "", fmt.Errorf("network %s: engine gave no id", name)
	}
	return "br-" + res.Network.ID[:12], nil
}

// RemoveNetwork removes the network; a missing one is not an error.
func (d *Driver) RemoveNetwork(ctx context.Context, name string) error {
	defer d.forgetNetwork(name)
	_, err := d.c.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify("remove network "+name, err)
	}
	return nil
}

// Connect puts the box on network: a veth of the driver's (veth.go) for a
// box made with driver.NetworkNone, which is how the egress controller
// makes them, and nothing for a box the engine attached already (one made
// on the network by an earlier hotcell). Where the driver cannot see the
// bridge or the box's processes (errNoVeth) the engine attaches it, and a
// box made with driver.NetworkNone must leave "none" first: the engine
// refuses a second network beside it.
func (d *Driver) Connect(ctx context.Context, id, net string) error {
	if err := checkID(id); err != nil {
		return err
	}
	res, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		return classify("inspect container "+ContainerName(id), err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if _, ok := ns.Networks[net]; ok {
			return nil
		}
	}
	err = d.vethConnect(ctx, res.Container, net)
	if !errors.Is(err, errNoVeth) {
		return err
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if _, ok := ns.Networks[driver.NetworkNone]; ok {
			if err := d.Disconnect(ctx, id, driver.NetworkNone); err != nil {
				return err
			}
		}
	}
	_, err = d.c.NetworkConnect(ctx, net, client.NetworkConnectOptions{
		Container:      ContainerName(id),
		EndpointConfig: &network.EndpointSettings{},
	})
	return classify(fmt.Sprintf("connect container %s to network %s", ContainerName(id), net), err)
}

// vethConnect puts the running box c on net with a veth of the driver's.
func (d *Driver) vethConnect(ctx context.Context, c container.InspectResponse, net string) error {
	n, err := d.network(ctx, net)
	if err != nil {
		return err
	}
	var skip map[netip.Addr]bool
	if !n.engine.IsValid() {
		// A network from before the engine had a range of its own: its
		// endpoints' addresses are the engine's.
		res, err := d.c.NetworkInspect(ctx, net, client.NetworkInspectOptions{})
		if err != nil {
			return classify("inspect network "+net, err)
		}
		skip = map[netip.Addr]bool{}
		for _, e := range res.Network.Containers {
			skip[e.IPv4Address.Addr().Unmap()] = true
		}
	}
	if err := vethConnect(c, n, skip); err != nil {
		return fmt.Errorf("connect container %s to network %s: %w", strings.TrimPrefix(c.Name, "/"), net, err)
	}
	return nil
}

// Disconnect detaches the box from network. A box that is not attached, or
// does not exist, is not an error.
func (d *Driver) Disconnect(ctx context.Context, id, net string) error {
	if err := checkID(id); err != nil {
		return err
	}
	res, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return classify("inspect container "+ContainerName(id), err)
	}
	if ns := res.Container.NetworkSettings; ns == nil || ns.Networks[net] == nil {
		if net == driver.NetworkNone {
			return nil
		}
		n, err := d.network(ctx, net)
		if errors.Is(err, errNoVeth) {
			return nil
		}
		if err != nil {
			return err
		}
		return vethDisconnect(res.Container, n)
	}
	_, err = d.c.NetworkDisconnect(ctx, net, client.NetworkDisconnectOptions{Container: ContainerName(id), Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify(fmt.Sprintf("disconnect container %s from network %s", ContainerName(id), net), err)
	}
	return nil
}

// BoxAddress reports the box's IPv4 address on network, or the zero Addr.
func (d *Driver) BoxAddress(ctx context.Context, id, net string) (netip.Addr, error) {
	if err := checkID(id); err != nil {
		return netip.Addr{}, err
	}
	res, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return netip.Addr{}, nil
	}
	if err != nil {
		return netip.Addr{}, classify("inspect container "+ContainerName(id), err)
	}
	if ns := res.Container.NetworkSettings; ns != nil && ns.Networks[net] != nil {
		return ns.Networks[net].IPAddress.Unmap(), nil
	}
	n, err := d.network(ctx, net)
	if errors.Is(err, errNoVeth) {
		return netip.Addr{}, nil
	}
	if err != nil {
		return netip.Addr{}, err
	}
	return vethAddress(res.Container, n)
}
