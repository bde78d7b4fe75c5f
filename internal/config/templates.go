package config

import (
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// Shipped bounds of a template build: the engine runs its RUN steps as
// containers on the host, so a build is bounded like a sandbox is.
var (
	DefaultTemplateBuildTimeout = 30 * time.Minute
	DefaultTemplateBuildLimits  = wire.Limits{MemoryMB: 4096, CPUs: 2}
)

// Template build networks.
const (
	BuildNetworkDefault = "default" // the engine's default bridge: RUN steps reach what the host reaches
	BuildNetworkNone    = "none"    // no network: only what the context and the FROM image hold
)

// validateTemplates checks the template build settings.
func (c *Config) validateTemplates(bad func(key string, value any, format string, args ...any) error) error {
	if c.TemplateBuildTimeout <= 0 {
		return bad("template_build_timeout", c.TemplateBuildTimeout, "must be greater than 0")
	}
	l := c.TemplateBuildLimits
	if l.PidsLimit != 0 || l.DiskMB != 0 {
		return bad("template_build_limits", FormatLimits(l), "only memory and cpus apply to builds")
	}
	if l.MemoryMB < 0 || (l.MemoryMB > 0 && l.MemoryMB < 64) || l.CPUs < 0 {
		return bad("template_build_limits", FormatLimits(l), "memory must be 0 (none) or at least 64 MiB, cpus not negative")
	}
	switch c.TemplateBuildNetwork {
	case BuildNetworkDefault, BuildNetworkNone:
	default:
		return bad("template_build_network", c.TemplateBuildNetwork, "must be %s or %s", BuildNetworkDefault, BuildNetworkNone)
	}
	return nil
}
