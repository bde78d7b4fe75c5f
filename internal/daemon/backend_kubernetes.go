package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/sandbox"
)

// openKubernetes connects to the cluster of the [kubernetes] settings and
// checks that the namespace is there. Template builds and the workspace
// disks are Docker's: the backend has neither, and each is refused where
// it is asked for; snapshots need kubernetes_registry (kubeImages). Egress is enforced by hotcell egress-node
// on the nodes when kubernetes_egress_resolver is set (egress_kubernetes.go),
// else only mode open is served.
func openKubernetes(ctx context.Context, cfg config.Config, log *slog.Logger) (*backend, error) {
	drv, err := kubernetes.New(kubernetes.Config{
		Kubeconfig:       cfg.KubeKubeconfig,
		Namespace:        cfg.KubeNamespace,
		StorageClass:     cfg.KubeStorageClass,
		WorkspaceHostDir: cfg.KubeWorkspaceHostDir,
		AgentImage:       cfg.KubeAgentImage,
		PullPolicy:       corev1.PullPolicy(cfg.KubePullPolicy),
		Egress:           kubeEgressConfig(cfg, log),
		Registry:         cfg.KubeRegistry,
		RegistryURL:      cfg.KubeRegistryURL,
		RegistrySecret:   cfg.KubeRegistrySecret,
	})
	if err != nil {
		return nil, err
	}
	info, err := drv.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reach the Kubernetes API server (kubernetes_kubeconfig %q; empty is the in-cluster config, then KUBECONFIG): %w", cfg.KubeKubeconfig, err)
	}
	if _, err := drv.Client().CoreV1().Namespaces().Get(ctx, cfg.KubeNamespace, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("config: kubernetes_namespace %q: the cluster has no such namespace: create it (kubectl create namespace %s) or name another (from %s)",
				cfg.KubeNamespace, cfg.KubeNamespace, cfg.Source("kubernetes_namespace"))
		}
		// A credential limited to its namespace may not read namespaces;
		// the first create says what is wrong then.
		log.Warn("could not check the kubernetes namespace", "namespace", cfg.KubeNamespace, "err", err)
	}
	log.Info("kubernetes cluster", "version", info.EngineVersion, "namespace", cfg.KubeNamespace,
		"runtimes", info.Runtimes, "agent_image", cfg.KubeAgentImage, "pull_policy", cfg.KubePullPolicy)
	if cfg.KubeRegistry != "" && cfg.KubeRegistrySecret == "" {
		log.Warn("kubernetes_registry takes calls without credentials: a sandbox that reaches it could read or replace the snapshots' and templates' images. Set kubernetes_registry_secret, or keep the registry out of sandboxes' reach (kubernetes_egress_resolver: mode open reaches no private address)",
			"registry", cfg.KubeRegistry)
	}
	if !slices.Contains(info.Runtimes, cfg.DefaultRuntime) {
		log.Warn("the default runtime is not available: creates that name no runtime fail until it is",
			"default_runtime", cfg.DefaultRuntime, "hint", info.RuntimeHints[cfg.DefaultRuntime])
	}
	return &backend{
		name: kubernetes.Name,
		drv:  drv,
		kube: drv,
		// A claim asks for the sandbox's disk size, but whether writes
		// stop there is up to the StorageClass's volumes (a hostPath one
		// of the workspace host dir has no size at all): not promised.
		diskLimitEnforced: func() bool { return false },
		podAddr:           drv.PodAddr,
		startEgress: func(_ context.Context, cfg config.Config, _ int, log *slog.Logger) (egressControl, error) {
			return startKubeEgress(cfg, drv, log)
		},
		close: func() {},
	}, nil
}

// kubeImages are the images the Kubernetes driver makes in its registry:
// snapshots, templates saved from a sandbox, and template builds, which
// run in a sandbox (build_kubernetes.go).
type kubeImages struct {
	drv *kubernetes.Driver
	mgr **sandbox.Manager
	cfg config.Config
}

func (k kubeImages) Commit(ctx context.Context, id, ref string, labels map[string]string) error {
	return k.drv.Commit(ctx, id, ref, labels)
}

func (k kubeImages) RemoveImage(ctx context.Context, ref string) error {
	return (*k.mgr).RemoveImage(ctx, ref, k.drv.RemoveImage)
}
