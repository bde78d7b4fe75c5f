// Package kubernetes is hotcell's Kubernetes driver. A sandbox's box is a pod
// in one namespace whose PID 1 is the agent, and what outlives the pod: a
// Secret that records the box (its pod, made again at each start) and,
// for a persistent sandbox, the PersistentVolumeClaim of its workspace.
// Stop deletes the pod and keeps the rest; Start makes the pod again from
// the record, on the same claim.
//
// The agent binary reaches any user image without a registry: an init
// container of the small hotcell/agent image (AgentImageArchive) copies it
// into an emptyDir that the box mounts read-only at driver.AgentPath's
// directory.
//
// Every object it creates carries driver.LabelManaged, driver.LabelID and
// driver.LabelInstance, so a reconciler finds what hotcell owns after a
// daemon restart.
package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.InstanceLister = (*Driver)(nil)
	_ driver.EventWatcher   = (*Driver)(nil)
	_ driver.Prober         = (*Driver)(nil)
)

// Name is the driver's name in driver.Info.
const Name = "kubernetes"

// Defaults of Config.
const (
	DefaultNamespace     = "hotcell"
	DefaultAgentImage    = "hotcell/agent:latest"
	DefaultWorkspaceSize = 10 << 30
	DefaultStartTimeout  = 2 * time.Minute
)

// Config says which cluster the driver uses and how it lays a box out.
type Config struct {
	// Kubeconfig is the kubeconfig file; empty uses the in-cluster
	// config, then $KUBECONFIG and ~/.kube/config.
	Kubeconfig string
	// Namespace holds every object of the driver's boxes (it must exist).
	Namespace string
	// StorageClass is the class of the workspaces' claims; empty for the
	// cluster's default class.
	StorageClass string
	// WorkspaceHostDir, when set, makes the driver provision each
	// workspace itself: a hostPath PersistentVolume under this directory,
	// bound to the claim, removed with the sandbox. It is for a
	// single-node cluster whose node is the daemon's host (the test
	// cluster has no provisioner); elsewhere leave it empty and let the
	// StorageClass's provisioner make the volumes.
	WorkspaceHostDir string
	// WorkspaceSize is a claim's size when the sandbox has no disk limit.
	WorkspaceSize int64
	// AgentImage is the image whose /hotcell-agent the init container
	// copies into the box.
	AgentImage string
	// PullPolicy is every container's image pull policy; Never on a
	// cluster without a registry, where EnsureImage then checks that a
	// node has the image.
	PullPolicy corev1.PullPolicy
	// NodeRunDirs mounts a spec's HostRunDir into the pod with a hostPath
	// volume, read-only at driver.RunDir, so the agent dials the daemon's
	// unix socket as on Docker. It needs the daemon on the pod's node (a
	// single-node cluster); a spec that names a network dial address does
	// not need it.
	NodeRunDirs bool
	// RuntimeClasses maps hotcell runtimes (wire.Runtime*) to the
	// RuntimeClass a box of that runtime runs under; a runtime missing
	// here runs under the cluster's default. Nil is
	// {gvisor: "gvisor"}.
	RuntimeClasses map[string]string
	// StartTimeout bounds how long Start waits for a pod to run.
	StartTimeout time.Duration
	// Egress says what becomes of a spec's egress policy (egress.go).
	Egress EgressConfig
	// Registry is where the driver keeps the images it makes (snapshots,
	// templates saved from a sandbox), as the nodes pull from it:
	// host[:port][/path]. RegistryURL is the endpoint the driver pushes
	// to (http(s)://host[:port]; empty: https:// Registry's host). With
	// no Registry the driver makes no images (snapshot.go).
	Registry, RegistryURL string
	// RegistrySecret names a Secret of type kubernetes.io/dockerconfigjson
	// in Namespace with Registry's credentials: the driver pushes with
	// them, and pods pull with it as their image pull secret. Empty: the
	// registry takes calls without credentials.
	RegistrySecret string
	// MaxImageBytes bounds the tar of a root filesystem the driver
	// pushes (DefaultMaxImageBytes when 0).
	MaxImageBytes int64
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.AgentImage == "" {
		c.AgentImage = DefaultAgentImage
	}
	if c.WorkspaceSize <= 0 {
		c.WorkspaceSize = DefaultWorkspaceSize
	}
	if c.PullPolicy == "" {
		c.PullPolicy = corev1.PullIfNotPresent
	}
	if c.RuntimeClasses == nil {
		c.RuntimeClasses = map[string]string{wire.RuntimeGVisor: "gvisor"}
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return c
}

// Driver drives one namespace of a Kubernetes cluster. It is safe for
// concurrent use.
type Driver struct {
	c   k8s.Interface
	cfg Config
	// reg is Config.Registry's, nil without one (or a bad one: regErr).
	reg    *registry
	regErr error
	agents agents
	// bases are the indexes of the made images commits built on lately.
	bases bases
}

// RESTConfig loads the client config that cfg names.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (set kubeconfig in the daemon's config or KUBECONFIG): %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return rc, nil
}

