package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

var _ driver.LimitUpdater = (*Driver)(nil)

// ResizeTimeout bounds how long UpdateLimits waits for the kubelet to
// apply a resize (a resize the node defers for want of room fails then).
const ResizeTimeout = 30 * time.Second

// CanUpdateLimits: the kubelet resizes a running pod in place (the pod's
// resize subresource, GA in Kubernetes 1.35) for runc; a RuntimeClass
// such as gVisor's may not take it. Kubernetes refuses to add or remove
// a request or limit, or to change the pod's QoS class, so each of memory
// and CPUs is equal or limited in both; the workspace is a volume of its
// size; a pod has no pids limit of its own (docs/kubernetes.md), so the
// pids limit changes nothing on the pod.
func (d *Driver) CanUpdateLimits(runtime string, from, to wire.Limits) bool {
	both := func(a, b int64) bool { return a == b || a > 0 && b > 0 }
	return (runtime == "" || runtime == wire.RuntimeRunc) && from.DiskMB == to.DiskMB &&
		both(from.MemoryMB, to.MemoryMB) &&
		(from.CPUs == to.CPUs || from.CPUs > 0 && to.CPUs > 0)
}

// UpdateLimits resizes a running box's pod in place (CPU and memory; the
// container is not restarted) and waits until the kubelet has applied
// the new limits, then keeps them in the box's record so its next pod
// (a start after a stop) has them too. A stopped box only has its
// record changed. A resize the cluster refuses (a memory limit below what
// the box uses now, a node without the room) fails naming the limit
// (limits.memoryMb, limits.cpus), and the pod is asked back to the limits
// it had.
func (d *Driver) UpdateLimits(ctx context.Context, id string, l wire.Limits) error {
	if err := checkID(id); err != nil {
		return err
	}
	want, err := resources(driver.Spec{Limits: l})
	if err != nil {
		return err
	}
	rec, err := d.record(ctx, id)
	if err != nil {
		return fmt.Errorf("update the limits of sandbox %s: %w", id, err)
	}
	p, err := d.getPod(ctx, id)
	if err != nil {
		return err
	}
	if p != nil && p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending) {
		if err := d.resize(ctx, id, p, want); err != nil {
			return err
		}
	}
	return d.recordLimits(ctx, id, rec, want)
}

// resize patches pod p's box container to want through the resize
// subresource and waits until the kubelet runs it so; on a refusal it
// asks the pod back to the resources it had.
func (d *Driver) resize(ctx context.Context, id string, p *corev1.Pod, want corev1.ResourceRequirements) error {
	var had corev1.ResourceRequirements
	for _, c := range p.Spec.Containers {
		if c.Name == containerBox {
			had = c.Resources
		}
	}
	if sameResources(had.Limits, want.Limits) {
		return nil
	}
	cur, err := d.patchResize(ctx, p.Name, want.Limits)
	if err != nil {
		return resizeError(err, had.Limits, want.Limits)
	}
	wctx, cancel := context.WithTimeout(ctx, ResizeTimeout)
	defer cancel()
	var last string
	err = d.waitPod(wctx, id, func(p *corev1.Pod) (bool, error) {
		if p == nil || p.UID != cur.UID {
			return false, fmt.Errorf("pod %s went while it was resized: %w", PodName(id), errdefs.ErrConflict)
		}
		if og := p.Status.ObservedGeneration; og != 0 && og < cur.Generation {
			return false, nil // the kubelet has not seen the resize yet
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch {
			case c.Type == corev1.PodResizePending && c.Reason == corev1.PodReasonInfeasible:
				return false, fieldError(errdefs.ErrInvalidArgument, "the node of pod %s can never give it that: %s", had.Limits, want.Limits, PodName(id), c.Message)
			case c.Type == corev1.PodResizeInProgress && c.Reason == corev1.PodReasonError:
				// A memory limit below the box's use: the kubelet keeps
				// trying; the caller wants an answer now.
				return false, fieldError(errdefs.ErrConflict, "the kubelet cannot resize pod %s: %s", had.Limits, want.Limits, PodName(id), c.Message)
			case c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress:
				last = fmt.Sprintf("%s %s %s", c.Type, c.Reason, c.Message)
				return false, nil
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == containerBox {
				return cs.Resources != nil && sameResources(cs.Resources.Limits, want.Limits), nil
			}
		}
		return false, nil
	})
	if err != nil && errors.Is(err, errdefs.ErrDeadlineExceeded) && wctx.Err() != nil && ctx.Err() == nil {
		err = fieldError(errdefs.ErrConflict, "the kubelet did not resize pod %s within %s (%s)", had.Limits, want.Limits, PodName(id), ResizeTimeout, strings.TrimSpace(last))
	}
	if err != nil {
		// The pod's spec says what it runs with again; a box whose pod is
		// gone needs nothing.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, rerr := d.patchResize(cctx, p.Name, had.Limits); rerr != nil && !isNotFound(rerr) {
			err = errors.Join(err, classify("resize pod "+p.Name+" back", rerr))
		}
		return err
	}
	return nil
}

