package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/wire"
)

// poolNamePattern is a template name (internal/templates.ValidateName).
var poolNamePattern = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*$`)

// PoolMap parses Pools into each template's pool configuration. Validate
// has checked it.
func (c Config) PoolMap() map[string]wire.PoolConfig {
	m, _ := parsePools(c.Pools)
	return m
}

// parsePools parses "name=min[:max[:rate]],...". The ranges are checked
// where pools are configured (sandbox.ValidatePoolConfig) as well; here
// only the syntax and the obvious.
func parsePools(s string) (map[string]wire.PoolConfig, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	m := map[string]wire.PoolConfig{}
	for _, item := range strings.Split(s, ",") {
		name, spec, ok := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not name=min[:max[:rate]]", item)
		}
		if len(name) > 63 || !poolNamePattern.MatchString(name) {
			return nil, fmt.Errorf("%q is not a template name", name)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("template %q is given twice", name)
		}
		parts := strings.Split(strings.TrimSpace(spec), ":")
		if len(parts) > 3 {
			return nil, fmt.Errorf("pool of %q: %q is not min[:max[:rate]]", name, spec)
		}
		var cfg wire.PoolConfig
		var err error
		if cfg.Min, err = strconv.Atoi(parts[0]); err != nil || cfg.Min < 0 {
			return nil, fmt.Errorf("pool of %q: min %q is not a count", name, parts[0])
		}
		if len(parts) > 1 {
			if cfg.Max, err = strconv.Atoi(parts[1]); err != nil || cfg.Max < cfg.Min {
				return nil, fmt.Errorf("pool of %q: max %q is not a count of at least min", name, parts[1])
			}
		}
		if len(parts) > 2 {
			if cfg.RefillPerSecond, err = strconv.ParseFloat(parts[2], 64); err != nil || !(cfg.RefillPerSecond > 0) || cfg.RefillPerSecond > 100 {
				return nil, fmt.Errorf("pool of %q: refill rate %q is not a number of boxes per second in (0, 100]", name, parts[2])
			}
		}
		m[name] = cfg
	}
	return m, nil
}
