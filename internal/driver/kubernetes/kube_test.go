package kubernetes_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// newBox returns the spec of a box on d with a run dir and its agent's
// socket listening there, and destroys it when t ends.
func newBox(t *testing.T, d *kubernetes.Driver, image string) (driver.Spec, func() *agentconn.Conn) {
	t.Helper()
	id := randomID(t)
	dir, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Destroy(ctx, id); err != nil {
			t.Errorf("cleanup sandbox %s: %v", id, err)
		}
		os.RemoveAll(dir)
	})
	spec := driver.Spec{ID: id, Image: image, Persist: true, HostRunDir: dir, Instance: "kube-test", Labels: map[string]string{"team": "ml"}}
	var conn *agentconn.Conn
	listen := func() *agentconn.Conn {
		if conn != nil {
			conn.Close()
		}
		c, err := agentconn.Listen(id, filepath.Join(dir, driver.AgentSocket), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conn = c
		return c
	}
	return spec, listen
}

func waitAgent(t *testing.T, c *agentconn.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("the box's agent did not connect: %v", err)
	}
}

// TestWorkspaceKeptAcrossStop checks what stop and start mean on a
// cluster: stop deletes the pod and keeps the claim, start makes a new pod
// on the same workspace, and destroy removes the claim, its volume and the
// directory on the node. It does so with the volumes the driver makes
// itself (kubernetes_workspace_host_dir) and with those of a StorageClass's
// provisioner (the test cluster's, the controller manager's hostPath one).
// It also checks that the box holds no credential of the cluster.
func TestWorkspaceKeptAcrossStop(t *testing.T) {
	t.Parallel()
	t.Run("HostDir", func(t *testing.T) {
		t.Parallel()
		d, image := clusterDriver(t)
		testWorkspaceKept(t, d, image, "")
	})
	t.Run("StorageClass", func(t *testing.T) {
		t.Parallel()
		class := testk8s.Cluster(t).StorageClass
		d, image, _ := clusterDriverOn(t, true, func(c *kubernetes.Config) { c.WorkspaceHostDir, c.StorageClass = "", class })
		testWorkspaceKept(t, d, image, class)
	})
}

