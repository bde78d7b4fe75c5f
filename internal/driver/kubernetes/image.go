package kubernetes

import (
	"context"
	"fmt"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// EnsureImage checks that ref can run. The kubelet pulls images, not the
// driver: with a pull policy that lets it, a ref no node has is left to the
// pull at start. With PullPolicy Never (a cluster without a registry) a
// node must list the image, else it is ErrNotFound with how to import it.
func (d *Driver) EnsureImage(ctx context.Context, ref string, progress driver.Progress) error {
	named, err := normalize(ref)
	if err != nil {
		return err
	}
	if handled, err := d.registryImage(ctx, ref); handled {
		return err
	}
	nodes, err := d.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return classify("list nodes", err)
	}
	for _, n := range nodes.Items {
		for _, img := range n.Status.Images {
			for _, name := range img.Names {
				if name == named {
					return nil
				}
			}
		}
	}
	if d.cfg.PullPolicy != corev1.PullNever {
		if progress != nil {
			progress(fmt.Sprintf("no node lists image %s yet: the kubelet pulls it when the sandbox starts", ref))
		}
		return nil
	}
	return fmt.Errorf("image %s is on no node of the cluster, and the driver's pull policy is Never: import it into each node's containerd (ctr -n k8s.io images import, or scripts/k8s for the test cluster): %w", ref, errdefs.ErrNotFound)
}

// normalize returns ref as the nodes list it: docker.io/library/x:latest
// for x.
func normalize(ref string) (string, error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", errdefs.Invalid("image", "%q is not an image reference: %v", ref, err)
	}
	return reference.TagNameOnly(n).String(), nil
}
