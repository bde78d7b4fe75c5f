package docker

import (
	"github.com/moby/moby/api/types/container"

	"github.com/hotcell/hotcell/internal/wire"
)

// Under gVisor the box's cgroup holds gVisor's kernel (the Sentry, its
// gofer and, on the ptrace platform, one stub process per guest process),
// not the guest's processes, so the host counts and limits differently:
//
//   - pids: the cgroup counts host tasks. An idle box with its agent takes
//     about 40-70 (the Sentry's threads), and each guest process about 8
//     more (its stub and the stub's threads); guest threads cost almost
//     nothing. Reaching pids.max does not fail a fork inside: the Sentry
//     cannot make a stub and the whole box exits (code 2). hotcell adds
//     GVisorPidsOverhead to the limit so that a small limit still boots,
//     and reports no pids counter (Stats.Unavailable): the host's count is
//     not the sandbox's processes.
//   - memory: the cgroup holds the guest's memory and the Sentry's own; at
//     the limit the host's OOM killer takes the Sentry, so the whole box
//     stops as oom-killed (under runc only the biggest process dies).
//   - cpu: the cgroup's quota and usage cover the guest and the Sentry's
//     work on its behalf (system calls are served there).

// GVisorPidsOverhead is added to a gVisor box's pids limit for the
// Sentry's own host tasks (measured: about 40 idle, 60-70 with the agent
// and an exec).
const GVisorPidsOverhead = 128

// gvisorResources adjusts the engine's resources of a box that runs under
// gVisor.
func gvisorResources(r *container.Resources) {
	if r.PidsLimit != nil && *r.PidsLimit > 0 {
		p := *r.PidsLimit + GVisorPidsOverhead
		r.PidsLimit = &p
	}
}

// isGVisor reports whether engine runtime e runs hotcell's gVisor runtime.
func (d *Driver) isGVisor(e string) bool {
	return e != "" && d.hotcellRuntime(e) == wire.RuntimeGVisor
}

// UnavailableGVisor are the counters a gVisor box's stats cannot give
// (wire.SandboxStats.Unavailable).
var UnavailableGVisor = []string{wire.StatPidsCurrent, wire.StatPidsLimit}
