package kubernetes

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hotcell/hotcell/internal/driver"
)

// ListOwned returns the sandbox ids of the records and workspace claims
// labelled with instance, sorted and without duplicates. What is already
// being deleted is not listed: it is on its way out.
func (d *Driver) ListOwned(ctx context.Context, instance string) ([]string, error) {
	if instance == "" {
		return nil, fmt.Errorf("list owned objects: instance is empty")
	}
	opts := metav1.ListOptions{LabelSelector: instanceSelector(instance)}
	recs, err := d.c.CoreV1().Secrets(d.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return nil, classify("list records", err)
	}
	claims, err := d.c.CoreV1().PersistentVolumeClaims(d.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return nil, classify("list claims", err)
	}
	var ids []string
	for _, o := range recs.Items {
		if id := o.Labels[driver.LabelID]; id != "" && o.DeletionTimestamp == nil {
			ids = append(ids, id)
		}
	}
	for _, o := range claims.Items {
		if id := o.Labels[driver.LabelID]; id != "" && o.DeletionTimestamp == nil {
			ids = append(ids, id)
		}
	}
	return sortedIDs(ids), nil
}

// WatchEvents reports the oom and die events of instance's boxes, read
// from a watch of their pods, until ctx ends or the watch fails. A pod
// dies once: when its box container is seen terminated, the pod ended, or
// it is gone.
func (d *Driver) WatchEvents(ctx context.Context, instance string, fn func(driver.BoxEvent)) error {
	pods := d.c.CoreV1().Pods(d.cfg.Namespace)
	opts := metav1.ListOptions{LabelSelector: instanceSelector(instance)}
	list, err := pods.List(ctx, opts)
	if err != nil {
		return classify("list pods", err)
	}
	dead := map[types.UID]bool{}
	for i := range list.Items {
		if _, ended := podEnded(&list.Items[i]); ended {
			dead[list.Items[i].UID] = true
		}
	}
	rv := list.ResourceVersion
	for {
		opts.ResourceVersion = rv
		opts.AllowWatchBookmarks = true
		w, err := pods.Watch(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return classify("watch pods", err)
		}
		began := time.Now()
		last, err := d.follow(ctx, w, dead, fn)
		w.Stop()
		if err != nil {
			return err
		}
		if last != "" {
			rv = last
		}
		if time.Since(began) < time.Second {
			// A watch that ends at once, again and again, must not spin.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
}

// follow reports the events of one watch until it closes (the API server
// ends watches after a while: the caller watches anew from the returned
// resource version) or fails.
func (d *Driver) follow(ctx context.Context, w watch.Interface, dead map[types.UID]bool, fn func(driver.BoxEvent)) (string, error) {
	var rv string
	for {
		select {
		case <-ctx.Done():
			return rv, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open {
				return rv, nil
			}
			if ev.Type == watch.Error {
				return rv, fmt.Errorf("pod watch: %v: %w", ev.Object, io.ErrUnexpectedEOF)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			id := p.Labels[driver.LabelID]
			if id == "" {
				continue
			}
			oom, ended := podEnded(p)
			if ev.Type == watch.Deleted {
				ended = true
			}
			if !ended || dead[p.UID] {
				if ev.Type == watch.Deleted {
					delete(dead, p.UID)
				}
				continue
			}
			if ev.Type == watch.Deleted {
				delete(dead, p.UID)
			} else {
				dead[p.UID] = true
			}
			if oom {
				fn(driver.BoxEvent{ID: id, Type: "oom"})
			}
			fn(driver.BoxEvent{ID: id, Type: "die"})
		}
	}
}

// podEnded reports whether p's box has stopped running, and whether it
// was killed for memory.
func podEnded(p *corev1.Pod) (oom, ended bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		ended = true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerBox {
			continue
		}
		if t := cs.State.Terminated; t != nil {
			ended = true
			oom = t.Reason == "OOMKilled"
		}
	}
	return oom, ended
}
