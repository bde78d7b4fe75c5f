package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/wire"
)

// Shipped limits: defaults safe for a small host, and no maximum. A field
// is unlimited only when the operator says so ("memory=unlimited" or 0).
var (
	DefaultSandboxLimits = wire.Limits{MemoryMB: 2048, CPUs: 1, PidsLimit: 1024, DiskMB: 10240}
	DefaultMaxLimits     = wire.Limits{}
)

// Bounds of a limit the daemon can apply; requests are held to the same.
const (
	MinLimitMemoryMB = 16
	MinLimitPids     = 16
	maxLimitMB       = 1 << 30
	maxLimitPids     = 1 << 22
	maxLimitCPUs     = 1024
)

const limitsSyntax = `comma-separated memory=SIZE, cpus=N, pids=N, disk=SIZE (SIZE in MiB or with MiB/GiB/TiB; 0 or "unlimited" for none), or "unlimited"`

// parseLimits reads "memory=2GiB,cpus=1,pids=1024,disk=10GiB". Fields it
// does not name keep base's value, so an operator who only lowers memory
// keeps the other shipped defaults; "unlimited" alone clears every field.
func parseLimits(raw string, base wire.Limits) (wire.Limits, error) {
	raw = strings.TrimSpace(raw)
	if strings.EqualFold(raw, "unlimited") {
		return wire.Limits{}, nil
	}
	l := base
	seen := map[string]bool{}
	for _, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || v == "" {
			return l, fmt.Errorf("%q: want key=value", part)
		}
		if seen[k] {
			return l, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		unlimited := strings.EqualFold(v, "unlimited")
		var err error
		switch k {
		case "memory":
			l.MemoryMB, err = parseMB(v, unlimited)
		case "disk":
			l.DiskMB, err = parseMB(v, unlimited)
		case "pids":
			l.PidsLimit = 0
			if !unlimited {
				l.PidsLimit, err = strconv.ParseInt(v, 10, 64)
			}
		case "cpus":
			l.CPUs = 0
			if !unlimited {
				l.CPUs, err = strconv.ParseFloat(v, 64)
			}
		default:
			return l, fmt.Errorf("unknown limit %q (want memory, cpus, pids or disk)", k)
		}
		if err != nil {
			return l, fmt.Errorf("%s %q: not a number", k, v)
		}
	}
	return l, nil
}

// parseMB reads a size in MiB: a bare number, or one with MiB, GiB or TiB.
func parseMB(v string, unlimited bool) (int64, error) {
	if unlimited {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"mib", 1}, {"gib", 1 << 10}, {"tib", 1 << 20}, {"m", 1}, {"g", 1 << 10}, {"t", 1 << 20}} {
		if strings.HasSuffix(strings.ToLower(v), u.suffix) {
			v, mult = strings.TrimSpace(v[:len(v)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size")
	}
	return n * mult, nil
}

// FormatLimits writes l in the syntax parseLimits reads, naming every field.
func FormatLimits(l wire.Limits) string {
	if l == (wire.Limits{}) {
		return "unlimited"
	}
	mb := func(n int64) string {
		switch {
		case n == 0:
			return "unlimited"
		case n%(1<<10) == 0:
			return strconv.FormatInt(n>>10, 10) + "GiB"
		}
		return strconv.FormatInt(n, 10) + "MiB"
	}
	num := func(s string, zero bool) string {
		if zero {
			return "unlimited"
		}
		return s
	}
	return fmt.Sprintf("memory=%s,cpus=%s,pids=%s,disk=%s", mb(l.MemoryMB),
		num(strconv.FormatFloat(l.CPUs, 'g', -1, 64), l.CPUs == 0),
		num(strconv.FormatInt(l.PidsLimit, 10), l.PidsLimit == 0), mb(l.DiskMB))
}

// validateLimits checks each field's range and that the defaults fit
// under the maximum: a default above it would make every create a 400.
func (c *Config) validateLimits(bad func(key string, value any, format string, args ...any) error) error {
	for _, s := range []struct {
		key string
		l   wire.Limits
	}{{"default_limits", c.DefaultLimits}, {"max_limits", c.MaxLimits}} {
		l, v := s.l, FormatLimits(s.l)
		switch {
		case l.MemoryMB < 0 || (l.MemoryMB > 0 && l.MemoryMB < MinLimitMemoryMB) || l.MemoryMB > maxLimitMB:
			return bad(s.key, v, "memory must be unlimited or at least %d MiB", MinLimitMemoryMB)
		case math.IsNaN(l.CPUs) || l.CPUs < 0 || l.CPUs > maxLimitCPUs || (l.CPUs > 0 && l.CPUs < 0.01):
			return bad(s.key, v, "cpus must be unlimited or between 0.01 and %d", maxLimitCPUs)
		case l.PidsLimit < 0 || (l.PidsLimit > 0 && l.PidsLimit < MinLimitPids) || l.PidsLimit > maxLimitPids:
			return bad(s.key, v, "pids must be unlimited or at least %d (the agent needs a few)", MinLimitPids)
		case l.DiskMB < 0 || l.DiskMB > maxLimitMB:
			return bad(s.key, v, "disk must be unlimited or a size up to %d MiB", maxLimitMB)
		}
	}
	d, m := c.DefaultLimits, c.MaxLimits
	for _, f := range []struct {
		name     string
		def, max float64
	}{
		{"memory", float64(d.MemoryMB), float64(m.MemoryMB)},
		{"cpus", d.CPUs, m.CPUs},
		{"pids", float64(d.PidsLimit), float64(m.PidsLimit)},
		{"disk", float64(d.DiskMB), float64(m.DiskMB)},
	} {
		if f.max > 0 && (f.def == 0 || f.def > f.max) {
			return bad("default_limits", FormatLimits(d), "%s must not be above max_limits (%s)", f.name, FormatLimits(m))
		}
	}
	return nil
}
