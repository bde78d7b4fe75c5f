package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	dockerclient "github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/wire"
)

// openDocker connects to the Docker Engine and gives the driver its
// runtimes, its build limits and the workspace disks.
func openDocker(ctx context.Context, cfg config.Config, log *slog.Logger) (*backend, error) {
	var dopts []dockerclient.Opt
	if cfg.DockerHost != "" {
		dopts = append(dopts, dockerclient.WithHost(cfg.DockerHost))
	}
	drv, err := docker.New(dopts...)
	if err != nil {
		return nil, err
	}
	drv.UseEngineRuntime(wire.RuntimeGVisor, cfg.GVisorEngineRuntime)
	drv.UseBuildLimits(docker.BuildLimits{
		MemoryBytes: cfg.TemplateBuildLimits.MemoryMB << 20, CPUs: cfg.TemplateBuildLimits.CPUs, Network: cfg.TemplateBuildNetwork,
	})
	info, err := drv.Info(ctx)
	if err != nil {
		drv.Close()
		return nil, fmt.Errorf("reach the Docker Engine (is dockerd running? start it, or run scripts/serve which does): %w", err)
	}
	log.Info("docker engine", "version", info.EngineVersion, "runtimes", info.Runtimes)
	if !slices.Contains(info.Runtimes, cfg.DefaultRuntime) {
		// Still served: sandboxes that exist keep working, and a create
		// that names a runtime the engine has succeeds.
		log.Warn("the default runtime is not available: creates that name no runtime fail until it is",
			"default_runtime", cfg.DefaultRuntime, "hint", info.RuntimeHints[cfg.DefaultRuntime])
	}
	disks := openWorkspaceDisks(ctx, cfg.DataDir, drv, log)
	return &backend{
		name:              docker.Name,
		drv:               drv,
		docker:            drv,
		diskLimitEnforced: drv.WorkspaceDisksEnforced,
		startEgress: func(ctx context.Context, cfg config.Config, agentPort int, log *slog.Logger) (egressControl, error) {
			c, err := startEgress(ctx, cfg, drv, agentPort, log)
			if err != nil {
				return nil, err // not a nil *Controller in an interface
			}
			return c, nil
		},
		close: func() {
			if disks != nil {
				disks.Close() // waits for a spare image being made
			}
			drv.Close()
		},
	}, nil
}
