package docker

import (
	"context"
	"fmt"
	"net/netip"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

var _ driver.Networker = (*Driver)(nil)

// EnsureNetwork creates the bridge network name with subnet and its first
// address as gateway, or finds it. Inter-container traffic on it is off
// (enable_icc=false) so boxes cannot talk to each other even before the
// egress rules are in place. An existing network with another subnet is a
// conflict: the firewall rules are keyed on the subnet.
func (d *Driver) EnsureNetwork(ctx context.Context, name string, subnet netip.Prefix) (netip.Addr, error) {
	gw := subnet.Masked().Addr().Next()
	res, err := d.c.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		_, err = d.c.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver: "bridge",
			IPAM: &network.IPAM{Config: []network.IPAMConfig{{
				Subnet:  subnet.Masked(),
				Gateway: gw,
			}}},
			Options: map[string]string{
				"com.docker.network.bridge.enable_icc": "false",
			},
			Labels: map[string]string{driver.LabelManaged: "true"},
		})
		if err == nil {
			return gw, nil
		}
		if !cerrdefs.IsConflict(err) && !cerrdefs.IsAlreadyExists(err) {
			return netip.Addr{}, classify("create network "+name, err)
		}
		// Another daemon made it meanwhile: use theirs.
		res, err = d.c.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	}
	if err != nil {
		return netip.Addr{}, classify("inspect network "+name, err)
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

// RemoveNetwork removes the network; a missing one is not an error.
func (d *Driver) RemoveNetwork(ctx context.Context, name string) error {
	_, err := d.c.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify("remove network "+name, err)
	}
	return nil
}

// Connect attaches the box to network. A box made with driver.NetworkNone
// must leave "none" first: the engine refuses a second network beside it.
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
		return nil
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
	ns := res.Container.NetworkSettings
	if ns == nil || ns.Networks[net] == nil {
		return netip.Addr{}, nil
	}
	return ns.Networks[net].IPAddress.Unmap(), nil
}
