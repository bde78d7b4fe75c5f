package sandbox

import (
	"strconv"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// ResolveLimits gives the limits a new sandbox gets: each field the request
// leaves at 0 takes def's value (0 there is the operator's "unlimited"), and
// a field the request sets above max's (when max's is not 0) is refused with
// an error naming it. It is the one place requests, and later templates,
// meet the daemon's default_limits and max_limits.
func ResolveLimits(req, def, max wire.Limits) (wire.Limits, error) {
	out := req
	pick := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	pick(&out.MemoryMB, def.MemoryMB)
	pick(&out.PidsLimit, def.PidsLimit)
	pick(&out.DiskMB, def.DiskMB)
	if out.CPUs == 0 {
		out.CPUs = def.CPUs
	}
	for _, f := range []struct {
		field    string
		got, max float64
		unit     string
	}{
		{"limits.memoryMb", float64(out.MemoryMB), float64(max.MemoryMB), " MiB"},
		{"limits.cpus", out.CPUs, max.CPUs, ""},
		{"limits.pidsLimit", float64(out.PidsLimit), float64(max.PidsLimit), ""},
		{"limits.diskMb", float64(out.DiskMB), float64(max.DiskMB), " MiB"},
	} {
		// A 0 here is an unlimited default; the daemon's settings keep
		// defaults under the maximum, so it only meets a max of 0.
		if f.max > 0 && (f.got == 0 || f.got > f.max) {
			return wire.Limits{}, errdefs.Invalid(f.field, "%s is above this daemon's maximum of %s%s (max_limits)",
				fmtNum(f.got), fmtNum(f.max), f.unit)
		}
	}
	return out, nil
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
