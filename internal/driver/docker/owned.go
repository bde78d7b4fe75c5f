package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
)

var (
	_ driver.InstanceLister = (*Driver)(nil)
	_ driver.EventWatcher   = (*Driver)(nil)
)

// ListOwned returns the sandbox ids of the containers and workspace volumes
// labelled with instance, and of the workspace disks, sorted and without duplicates.
func (d *Driver) ListOwned(ctx context.Context, instance string) ([]string, error) {
	if instance == "" {
		return nil, fmt.Errorf("list owned objects: instance is empty")
	}
	f := make(client.Filters).Add("label", driver.LabelManaged+"=true", driver.LabelInstance+"="+instance)
	cs, err := d.c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, classify("list containers", err)
	}
	vs, err := d.c.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, classify("list volumes", err)
	}
	var ids []string
	for _, c := range cs.Items {
		if id := c.Labels[driver.LabelID]; id != "" {
			ids = append(ids, id)
		}
	}
	for _, v := range vs.Items {
		if id := v.Labels[driver.LabelID]; id != "" {
			ids = append(ids, id)
		}
	}
	if d.disks != nil {
		// The disks live in this instance's data dir: all of them are its.
		dids, err := d.disks.IDs()
		if err != nil {
			return nil, err
		}
		ids = append(ids, dids...)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// WatchEvents reports the oom and die events of instance's containers from
// the engine's event stream until ctx ends or the stream breaks.
func (d *Driver) WatchEvents(ctx context.Context, instance string, fn func(driver.BoxEvent)) error {
	f := make(client.Filters).
		Add("type", string(events.ContainerEventType)).
		Add("event", string(events.ActionOOM), string(events.ActionDie)).
		Add("label", driver.LabelInstance+"="+instance)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := d.c.Events(ctx, client.EventsListOptions{Filters: f})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err, ok := <-res.Err:
			if !ok || err == nil || errors.Is(err, io.EOF) {
				return fmt.Errorf("engine event stream ended: %w", io.ErrUnexpectedEOF)
			}
			return classify("watch engine events", err)
		case msg := <-res.Messages:
			id := msg.Actor.Attributes[driver.LabelID]
			if id == "" {
				continue
			}
			fn(driver.BoxEvent{ID: id, Type: string(msg.Action)})
		}
	}
}
