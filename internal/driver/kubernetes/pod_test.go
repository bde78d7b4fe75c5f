package kubernetes

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func testDriver(cfg Config) *Driver { return NewWithClient(nil, cfg) }

func baseSpec() driver.Spec {
	return driver.Spec{
		ID: "sb-0123456789ab", Image: "hotcell/base:latest", Instance: "inst1",
		Env:    map[string]string{"B": "2", "A": "1", EnvSandboxID: "forged"},
		Labels: map[string]string{"team": "ml", "Owner/x": "not a label value!"},
		Limits: wire.Limits{MemoryMB: 512, CPUs: 1.5, PidsLimit: 256},
	}
}

// TestPodFor checks the pod a box runs as: the agent is PID 1 from the
// read-only agent volume, the box holds no cluster credential and keeps
// only hotcell's capabilities, and the spec's parts land where they
// belong.
func TestPodFor(t *testing.T) {
	t.Parallel()
	d := testDriver(Config{Namespace: "ns1", AgentImage: "hotcell/agent:v1", PullPolicy: corev1.PullNever})
	spec := baseSpec()
	spec.Persist = true
	spec.HostGateway = netip.MustParseAddr("10.244.0.1")
	spec.DNS = []netip.Addr{netip.MustParseAddr("10.244.0.1")}
	p, err := d.podFor(spec, "gvisor")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "hotcell-sb-0123456789ab" || p.Namespace != "ns1" {
		t.Errorf("pod %s/%s, want ns1/hotcell-sb-0123456789ab", p.Namespace, p.Name)
	}
	wantLabels := map[string]string{
		driver.LabelManaged: "true", driver.LabelID: spec.ID, driver.LabelInstance: "inst1",
		driver.LabelUserPrefix + "team": "ml", // Owner/x is not a valid label: annotation only
	}
	if diff := cmp.Diff(wantLabels, p.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if got := p.Annotations[annoLabels]; got != `{"Owner/x":"not a label value!","team":"ml"}` {
		t.Errorf("labels annotation: got %s", got)
	}
	ps := p.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token")
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		t.Error("the pod gets service links")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Error("the pod shares a host namespace")
	}
	if ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %s, want Never: a stopped box stays stopped", ps.RestartPolicy)
	}
	if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" {
		t.Errorf("runtime class %v, want gvisor", ps.RuntimeClassName)
	}
	if len(ps.HostAliases) != 1 || ps.HostAliases[0].IP != "10.244.0.1" || ps.HostAliases[0].Hostnames[0] != HostGateway {
		t.Errorf("host aliases %+v", ps.HostAliases)
	}
	if ps.DNSPolicy != corev1.DNSNone || ps.DNSConfig == nil || ps.DNSConfig.Nameservers[0] != "10.244.0.1" {
		t.Errorf("dns %s %+v", ps.DNSPolicy, ps.DNSConfig)
	}

	if len(ps.InitContainers) != 1 || len(ps.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want 1 and 1", len(ps.InitContainers), len(ps.Containers))
	}
	ic, c := ps.InitContainers[0], ps.Containers[0]
	if ic.Image != "hotcell/agent:v1" || strings.Join(ic.Command, " ") != "/hotcell-agent -install-to "+driver.AgentPath {
		t.Errorf("init container %s %v", ic.Image, ic.Command)
	}
	if c.Image != spec.Image || len(c.Command) != 1 || c.Command[0] != driver.AgentPath || c.Args != nil {
		t.Errorf("box container %s %v %v, want the agent as its only command", c.Image, c.Command, c.Args)
	}
	if c.ImagePullPolicy != corev1.PullNever || ic.ImagePullPolicy != corev1.PullNever {
		t.Errorf("pull policies %s %s, want Never", c.ImagePullPolicy, ic.ImagePullPolicy)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged != nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("box security context %+v: want no privilege escalation", sc)
	} else if diff := cmp.Diff([]corev1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
		t.Errorf("dropped capabilities (-want +got):\n%s", diff)
	} else if diff := cmp.Diff(Capabilities, sc.Capabilities.Add); diff != "" {
		t.Errorf("added capabilities (-want +got):\n%s", diff)
	}
	wantEnv := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: EnvSandboxID, Value: spec.ID}}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("memory limit %s, want 512Mi", got.String())
	}
	if got := c.Resources.Limits[corev1.ResourceCPU]; got.Cmp(resource.MustParse("1500m")) != 0 {
		t.Errorf("cpu limit %s, want 1500m", got.String())
	}

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts["/.hotcell/bin"]; !ok || !m.ReadOnly || m.Name != volumeAgent {
		t.Errorf("agent mount %+v: want the agent volume read-only", m)
	}
	if m, ok := mounts[WorkspaceDir]; !ok || m.Name != volumeWork {
		t.Errorf("workspace mount %+v", m)
	}
	if _, ok := mounts[driver.RunDir]; ok {
		t.Error("the run dir is mounted without NodeRunDirs")
	}
	for _, v := range ps.Volumes {
		if v.Name == volumeWork && (v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != ClaimName(spec.ID)) {
			t.Errorf("workspace volume of a persistent box %+v, want its claim", v.VolumeSource)
		}
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
	}
}