// testWorkspaceKept is TestWorkspaceKeptAcrossStop on d, whose claims are
// of class (provisioned), or of the driver's own volumes when it is "".
func testWorkspaceKept(t *testing.T, d *kubernetes.Driver, image, class string) {
	ctx, c, ns := t.Context(), d.Client().CoreV1(), d.Namespace()
	spec, listen := newBox(t, d, image)
	must(t, "create", d.Create(ctx, spec))
	conn := listen()
	must(t, "start", d.Start(ctx, spec.ID))
	waitAgent(t, conn)

	pod, err := c.Pods(ns).Get(ctx, kubernetes.PodName(spec.ID), metav1.GetOptions{})
	must(t, "get pod", err)
	for k, want := range map[string]string{driver.LabelManaged: "true", driver.LabelID: spec.ID, driver.LabelInstance: "kube-test", driver.LabelUserPrefix + "team": "ml"} {
		if pod.Labels[k] != want {
			t.Errorf("pod label %s: got %q, want %q", k, pod.Labels[k], want)
		}
	}
	var fi wire.FileInfo
	err = conn.DoJSON(ctx, "GET", "/v1/fs/stat?path=/var/run/secrets/kubernetes.io", nil, &fi)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stat of the service account mount in the box: got %+v, %v; want not found", fi, err)
	}

	// The kubelet reads a new pod within its housekeeping interval; until
	// then its counters are listed unavailable.
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := d.Stats(ctx, spec.ID)
		must(t, "stats", err)
		if !slices.Contains(r.Unavailable, "memory.usage") {
			if r.MemoryBytes <= 0 || r.CPUUsageNs == 0 || r.MemoryLimitBytes != 0 || (r.Pids < 1 && !slices.Contains(r.Unavailable, "pids.current")) {
				t.Errorf("stats of the running box: got %+v; want its memory, CPU time and processes (or pids listed unavailable), no memory limit", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats of the running box: no reading from the kubelet within a minute: %+v", r)
		}
		time.Sleep(time.Second)
	}

	must(t, "mkdir in the workspace", conn.DoJSON(ctx, "POST", "/v1/fs/mkdir", wire.MkdirRequest{Path: "/workspace/kept"}, nil))
	uid := pod.UID
	must(t, "stop", d.Stop(ctx, spec.ID, 5*time.Second))
	if _, err := c.Pods(ns).Get(ctx, kubernetes.PodName(spec.ID), metav1.GetOptions{}); err == nil {
		t.Error("the pod is still there after stop")
	}
	if _, err := c.PersistentVolumeClaims(ns).Get(ctx, kubernetes.ClaimName(spec.ID), metav1.GetOptions{}); err != nil {
		t.Errorf("the workspace claim after stop: %v", err)
	}

	conn = listen()
	must(t, "start after stop", d.Start(ctx, spec.ID))
	waitAgent(t, conn)
	pod, err = c.Pods(ns).Get(ctx, kubernetes.PodName(spec.ID), metav1.GetOptions{})
	must(t, "get pod", err)
	if pod.UID == uid {
		t.Error("start after stop kept the old pod")
	}
	if err := conn.DoJSON(ctx, "GET", "/v1/fs/stat?path=/workspace/kept", nil, &fi); err != nil || fi.Type != wire.FileTypeDir {
		t.Errorf("the workspace after stop and start: stat /workspace/kept: got %+v, %v; want the directory made before the stop", fi, err)
	}
	claim, err := c.PersistentVolumeClaims(ns).Get(ctx, kubernetes.ClaimName(spec.ID), metav1.GetOptions{})
	must(t, "get claim", err)
	pv, err := c.PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
	must(t, "get the claim's volume", err)
	if pv.Spec.HostPath == nil || pv.Spec.StorageClassName != class {
		t.Fatalf("the workspace volume of %s: class %q, %+v; want one of class %q on the node's disk", spec.ID, pv.Spec.StorageClassName, pv.Spec.PersistentVolumeSource, class)
	}
	hostDir := pv.Spec.HostPath.Path
	if class != "" && (!strings.HasPrefix(hostDir, testk8s.HostPathDir+"/") || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete) {
		t.Errorf("the provisioned volume: %s, reclaim %s; want one the provisioner made in %s, deleted with its claim", hostDir, pv.Spec.PersistentVolumeReclaimPolicy, testk8s.HostPathDir)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "kept")); err != nil {
		t.Errorf("the workspace on the node: %v", err)
	}

	must(t, "destroy", d.Destroy(ctx, spec.ID))
	// The driver removes its own volume's directory; a provisioner deletes
	// its volume once the claim is gone, in its own time.
	deadline = time.Now().Add(2 * time.Minute)
	for {
		_, err := os.Stat(hostDir)
		// Gone, or going (the protection finalizer may hold it a moment).
		v, perr := c.PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if errors.Is(err, os.ErrNotExist) && (perr != nil || v.DeletionTimestamp != nil) {
			break
		}
		if class == "" || time.Now().After(deadline) {
			t.Errorf("the workspace after destroy: directory %s: %v, volume %s: %v; want both gone", hostDir, err, pv.Name, perr)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The claim's protection finalizer may hold it a moment; it must be going.
	if claim, err := c.PersistentVolumeClaims(ns).Get(ctx, kubernetes.ClaimName(spec.ID), metav1.GetOptions{}); err == nil && claim.DeletionTimestamp == nil {
		t.Error("the workspace claim is still there after destroy")
	}
	if _, err := c.Secrets(ns).Get(ctx, kubernetes.PodName(spec.ID), metav1.GetOptions{}); err == nil {
		t.Error("the record is still there after destroy")
	}
}

// TestRuntimeRefused checks that a runtime whose RuntimeClass the cluster
// lacks is refused at create as an invalid argument, leaving nothing: on
// the cluster as it is (the test cluster offers every runtime when its
// gVisor shim is built), and on a driver whose gvisor class no cluster has.
func TestRuntimeRefused(t *testing.T) {
	t.Parallel()
	d, image, env := clusterDriverOn(t, true)
	absent, err := kubernetes.New(kubernetes.Config{
		Kubeconfig:       env.Kubeconfig,
		Namespace:        d.Namespace(),
		WorkspaceHostDir: t.TempDir(),
		PullPolicy:       corev1.PullNever,
		NodeRunDirs:      true,
		RuntimeClasses:   map[string]string{wire.RuntimeGVisor: "hotcell-no-such-class"},
	})
	must(t, "driver with an absent class", err)
	ctx := t.Context()
	refused := 0
	for _, d := range []*kubernetes.Driver{d, absent} {
		info, err := d.Info(ctx)
		must(t, "info", err)
		for _, rt := range wire.Runtimes() {
			if contains(info.Runtimes, rt) {
				continue
			}
			if info.RuntimeHints[rt] == "" {
				t.Errorf("runtime %s is missing without a hint", rt)
			}
			spec, _ := newBox(t, d, image)
			spec.Runtime = rt
			if err := d.Create(ctx, spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("create with runtime %s the cluster lacks: got %v, want invalid argument", rt, err)
			}
			if st, err := d.Inspect(ctx, spec.ID); err != nil || st.State != driver.BoxMissing {
				t.Errorf("after the refused create: inspect got %+v, %v; want missing", st, err)
			}
			refused++
		}
	}
	if refused == 0 {
		t.Error("no runtime was refused: the driver whose gvisor class is absent offered it")
	}
}

// TestRuntimeGVisor runs a box of runtime gvisor under the test cluster's
// RuntimeClass gvisor (gVisor's containerd shim, scripts/k8s) and checks
// from inside the box that its kernel is gVisor's, and a runc box's is not.
func TestRuntimeGVisor(t *testing.T) {
	t.Parallel()
	d, image, env := clusterDriverOn(t, true)
	env.RequireGVisor(t)
	ctx := t.Context()
	info, err := d.Info(ctx)
	must(t, "info", err)
	if !contains(info.Runtimes, wire.RuntimeGVisor) {
		t.Fatalf("the cluster has the RuntimeClass gvisor, but the driver offers %v (hints %v)", info.Runtimes, info.RuntimeHints)
	}
	for _, rt := range []string{wire.RuntimeGVisor, wire.RuntimeRunc} {
		spec, listen := newBox(t, d, image)
		spec.Runtime = rt
		must(t, "create "+rt, d.Create(ctx, spec))
		conn := listen()
		must(t, "start "+rt, d.Start(ctx, spec.ID))
		waitAgent(t, conn)
		pod, err := d.Client().CoreV1().Pods(d.Namespace()).Get(ctx, kubernetes.PodName(spec.ID), metav1.GetOptions{})
		must(t, "get pod", err)
		class := ""
		if pod.Spec.RuntimeClassName != nil {
			class = *pod.Spec.RuntimeClassName
		}
		out, err := env.Kubectl(ctx, nil, "-n", d.Namespace(), "exec", pod.Name, "-c", "box", "--", "cat", "/proc/version")
		must(t, "cat /proc/version in the "+rt+" box", err)
		gvisor := strings.Contains(out, "gvisor")
		switch {
		case rt == wire.RuntimeGVisor && (class != "gvisor" || !gvisor):
			t.Errorf("the gvisor box: runtime class %q, /proc/version %q; want gvisor and gVisor's kernel", class, out)
		case rt == wire.RuntimeRunc && (class != "" || gvisor):
			t.Errorf("the runc box: runtime class %q, /proc/version %q; want none and the host's kernel", class, out)
		}
		if st, err := d.Inspect(ctx, spec.ID); err != nil || st.Runtime != rt {
			t.Errorf("inspect of the %s box: got %+v, %v", rt, st, err)
		}
	}
}

// TestStartMissingImage checks that a box whose image no node has fails to
// start as not found, at once, and is left stopped with no pod.
func TestStartMissingImage(t *testing.T) {
	t.Parallel()
	d, image := clusterDriver(t)
	ctx := t.Context()
	spec, _ := newBox(t, d, image)
	spec.Image = "hotcell/never-imported:latest"
	spec.Persist = false
	must(t, "create", d.Create(ctx, spec))
	began := time.Now()
	if err := d.Start(ctx, spec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("start with a missing image: got %v, want not found", err)
	}
	t.Logf("the failed start took %s", time.Since(began).Round(time.Millisecond))
	if st, err := d.Inspect(ctx, spec.ID); err != nil || st.State != driver.BoxStopped {
		t.Errorf("after the failed start: inspect got %+v, %v; want stopped", st, err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
