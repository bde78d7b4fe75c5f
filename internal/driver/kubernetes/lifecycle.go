package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// recordPod is the key of a record Secret that holds the box's pod.
const recordPod = "pod.json"

// Create records the box (a Secret holding the pod it runs as) and, when
// spec.Persist, makes its workspace claim, without starting it. If it fails
// it leaves nothing behind that it made.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (err error) {
	if err := checkID(spec.ID); err != nil {
		return err
	}
	if spec.Egress != nil {
		if _, err := egress.ParsePolicy("egress", *spec.Egress, wire.EgressOpen); err != nil {
			return err
		}
	}
	class, err := d.runtimeClass(ctx, spec.Runtime)
	if err != nil {
		return err
	}
	pod, err := d.podFor(spec, class)
	if err != nil {
		return err
	}
	b, err := json.Marshal(pod)
	if err != nil {
		return fmt.Errorf("encode pod of sandbox %s: %w", spec.ID, err)
	}
	data := map[string][]byte{recordPod: b}
	if spec.AgentDial != nil {
		if data[driver.AgentDialFile], err = spec.AgentDial.Marshal(); err != nil {
			return err
		}
	}
	rec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(spec.ID),
			Namespace:   d.cfg.Namespace,
			Labels:      cloneLabels(pod.Labels),
			Annotations: cloneLabels(pod.Annotations),
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	secrets := d.c.CoreV1().Secrets(d.cfg.Namespace)
	if _, err := secrets.Create(ctx, rec, metav1.CreateOptions{}); err != nil {
		return classify("create record of sandbox "+spec.ID, err)
	}
	defer func() {
		if err == nil {
			return
		}
		// The caller's ctx may be what failed; cleanup must still run.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := secrets.Delete(cctx, rec.Name, metav1.DeleteOptions{}); rerr != nil && !isNotFound(rerr) {
			err = errors.Join(err, classify("remove record of sandbox "+spec.ID, rerr))
		}
	}()
	// The driver's steps are named pod_*: the manager traces its own
	// record and egress steps in the same create.
	driver.TraceStep(ctx, "pod_record")
	if spec.Egress != nil && d.cfg.Egress.NetworkPolicies {
		if err := d.putNetworkPolicy(ctx, spec.ID, spec.Instance, *spec.Egress); err != nil {
			return fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		defer func() {
			if err == nil {
				return
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			err = errors.Join(err, d.removeNetworkPolicy(cctx, spec.ID))
		}()
	}
	if spec.Persist {
		created, err := d.ensureWorkspace(ctx, spec)
		if err != nil {
			return fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		if created {
			defer func() {
				if err == nil {
					return
				}
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if rerr := d.removeWorkspace(cctx, spec.ID); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}()
		}
		driver.TraceStep(ctx, "volume")
	}
	return nil
}

// runtimeClass returns the RuntimeClass of a box of hotcell runtime rt,
// and refuses a runtime whose class the cluster lacks.
func (d *Driver) runtimeClass(ctx context.Context, rt string) (string, error) {
	if rt == "" {
		return "", nil
	}
	if !slices.Contains(wire.Runtimes(), rt) {
		return "", errdefs.Invalid("runtime", "unknown runtime %q (want one of %s)", rt, strings.Join(wire.Runtimes(), ", "))
	}
	class, ok := d.cfg.RuntimeClasses[rt]
	if !ok {
		return "", nil // the cluster's default runtime
	}
	_, err := d.c.NodeV1().RuntimeClasses().Get(ctx, class, metav1.GetOptions{})
	if isNotFound(err) {
		return "", errdefs.Invalid("runtime", "runtime %q needs the RuntimeClass %q, which the cluster lacks: install the runtime on the nodes and create the RuntimeClass (see docs/kubernetes.md)", rt, class)
	}
	if err != nil {
		return "", classify("get runtimeclass "+class, err)
	}
	return class, nil
}

// record returns sandbox id's record, or ErrNotFound.
func (d *Driver) record(ctx context.Context, id string) (*corev1.Secret, error) {
	rec, err := d.c.CoreV1().Secrets(d.cfg.Namespace).Get(ctx, PodName(id), metav1.GetOptions{})
	if err != nil {
		return nil, classify("get record of sandbox "+id, err)
	}
	if rec.Labels[driver.LabelManaged] != "true" {
		return nil, fmt.Errorf("secret %s is not a hotcell record: %w", rec.Name, errdefs.ErrNotFound)
	}
	return rec, nil
}

// getPod returns sandbox id's pod, or nil when it has none.
func (d *Driver) getPod(ctx context.Context, id string) (*corev1.Pod, error) {
	p, err := d.c.CoreV1().Pods(d.cfg.Namespace).Get(ctx, PodName(id), metav1.GetOptions{})
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, classify("get pod "+PodName(id), err)
	}
	return p, nil
}

// Start makes the box's pod from its record and waits until it runs.
// Starting a running box is not an error.
func (d *Driver) Start(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	rec, err := d.record(ctx, id)
	if err != nil {
		return fmt.Errorf("start sandbox %s: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	p, err := d.getPod(ctx, id)
	if err != nil {
		return err
	}
	if p != nil {
		if p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning) {
			if err := d.waitRunning(ctx, id); err != nil {
				return err
			}
			return d.waitEgressApplied(ctx, id, p.UID)
		}
		// A pod that ended (its agent exited) or is on its way out: the
		// box starts again as a new pod of the same name.
		if err := d.deletePod(ctx, id, nil); err != nil {
			return fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(rec.Data[recordPod], &pod); err != nil {
		return fmt.Errorf("start sandbox %s: decode its pod: %w", id, err)
	}
	pod.Namespace = d.cfg.Namespace
	made, err := d.c.CoreV1().Pods(d.cfg.Namespace).Create(ctx, &pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Already there: a start racing this one made it.
		made, err = d.c.CoreV1().Pods(d.cfg.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return classify("create pod "+pod.Name, err)
	}
	driver.TraceStep(ctx, "pod_create")
	err = d.waitRunning(ctx, id)
	driver.TraceStep(ctx, "pod_start")
	if err == nil {
		// Nothing of the user's runs before the node's rules are in.
		err = d.waitEgressApplied(ctx, id, made.UID)
		driver.TraceStep(ctx, "pod_egress")
	}
	if err != nil {
		// Leave the box stopped, not half started.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := d.deletePod(cctx, id, new(int64)); derr != nil {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("start sandbox %s: %w", id, err)
	}
	return nil
}

// waitRunning waits until sandbox id's pod runs, and fails at once on
// what will not get better by waiting (a missing image, a container that
// cannot be made, an agent that exited).
func (d *Driver) waitRunning(ctx context.Context, id string) error {
	var last string
	err := d.waitPod(ctx, id, func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return false, fmt.Errorf("pod %s was deleted while it started: %w", PodName(id), errdefs.ErrConflict)
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, fmt.Errorf("pod %s ended as it started: %s", PodName(id), podEnd(p))
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			if w := cs.State.Waiting; w != nil {
				switch w.Reason {
				case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
					return false, fmt.Errorf("container %s of pod %s: image %s: %s: %s: %w", cs.Name, PodName(id), cs.Image, w.Reason, w.Message, errdefs.ErrNotFound)
				case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
					return false, fmt.Errorf("container %s of pod %s: %s: %s", cs.Name, PodName(id), w.Reason, w.Message)
				}
			}
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				return false, fmt.Errorf("container %s of pod %s exited %d: %s %s", cs.Name, PodName(id), t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				last = fmt.Sprintf("not scheduled: %s: %s", c.Reason, c.Message)
			}
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil && last != "" {
		return fmt.Errorf("%w (pod %s %s)", err, PodName(id), last)
	}
	return err
}

// podEnd says how a pod's box container ended.
func podEnd(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("exit code %d, %s %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	return fmt.Sprintf("phase %s: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
}

// waitPod calls done with sandbox id's pod (nil once it is gone) now and
// at every change, until done says so or fails, or ctx ends.
func (d *Driver) waitPod(ctx context.Context, id string, done func(*corev1.Pod) (bool, error)) error {
	pods := d.c.CoreV1().Pods(d.cfg.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", PodName(id)).String()
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return classify("get pod "+PodName(id), err)
		}
		var p *corev1.Pod
		if len(list.Items) > 0 {
			p = &list.Items[0]
		}
		if ok, err := done(p); ok || err != nil {
			return err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return classify("watch pod "+PodName(id), err)
		}
		ok, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, fmt.Errorf("wait for pod %s: %w", PodName(id), errors.Join(ctx.Err(), errdefs.ErrDeadlineExceeded))
				case ev, open := <-w.ResultChan():
					if !open || ev.Type == watch.Error {
						return false, nil // list again and watch anew
					}
					p, _ := ev.Object.(*corev1.Pod)
					if ev.Type == watch.Deleted {
						p = nil
					}
					if ok, err := done(p); ok || err != nil {
						return ok, err
					}
				}
			}
		}()
		if ok || err != nil {
			return err
		}
	}
}

// deletePod deletes sandbox id's pod with grace seconds for its agent to
// exit (nil for the pod's own) and waits until it is gone; a missing pod
// is not an error.
func (d *Driver) deletePod(ctx context.Context, id string, grace *int64) error {
	err := d.c.CoreV1().Pods(d.cfg.Namespace).Delete(ctx, PodName(id), metav1.DeleteOptions{GracePeriodSeconds: grace})
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return classify("delete pod "+PodName(id), err)
	}
	var last *corev1.Pod
	err = d.waitPod(ctx, id, func(p *corev1.Pod) (bool, error) {
		last = p
		return p == nil, nil
	})
	if err != nil && last != nil {
		// Say where the kubelet got stuck: a wait that ends here is
		// otherwise only a deadline.
		return fmt.Errorf("%w (pod %s still there: %s)", err, PodName(id), podState(last))
	}
	return err
}

// podState describes a pod for an error: its phase, whether its deletion
// was asked for, and each container's state.
func podState(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	if t := p.DeletionTimestamp; t != nil {
		fmt.Fprintf(&b, ", deletion due %s", t.UTC().Format(time.RFC3339))
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		switch st := cs.State; {
		case st.Running != nil:
			fmt.Fprintf(&b, ", container %s running since %s", cs.Name, st.Running.StartedAt.UTC().Format(time.RFC3339))
		case st.Terminated != nil:
			fmt.Fprintf(&b, ", container %s exited %d (%s)", cs.Name, st.Terminated.ExitCode, st.Terminated.Reason)
		case st.Waiting != nil:
			fmt.Fprintf(&b, ", container %s waiting (%s)", cs.Name, st.Waiting.Reason)
		}
	}
	return b.String()
}

// Stop deletes the box's pod, giving its agent timeout (rounded up to
// whole seconds; zero or less means 10 s) between SIGTERM and SIGKILL,
// and waits until it is gone. The record and the workspace claim stay.
func (d *Driver) Stop(ctx context.Context, id string, timeout time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	if _, err := d.record(ctx, id); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	secs := int64(10)
	if timeout > 0 {
		secs = int64((timeout + time.Second - 1) / time.Second)
	}
	// The kubelet needs a moment beyond the grace to confirm the kill.
	wctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	if err := d.deletePod(wctx, id, &secs); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	return nil
}

// destroyGrace is how long a destroyed box's agent gets: the box is going
// for good, but its pod must be gone (its workspace unmounted) before the
// workspace is removed.
var destroyGrace = int64(1)

// Destroy removes the box's pod, its workspace and its record. What is
// already gone is not an error, so Destroy can be retried until it
// succeeds; the record goes last, so a failed Destroy still finds it.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := d.deletePod(wctx, id, &destroyGrace)
	cancel()
	if err != nil && ctx.Err() == nil {
		// A node that does not answer never confirms the kill: take the
		// pod out of the API; the kubelet kills it when it comes back.
		if ferr := d.c.CoreV1().Pods(d.cfg.Namespace).Delete(ctx, PodName(id), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); ferr != nil && !isNotFound(ferr) {
			return fmt.Errorf("destroy sandbox %s: %w", id, errors.Join(err, classify("force delete pod", ferr)))
		}
	} else if err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	driver.TraceStep(ctx, "pod_remove")
	if err := d.removeWorkspace(ctx, id); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	driver.TraceStep(ctx, "volume")
	if d.cfg.Egress.NetworkPolicies {
		if err := d.removeNetworkPolicy(ctx, id); err != nil {
			return fmt.Errorf("destroy sandbox %s: %w", id, err)
		}
	}
	err = d.c.CoreV1().Secrets(d.cfg.Namespace).Delete(ctx, PodName(id), metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		return classify("remove record of sandbox "+id, err)
	}
	return nil
}

// Inspect reports the box; a box without a record is BoxMissing.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Status, error) {
	if err := checkID(id); err != nil {
		return driver.Status{}, err
	}
	rec, err := d.record(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return driver.Status{ID: id, State: driver.BoxMissing}, nil
	}
	if err != nil {
		return driver.Status{}, err
	}
	p, err := d.getPod(ctx, id)
	if err != nil {
		return driver.Status{}, err
	}
	st := podStatus(id, p)
	st.Runtime = recordRuntime(rec)
	return st, nil
}