// TestPodForNodeRunDir checks the run dir of a box on the daemon's node:
// mounted read-only from the host, and only with NodeRunDirs.
func TestPodForNodeRunDir(t *testing.T) {
	t.Parallel()
	d := testDriver(Config{NodeRunDirs: true})
	spec := baseSpec()
	spec.HostRunDir = "/var/lib/hotcell/sandboxes/x/run"
	p, err := d.podFor(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.MountPath == driver.RunDir {
			found = true
			if !m.ReadOnly {
				t.Error("the run dir is mounted writable")
			}
		}
	}
	for _, v := range p.Spec.Volumes {
		if v.Name == volumeRun && (v.HostPath == nil || v.HostPath.Path != spec.HostRunDir) {
			t.Errorf("run volume %+v", v.VolumeSource)
		}
		if v.Name == volumeWork && v.EmptyDir == nil {
			t.Errorf("workspace of a box without persist %+v, want an emptyDir", v.VolumeSource)
		}
	}
	if !found {
		t.Error("no run dir mount")
	}
	if p.Spec.RuntimeClassName != nil {
		t.Errorf("runtime class %q without a runtime", *p.Spec.RuntimeClassName)
	}
	spec.HostRunDir = "relative/run"
	if _, err := d.podFor(spec, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("relative run dir: got %v, want invalid argument", err)
	}
}

// TestPodForRefuses checks that what the driver cannot do, or a spec that
// is wrong, is an invalid argument naming the field.
func TestPodForRefuses(t *testing.T) {
	t.Parallel()
	d := testDriver(Config{})
	for name, tc := range map[string]struct {
		mod   func(*driver.Spec)
		field string
	}{
		"no image":        {func(s *driver.Spec) { s.Image = "" }, "image"},
		"network":         {func(s *driver.Spec) { s.Network = driver.NetworkNone }, "network"},
		"negative memory": {func(s *driver.Spec) { s.Limits.MemoryMB = -1 }, "limits.memoryMb"},
		"bad env":         {func(s *driver.Spec) { s.Env = map[string]string{"A=B": "x"} }, "env"},
		"empty label key": {func(s *driver.Spec) { s.Labels = map[string]string{"": "x"} }, "labels"},
	} {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			tc.mod(&s)
			_, err := d.podFor(s, "")
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want an invalid argument naming %s", err, tc.field)
			}
		})
	}
}

func TestCheckID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"sb-0123456789ab": true, "a": true, "test-abc": true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false,
		strings.Repeat("a", 50): true, strings.Repeat("a", 51): false,
	} {
		if err := checkID(id); (err == nil) != ok {
			t.Errorf("checkID(%q): got %v, want ok %v", id, err, ok)
		}
	}
}

// TestPodStatus checks how a pod's state reads as a box's.
func TestPodStatus(t *testing.T) {
	t.Parallel()
	running := corev1.ContainerStatus{Name: containerBox, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	oom := corev1.ContainerStatus{Name: containerBox, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}
	for name, tc := range map[string]struct {
		pod       *corev1.Pod
		state     driver.BoxState
		exit      int
		oomKilled bool
	}{
		"no pod":  {nil, driver.BoxStopped, 0, false},
		"pending": {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, driver.BoxRunning, 0, false},
		"running": {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}}, driver.BoxRunning, 0, false},
		"oom":     {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{oom}}}, driver.BoxStopped, 137, true},
	} {
		st := podStatus("x", tc.pod)
		if st.State != tc.state || st.ExitCode != tc.exit || st.OOMKilled != tc.oomKilled {
			t.Errorf("%s: got %+v, want state %s exit %d oom %v", name, st, tc.state, tc.exit, tc.oomKilled)
		}
	}
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"hotcell/base":               "docker.io/hotcell/base:latest",
		"busybox":                    "docker.io/library/busybox:latest",
		"127.0.0.1:1/x/missing:v2":   "127.0.0.1:1/x/missing:v2",
		"registry.k8s.io/pause:3.10": "registry.k8s.io/pause:3.10",
	} {
		got, err := normalize(in)
		if err != nil || got != want {
			t.Errorf("normalize(%q): got %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := normalize("has space"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("normalize of a bad ref: got %v, want invalid argument", err)
	}
}

// TestPodForAgentDial checks where the TCP channel's dial file goes: the
// record Secret's one key, mounted read-only at the run dir with mode
// 0400, in place of the node's run dir, and nowhere in the pod's env.
func TestPodForAgentDial(t *testing.T) {
	t.Parallel()
	d := testDriver(Config{NodeRunDirs: true})
	spec := baseSpec()
	spec.HostRunDir = "/var/lib/hotcell/sandboxes/x/run"
	spec.AgentDial = &driver.AgentDial{Addr: "10.244.0.1:7443", CertPEM: "cert", Sandbox: spec.ID, Token: "secret-token"}
	p, err := d.podFor(spec, "")
	if err != nil {
		t.Fatal(err)
	}
	var vol *corev1.Volume
	for i, v := range p.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path; the dial file replaces the node's run dir", v.Name)
		}
		if v.Name == volumeRun {
			vol = &p.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != PodName(spec.ID) {
		t.Fatalf("run volume %+v, want the record Secret", vol)
	}
	if len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != driver.AgentDialFile || *vol.Secret.Items[0].Mode != 0o400 {
		t.Errorf("run volume items %+v, want only %s, mode 0400", vol.Secret.Items, driver.AgentDialFile)
	}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.Name == volumeRun && (m.MountPath != driver.RunDir || !m.ReadOnly) {
			t.Errorf("run mount %+v, want read-only at %s", m, driver.RunDir)
		}
	}
	for _, e := range p.Spec.Containers[0].Env {
		if strings.Contains(e.Value, "secret-token") {
			t.Errorf("env %s carries the credential", e.Name)
		}
	}
}

func TestPodState(t *testing.T) {
	t.Parallel()
	due := metav1.NewTime(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &due},
		Status: corev1.PodStatus{
			Phase:                 corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: containerBox, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: due}}}},
		},
	}
	want := "phase Running, deletion due 2026-12-05T10:00:00Z, container agent exited 0 (Completed), container box running since 2026-12-05T10:00:00Z"
	if got := podState(p); got != want {
		t.Errorf("podState:\n got %s\nwant %s", got, want)
	}
}
