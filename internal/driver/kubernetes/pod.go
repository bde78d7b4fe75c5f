package kubernetes

import (
	"encoding/json"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// WorkspaceDir is where the workspace is mounted and where the agent starts.
const WorkspaceDir = "/workspace"

// EnvSandboxID names the sandbox inside the box.
const EnvSandboxID = "HOTCELL_SANDBOX_ID"

// HostGateway is the name under which the box reaches the host running
// the daemon (the LLM gateway listens there), as on Docker.
const HostGateway = "host.docker.internal"

// AgentInImage is where the hotcell/agent image keeps the agent binary.
const AgentInImage = "/hotcell-agent"

// Container and volume names inside a box's pod.
const (
	containerBox   = "box"
	containerAgent = "agent-install"
	volumeAgent    = "agent"
	volumeWork     = "workspace"
	volumeRun      = "run"
)

// Annotations on the pod and its record.
const (
	// annoLabels holds the user labels as JSON: a label that is not valid
	// as a Kubernetes label (a key with upper-case letters before a '/', a
	// long or free-form value) is kept there whole.
	annoLabels = "hotcell.labels"
	// annoRuntime is the hotcell runtime the box was created with.
	annoRuntime = "hotcell.runtime"
)

// Capabilities is the capability set of a box's container, as on Docker
// (docker.Capabilities says why each is kept and the rest dropped).
var Capabilities = []corev1.Capability{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID",
}

// podFor translates a spec into the pod of its box; runtimeClass is the
// RuntimeClass it runs under (empty for the cluster's default).
func (d *Driver) podFor(spec driver.Spec, runtimeClass string) (*corev1.Pod, error) {
	if spec.Image == "" {
		return nil, errdefs.Invalid("image", "image is empty")
	}
	if spec.Network != "" {
		return nil, errdefs.Invalid("network", "the kubernetes driver cannot put a box on network %q: egress control on Kubernetes is not built yet", spec.Network)
	}
	env, err := envVars(spec)
	if err != nil {
		return nil, err
	}
	res, err := resources(spec)
	if err != nil {
		return nil, err
	}
	labels, annotations, err := podLabels(spec)
	if err != nil {
		return nil, err
	}
	if spec.Egress != nil {
		if annotations[AnnoEgress], err = encodeEgress(spec.Egress); err != nil {
			return nil, err
		}
	}

	agentDir := path.Dir(driver.AgentPath)
	volumes := []corev1.Volume{
		// The agent binary, copied in by the init container; a few MiB.
		{Name: volumeAgent, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(64<<20, resource.BinarySI)}}},
	}
	if spec.Persist {
		volumes = append(volumes, corev1.Volume{Name: volumeWork, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(spec.ID)},
		}})
	} else {
		volumes = append(volumes, corev1.Volume{Name: volumeWork, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	mounts := []corev1.VolumeMount{
		{Name: volumeAgent, MountPath: agentDir, ReadOnly: true},
		{Name: volumeWork, MountPath: WorkspaceDir},
	}
	switch {
	case spec.AgentDial != nil:
		// The TCP channel's dial file, from the box's record Secret: a
		// tmpfs mount readable by the box's root only, never in its root
		// filesystem or env (driver.AgentDialFile says why).
		mode := int32(0o400)
		volumes = append(volumes, corev1.Volume{Name: volumeRun, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{
				SecretName:  PodName(spec.ID),
				Items:       []corev1.KeyToPath{{Key: driver.AgentDialFile, Path: driver.AgentDialFile, Mode: &mode}},
				DefaultMode: &mode,
			},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: volumeRun, MountPath: driver.RunDir, ReadOnly: true})
	case d.cfg.NodeRunDirs && spec.HostRunDir != "":
		if !filepath.IsAbs(spec.HostRunDir) {
			return nil, errdefs.Invalid("hostRunDir", "path %q is not absolute", spec.HostRunDir)
		}
		dirType := corev1.HostPathDirectory
		volumes = append(volumes, corev1.Volume{Name: volumeRun, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: spec.HostRunDir, Type: &dirType},
		}})
		// Read-only, as on Docker: nothing inside can replace or plant a
		// path that the daemon connects to.
		mounts = append(mounts, corev1.VolumeMount{Name: volumeRun, MountPath: driver.RunDir, ReadOnly: true})
	}

	no, yes := false, true
	nobody := int64(65534)
	grace := int64(10)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(spec.ID),
			Namespace:   d.cfg.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			Hostname:      hostname(spec.ID),
			RestartPolicy: corev1.RestartPolicyNever,
			// A box holds no credential of the cluster, and learns nothing
			// of its services from its environment.
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       volumes,
			InitContainers: []corev1.Container{{
				Name:            containerAgent,
				Image:           d.cfg.AgentImage,
				ImagePullPolicy: d.cfg.PullPolicy,
				Command:         []string{AgentInImage, "-install-to", driver.AgentPath},
				// The agent image's WORKDIR (/workspace) is not in it, and
				// its root filesystem is read-only: runc makes the directory
				// anyway, gVisor refuses to start the container.
				WorkingDir:   "/",
				VolumeMounts: []corev1.VolumeMount{{Name: volumeAgent, MountPath: agentDir}},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                &nobody,
					RunAsGroup:               &nobody,
					RunAsNonRoot:             &yes,
					ReadOnlyRootFilesystem:   &yes,
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
			Containers: []corev1.Container{{
				Name:            containerBox,
				Image:           d.pullRef(spec.Image),
				ImagePullPolicy: d.pullPolicy(spec.Image),
				// The agent is PID 1: it reaps zombies and forwards signals
				// itself, and the image's own entrypoint never runs.
				Command:      []string{driver.AgentPath},
				WorkingDir:   WorkspaceDir,
				Env:          env,
				Resources:    res,
				VolumeMounts: mounts,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: slices.Clone(Capabilities)},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	if d.cfg.RegistrySecret != "" {
		// The kubelet's, for the images hotcell made; the box never sees it.
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: d.cfg.RegistrySecret}}
	}
	if spec.HostGateway.IsValid() {
		pod.Spec.HostAliases = []corev1.HostAlias{{IP: spec.HostGateway.String(), Hostnames: []string{HostGateway}}}
	}
	if len(spec.DNS) > 0 {
		pod.Spec.DNSPolicy = corev1.DNSNone
		cfg := &corev1.PodDNSConfig{}
		for _, a := range spec.DNS {
			cfg.Nameservers = append(cfg.Nameservers, a.String())
		}
		pod.Spec.DNSConfig = cfg
	}
	return pod, nil
}

// podLabels returns the pod's labels (the managed ones, and each user
// label that Kubernetes takes as one) and annotations (every user label).
func podLabels(spec driver.Spec) (map[string]string, map[string]string, error) {
	labels := managedLabels(spec.ID, spec.Instance)
	annotations := map[string]string{}
	if len(spec.Labels) > 0 {
		for k, v := range spec.Labels {
			if k == "" {
				return nil, nil, errdefs.Invalid("labels", "label key is empty")
			}
			key := driver.LabelUserPrefix + k
			if len(validation.IsQualifiedName(key)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
				labels[key] = v
			}
		}
		b, err := json.Marshal(spec.Labels)
		if err != nil {
			return nil, nil, fmt.Errorf("encode labels: %w", err)
		}
		annotations[annoLabels] = string(b)
	}
	if spec.Runtime != "" {
		annotations[annoRuntime] = spec.Runtime
	}
	return labels, annotations, nil
}

// envVars returns spec.Env sorted by name, so the same spec always makes
// the same pod, plus the sandbox id.
func envVars(spec driver.Spec) ([]corev1.EnvVar, error) {
	list, err := cmdspec.EnvList("env", spec.Env)
	if err != nil {
		return nil, err
	}
	slices.Sort(list)
	var env []corev1.EnvVar
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		if k == EnvSandboxID {
			continue // ours wins
		}
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	return append(env, corev1.EnvVar{Name: EnvSandboxID, Value: spec.ID}), nil
}

// resources turns the limits into the box container's limits; Kubernetes
// makes the requests equal to them, so a box gets what it may use.
func resources(spec driver.Spec) (corev1.ResourceRequirements, error) {
	var r corev1.ResourceRequirements
	l := spec.Limits
	if err := driver.CheckLimits(l); err != nil {
		return r, err
	}
	// A pod has no pids limit of its own: the kubelet's podPidsLimit
	// bounds every pod of the node (docs/kubernetes.md).
	limits := corev1.ResourceList{}
	if l.MemoryMB > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryMB<<20, resource.BinarySI)
	}
	if l.CPUs > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(1, int64(math.Round(l.CPUs*1000))), resource.DecimalSI)
	}
	if len(limits) > 0 {
		r.Limits = limits
	}
	return r, nil
}

// hostname derives a valid RFC 1123 label from the id (checkID allows
// only such ids already).
func hostname(id string) string { return id }
