package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// DefaultEngineRuntimes names, for each hotcell runtime, the engine
// runtime (a key of daemon.json's "runtimes", or the built-in runc) that
// runs it. scripts/lib.sh registers gVisor's runsc under "runsc": its own
// build of a pinned runsc on the systrap platform, or Debian's runsc on
// ptrace when that build cannot be had.
var DefaultEngineRuntimes = map[string]string{
	wire.RuntimeRunc:   "runc",
	wire.RuntimeGVisor: "runsc",
}

// GVisorRuntimeArgs are the flags Debian's runsc needs on this engine
// (scripts/lib.sh gives its newer build of runsc --platform=systrap and
// --overlay2=none instead of ptrace): ptrace because Debian's runsc has no
// systrap and its KVM platform does not start here; host networking, which under Docker means the box's own network namespace,
// because gVisor's netstack refuses to start in it ("cannot run with
// network enabled in root network namespace") and because the bridge and
// the host firewall must apply as for runc; host-uds=open so the agent can
// dial the daemon's socket in the read-only run dir.
var GVisorRuntimeArgs = []string{"--platform=ptrace", "--network=host", "--host-uds=open"}

// UseEngineRuntime makes the driver run boxes of hotcell runtime rt
// (wire.RuntimeRunc, wire.RuntimeGVisor) with the engine runtime named
// engine. Call it before the driver is used.
func (d *Driver) UseEngineRuntime(rt, engine string) {
	m := maps.Clone(d.runtimes())
	m[rt] = engine
	d.engineRuntimes = m
}

func (d *Driver) runtimes() map[string]string {
	if d.engineRuntimes == nil {
		return DefaultEngineRuntimes
	}
	return d.engineRuntimes
}

// engineRuntime is the engine's runtime for hotcell runtime rt; empty rt
// is the engine's default.
func (d *Driver) engineRuntime(rt string) (string, error) {
	if rt == "" {
		return "", nil
	}
	e, ok := d.runtimes()[rt]
	if !ok {
		return "", errdefs.Invalid("runtime", "%q is not a runtime this driver knows (%s)", rt, strings.Join(slices.Sorted(maps.Keys(d.runtimes())), ", "))
	}
	return e, nil
}

// hotcellRuntime names engine runtime e as hotcell does; one hotcell does
// not map keeps the engine's name, and the engine's default is runc's.
func (d *Driver) hotcellRuntime(e string) string {
	if e == "" {
		e = "runc"
	}
	for rt, name := range d.runtimes() {
		if name == e {
			return rt
		}
	}
	return e
}

// available splits hotcell's runtimes into those the engine has (by the
// runtime names of its info) and, for each it lacks, how to enable it.
func (d *Driver) available(engine map[string]bool) ([]string, map[string]string) {
	have := []string{}
	hints := map[string]string{}
	for _, rt := range wire.Runtimes() {
		e, ok := d.runtimes()[rt]
		if ok && engine[e] {
			have = append(have, rt)
			continue
		}
		hints[rt] = enableHint(rt, e)
	}
	return have, hints
}

// enableHint tells an operator how to give the engine runtime rt.
func enableHint(rt, engine string) string {
	if rt != wire.RuntimeGVisor {
		return fmt.Sprintf("the Docker Engine has no runtime %q; register it in /etc/docker/daemon.json (\"runtimes\") and reload dockerd with SIGHUP", engine)
	}
	return fmt.Sprintf("the Docker Engine has no runtime %q (gVisor): `sudo scripts/serve` builds and registers it; by hand, "+
		"`apt-get install runsc` (slower to start processes than the build), add \"runtimes\": {%q: {\"path\": \"/usr/bin/runsc\", \"runtimeArgs\": [%s]}} to /etc/docker/daemon.json "+
		"and reload dockerd with `kill -HUP $(pidof dockerd)`", engine, engine, quoteJoin(GVisorRuntimeArgs))
}

func quoteJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

// runtimeMissing turns the engine's refusal of a create into one that
// names the runtime and says how to enable it, when the reason is that
// the engine lacks rt (unregistered since the manager looked).
func (d *Driver) runtimeMissing(ctx context.Context, rt string, err error) error {
	info, ierr := d.Info(ctx)
	if ierr != nil || slices.Contains(info.Runtimes, rt) {
		return err
	}
	return fmt.Errorf("%w (%w)", errdefs.Invalid("runtime", "%s is not available on this host: %s", rt, info.RuntimeHints[rt]), err)
}
