package config

import (
	"regexp"
	"slices"
	"strings"

	"github.com/hotcell/hotcell/internal/wire"
)

// DefaultGVisorEngineRuntime is the engine runtime (daemon.json's
// "runtimes" key) that runs gVisor sandboxes; scripts/lib.sh registers
// runsc under it.
const DefaultGVisorEngineRuntime = "runsc"

// engineRuntimeName is what the Docker Engine accepts as a runtime name.
var engineRuntimeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// validateRuntime checks the runtime settings.
func (c *Config) validateRuntime(bad func(key string, value any, format string, args ...any) error) error {
	c.DefaultRuntime = strings.ToLower(c.DefaultRuntime)
	if !slices.Contains(wire.Runtimes(), c.DefaultRuntime) {
		return bad("default_runtime", c.DefaultRuntime, "must be %s", strings.Join(wire.Runtimes(), " or "))
	}
	if !engineRuntimeName.MatchString(c.GVisorEngineRuntime) {
		return bad("gvisor_engine_runtime", c.GVisorEngineRuntime, "must be the name of an engine runtime (letters, digits, '.', '_', '-'), as in daemon.json's \"runtimes\"")
	}
	return nil
}
