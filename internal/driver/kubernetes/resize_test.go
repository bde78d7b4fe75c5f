package kubernetes_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// cgroupLimits reads the CPU quota (µs per 100 ms period, or "max") and
// the memory limit (bytes) of the box container of pod from inside it,
// on cgroup v2 or v1.
func cgroupLimits(t *testing.T, env *testk8s.Env, ns, pod string) string {
	t.Helper()
	out := env.MustKubectl(t, "-n", ns, "exec", pod, "-c", "box", "--", "sh", "-c",
		`if [ -f /sys/fs/cgroup/cpu.max ]; then set -- $(cat /sys/fs/cgroup/cpu.max); echo "cpu=$1 mem=$(cat /sys/fs/cgroup/memory.max)"; `+
			`else echo "cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"; fi`)
	return strings.TrimSpace(out)
}

// TestUpdateLimitsInPlace: the Kubernetes driver resizes a running box's
// pod in place (the pod's resize subresource): the same pod, not
// restarted, its agent still connected, runs with the new CPU and memory
// limits (read from its cgroups inside it), and a start after a stop
// keeps them. A memory limit below what the box uses, and a CPU limit no
// node has, are refused naming the limit, the pod asked back to what it
// had; one lowered to above the box's use is applied. What cannot change in place (a disk, a limit added or lifted, a
// gVisor box) is said so by CanUpdateLimits.
func TestUpdateLimitsInPlace(t *testing.T) {
	t.Parallel()
	d, image, env := clusterDriverOn(t, true)
	ctx, pods, ns := t.Context(), d.Client().CoreV1().Pods(d.Namespace()), d.Namespace()

	from := wire.Limits{CPUs: 0.1, MemoryMB: 128, DiskMB: 100}
	for _, c := range []struct {
		runtime string
		to      wire.Limits
		want    bool
	}{
		{"", wire.Limits{CPUs: 0.3, MemoryMB: 64, DiskMB: 100}, true},
		{wire.RuntimeRunc, wire.Limits{CPUs: 2, MemoryMB: 512, DiskMB: 100, PidsLimit: 50}, true},
		{wire.RuntimeGVisor, wire.Limits{CPUs: 0.3, MemoryMB: 128, DiskMB: 100}, false},
		{"", wire.Limits{CPUs: 0.1, MemoryMB: 128, DiskMB: 200}, false},
		{"", wire.Limits{CPUs: 0, MemoryMB: 128, DiskMB: 100}, false},
		{"", wire.Limits{CPUs: 0.1, MemoryMB: 0, DiskMB: 100}, false},
	} {
		if got := d.CanUpdateLimits(c.runtime, from, c.to); got != c.want {
			t.Errorf("CanUpdateLimits(%q, %+v, %+v) = %v, want %v", c.runtime, from, c.to, got, c.want)
		}
	}

	spec, listen := newBox(t, d, image)
	spec.Limits = wire.Limits{CPUs: 0.1, MemoryMB: 128}
	must(t, "create", d.Create(ctx, spec))
	conn := listen()
	must(t, "start", d.Start(ctx, spec.ID))
	waitAgent(t, conn)
	name := kubernetes.PodName(spec.ID)
	before, err := pods.Get(ctx, name, metav1.GetOptions{})
	must(t, "get pod", err)
	if got, want := cgroupLimits(t, env, ns, name), "cpu=10000 mem=134217728"; got != want {
		t.Fatalf("cgroups of the new box: %s, want %s", got, want)
	}

	must(t, "update limits", d.UpdateLimits(ctx, spec.ID, wire.Limits{CPUs: 0.25, MemoryMB: 192, PidsLimit: 77}))
	after, err := pods.Get(ctx, name, metav1.GetOptions{})
	must(t, "get pod", err)
	if after.UID != before.UID {
		t.Errorf("the resized box's pod is %s, not the pod %s it had", after.UID, before.UID)
	}
	for _, cs := range after.Status.ContainerStatuses {
		if cs.Name == "box" && cs.RestartCount != 0 {
			t.Errorf("the box container restarted %d times in the resize", cs.RestartCount)
		}
	}
	if got, want := cgroupLimits(t, env, ns, name), "cpu=25000 mem=201326592"; got != want {
		t.Errorf("cgroups after the resize: %s, want %s", got, want)
	}
	if !conn.Connected() {
		t.Error("the box's agent is not connected after the resize")
	}

	// Memory in use (a file on the box's /dev/shm tmpfs is charged to
	// it) above the limit asked for: the kubelet will not shrink it.
	env.MustKubectl(t, "-n", ns, "exec", name, "-c", "box", "--", "dd", "if=/dev/zero", "of=/dev/shm/hold", "bs=1M", "count=48")
	err = d.UpdateLimits(ctx, spec.ID, wire.Limits{CPUs: 0.25, MemoryMB: 16})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "limits.memoryMb") {
		t.Errorf("a memory limit below the box's use: got %v, want a conflict naming limits.memoryMb", err)
	}
	t.Logf("memory below use: %v", err)
	err = d.UpdateLimits(ctx, spec.ID, wire.Limits{CPUs: 512, MemoryMB: 192})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "limits.cpus") || strings.Contains(err.Error(), "limits.memoryMb") {
		t.Errorf("more CPUs than the node has: got %v, want an invalid argument naming limits.cpus only", err)
	}
	t.Logf("more CPUs than the node has: %v", err)
	// Asked back: the spec and what the kubelet runs are the last limits.
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		must(t, "get pod", err)
		spec := p.Spec.Containers[0].Resources.Limits
		var resizing []string
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
				resizing = append(resizing, string(c.Type)+" "+c.Message)
			}
		}
		if spec.Memory().Value() == 192<<20 && spec.Cpu().MilliValue() == 250 && len(resizing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after two refused resizes the pod asks for %v and is %v, want it back at 250m and 192Mi", spec, resizing)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if got, want := cgroupLimits(t, env, ns, name), "cpu=25000 mem=201326592"; got != want {
		t.Errorf("cgroups after the refused resizes: %s, want %s", got, want)
	}

	// A memory limit lowered to above what the box uses is applied.
	must(t, "lower the memory limit", d.UpdateLimits(ctx, spec.ID, wire.Limits{CPUs: 0.25, MemoryMB: 160}))
	if got, want := cgroupLimits(t, env, ns, name), "cpu=25000 mem=167772160"; got != want {
		t.Errorf("cgroups after lowering the memory limit: %s, want %s", got, want)
	}

	// The record has the new limits: the next pod is made with them.
	must(t, "stop", d.Stop(ctx, spec.ID, 5*time.Second))
	must(t, "update limits of the stopped box", d.UpdateLimits(ctx, spec.ID, wire.Limits{CPUs: 0.3, MemoryMB: 176}))
	conn = listen()
	must(t, "start", d.Start(ctx, spec.ID))
	waitAgent(t, conn)
	if got, want := cgroupLimits(t, env, ns, name), "cpu=30000 mem=184549376"; got != want {
		t.Errorf("cgroups of the pod started after the box was stopped and resized: %s, want %s", got, want)
	}
}