func recordRuntime(rec *corev1.Secret) string {
	if rt := rec.Annotations[annoRuntime]; rt != "" {
		return rt
	}
	return wire.RuntimeRunc
}

// podStatus is the state of a box whose pod is p (nil: none, the box is
// stopped).
func podStatus(id string, p *corev1.Pod) driver.Status {
	st := driver.Status{ID: id, State: driver.BoxStopped}
	if p == nil {
		return st
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerBox {
			continue
		}
		if r := cs.State.Running; r != nil {
			st.StartedAt = r.StartedAt.Time
		}
		if t := cs.State.Terminated; t != nil {
			st.ExitCode = int(t.ExitCode)
			st.OOMKilled = t.Reason == "OOMKilled"
		}
	}
	switch {
	case p.DeletionTimestamp != nil:
		// On its way out: a stop or destroy is under way.
	case p.Status.Phase == corev1.PodRunning, p.Status.Phase == corev1.PodPending:
		// Pending is a start under way (scheduling, the agent's copy).
		st.State = driver.BoxRunning
	}
	return st
}

// List reports every box with a record in the namespace, in any state. It
// fills ID and State; Inspect a box for the rest.
func (d *Driver) List(ctx context.Context) ([]driver.Status, error) {
	opts := metav1.ListOptions{LabelSelector: instanceSelector("")}
	recs, err := d.c.CoreV1().Secrets(d.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return nil, classify("list records", err)
	}
	pods, err := d.c.CoreV1().Pods(d.cfg.Namespace).List(ctx, opts)
	if err != nil {
		return nil, classify("list pods", err)
	}
	byID := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byID[pods.Items[i].Labels[driver.LabelID]] = &pods.Items[i]
	}
	out := make([]driver.Status, 0, len(recs.Items))
	for _, r := range recs.Items {
		id := r.Labels[driver.LabelID]
		if id == "" || r.DeletionTimestamp != nil {
			continue
		}
		st := podStatus(id, byID[id])
		out = append(out, driver.Status{ID: id, State: st.State})
	}
	slices.SortFunc(out, func(a, b driver.Status) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