// patchResize sets the box container's limits and requests (equal, as a
// pod made with only limits has them) through the pod's resize
// subresource.
func (d *Driver) patchResize(ctx context.Context, pod string, limits corev1.ResourceList) (*corev1.Pod, error) {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
		"name":      containerBox,
		"resources": map[string]any{"limits": limits, "requests": limits},
	}}}})
	if err != nil {
		return nil, err
	}
	return d.c.CoreV1().Pods(d.cfg.Namespace).Patch(ctx, pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize")
}

// recordLimits keeps want as the box container's resources in the record's
// pod.
func (d *Driver) recordLimits(ctx context.Context, id string, rec *corev1.Secret, want corev1.ResourceRequirements) error {
	secrets := d.c.CoreV1().Secrets(d.cfg.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		if err := json.Unmarshal(rec.Data[recordPod], &pod); err != nil {
			return fmt.Errorf("decode its pod: %w", err)
		}
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == containerBox {
				pod.Spec.Containers[i].Resources = want
			}
		}
		b, err := json.Marshal(&pod)
		if err != nil {
			return err
		}
		rec.Data[recordPod] = b
		_, err = secrets.Update(ctx, rec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, gerr := d.record(ctx, id); gerr == nil {
				rec = fresh
			}
		}
		return err
	})
	if err != nil {
		return classify("record the limits of sandbox "+id, err)
	}
	return nil
}

// sameResources says whether a and b set the same CPU and memory.
func sameResources(a, b corev1.ResourceList) bool {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		qa, oka := a[r]
		qb, okb := b[r]
		if oka != okb || oka && qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

// resizeError is the error of a resize the API server refused.
func resizeError(err error, had, want corev1.ResourceList) error {
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		// "node didn't have enough allocatable resources: cpu"; a
		// resize the API does not allow.
		return fieldError(errdefs.ErrInvalidArgument, "the cluster refused the resize: %s", had, want, err.Error())
	}
	return classify("resize pod", err)
}

// fieldError names the limit a refusal is about: the one its message
// names, else each that changed.
func fieldError(class error, format string, had, want corev1.ResourceList, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	lower := strings.ToLower(msg)
	var fields []string
	changed := func(r corev1.ResourceName) bool {
		return !sameResources(corev1.ResourceList{r: had[r]}, corev1.ResourceList{r: want[r]})
	}
	if strings.Contains(lower, "memory") || changed(corev1.ResourceMemory) && !strings.Contains(lower, "cpu") {
		fields = append(fields, "limits.memoryMb")
	}
	if strings.Contains(lower, "cpu") || changed(corev1.ResourceCPU) && !strings.Contains(lower, "memory") {
		fields = append(fields, "limits.cpus")
	}
	if len(fields) == 0 {
		fields = []string{"limits"}
	}
	return fmt.Errorf("%s: %s: %w", strings.Join(fields, ", "), msg, class)
}