// New connects to the cluster cfg names. It does not call the cluster:
// Info or Probe does.
func New(cfg Config) (*Driver, error) {
	rc, err := RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "hotcell"
	c, err := NewClient(rc)
	if err != nil {
		return nil, err
	}
	d := NewWithClient(c, cfg)
	if d.regErr != nil {
		return nil, d.regErr
	}
	return d, nil
}

// NewClient makes a cluster client from rc.
func NewClient(rc *rest.Config) (k8s.Interface, error) {
	// A create burst is several calls per sandbox; client-go's default of
	// 5 per second would queue them.
	rc.QPS, rc.Burst = 100, 200
	c, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// NewWithClient returns a driver that uses c.
// A bad Config.Registry leaves the driver without one (New refuses it).
func NewWithClient(c k8s.Interface, cfg Config) *Driver {
	d := &Driver{c: c, cfg: cfg.withDefaults()}
	if cfg.Registry != "" {
		d.reg, d.regErr = newRegistry(cfg.Registry, cfg.RegistryURL)
		if d.reg != nil && cfg.RegistrySecret != "" {
			d.reg.creds = d.registryCreds
		}
	}
	return d
}

// Client returns the cluster client, for tests and tools that look at what
// the driver made.
func (d *Driver) Client() k8s.Interface { return d.c }

// Namespace is where the driver's objects live.
func (d *Driver) Namespace() string { return d.cfg.Namespace }

// Info describes the cluster: its version, and the CPUs and memory its
// nodes can give to pods.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	v, err := d.c.Discovery().ServerVersion()
	if err != nil {
		return driver.Info{}, classify("kubernetes server version", err)
	}
	nodes, err := d.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return driver.Info{}, classify("list nodes", err)
	}
	info := driver.Info{Name: Name, EngineVersion: v.GitVersion}
	for _, n := range nodes.Items {
		if c, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
			info.CPUs += int(c.Value())
		}
		if m, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
			info.MemoryBytes += m.Value()
		}
	}
	info.Runtimes, info.RuntimeHints, err = d.runtimes(ctx)
	if err != nil {
		return driver.Info{}, err
	}
	return info, nil
}

// runtimes reports the hotcell runtimes the cluster can run: runc (the
// cluster's default runtime) always, and each other one whose RuntimeClass
// exists.
func (d *Driver) runtimes(ctx context.Context) (have []string, hints map[string]string, err error) {
	hints = map[string]string{}
	for _, rt := range wire.Runtimes() {
		class, ok := d.cfg.RuntimeClasses[rt]
		if !ok {
			have = append(have, rt)
			continue
		}
		_, err := d.c.NodeV1().RuntimeClasses().Get(ctx, class, metav1.GetOptions{})
		switch {
		case err == nil:
			have = append(have, rt)
		case isNotFound(err):
			hints[rt] = fmt.Sprintf("the cluster has no RuntimeClass %q: install the runtime on the nodes and create the RuntimeClass (see docs/kubernetes.md)", class)
		default:
			return nil, nil, classify("get runtimeclass "+class, err)
		}
	}
	return have, hints, nil
}

// validID accepts ids that are safe in every object name the driver makes
// (DNS labels, at most 63 with the prefixes and suffixes added) and as a
// label value. The manager generates ids; this guards the cluster against
// anything else reaching it.
var validID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$`)

func checkID(id string) error {
	if !validID.MatchString(id) {
		return errdefs.Invalid("id", "sandbox id %q must be 1-50 lower-case letters, digits and '-', starting and ending with a letter or digit", id)
	}
	return nil
}

// PodName is the name of sandbox id's pod; its record Secret has the same.
func PodName(id string) string { return "hotcell-" + id }

// ClaimName is the name of sandbox id's workspace claim.
func ClaimName(id string) string { return "hotcell-" + id + "-workspace" }

// volumeName is the name of the PersistentVolume the driver makes for
// sandbox id's workspace (WorkspaceHostDir): volumes are cluster-wide, so
// it names the namespace too.
func (d *Driver) volumeName(id string) string {
	return "hotcell-" + d.cfg.Namespace + "-" + id + "-workspace"
}

// managedLabels are the labels every object of sandbox id carries.
func managedLabels(id, instance string) map[string]string {
	l := map[string]string{driver.LabelManaged: "true", driver.LabelID: id}
	if instance != "" {
		l[driver.LabelInstance] = instance
	}
	return l
}

func instanceSelector(instance string) string {
	sel := driver.LabelManaged + "=true"
	if instance != "" {
		sel += "," + driver.LabelInstance + "=" + instance
	}
	return sel
}

func sortedIDs(ids []string) []string {
	slices.Sort(ids)
	return slices.Compact(ids)
}

func cloneLabels(m map[string]string) map[string]string { return maps.Clone(m) }
