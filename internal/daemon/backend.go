package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// backend is what sandboxes run on (config driver): the driver and the
// parts of the daemon that depend on which driver it is. A part a driver
// lacks is refused with an error that says so, never switched off
// without a word.
type backend struct {
	// name is the driver's name, as /v1/host and the errors say it.
	name string
	drv  interface {
		driver.Driver
		driver.Statter
	}
	// docker is the Docker driver, nil on another: template builds,
	// snapshots and the egress network are made with it.
	docker *docker.Driver
	// kube is the Kubernetes driver, nil on another.
	kube *kubernetes.Driver
	// diskLimitEnforced says limits.diskMb holds for /workspace.
	diskLimitEnforced func() bool
	// podAddr is the address of a sandbox's running pod (the Kubernetes
	// driver's), which the LLM gateway checks calls against; nil on Docker.
	podAddr func(ctx context.Context, id string) (netip.Addr, error)
	// startEgress puts the driver's egress control up (egress.go).
	startEgress func(ctx context.Context, cfg config.Config, agentPort int, log *slog.Logger) (egressControl, error)
	close       func()
}

// openBackend connects to the driver the config names.
func openBackend(ctx context.Context, cfg config.Config, log *slog.Logger) (*backend, error) {
	if cfg.Kubernetes() {
		return openKubernetes(ctx, cfg, log)
	}
	return openDocker(ctx, cfg, log)
}

// noImageBuilds is the template builder of a driver that cannot build
// images: a build is refused (501) and there is no built image to remove.
type noImageBuilds struct{ driver string }

func (n noImageBuilds) BuildImage(context.Context, string, string, map[string]string, io.Reader, driver.Progress) error {
	return fmt.Errorf("template builds on %s need a registry to keep the image in: set kubernetes_registry, or register an image the cluster can pull instead (POST /v1/templates?name=N&image=REF, hotcell template build -t N --image REF; docs/kubernetes.md): %w", n.driver, errdefs.ErrNotImplemented)
}

func (noImageBuilds) RemoveImage(context.Context, string) error { return nil }
