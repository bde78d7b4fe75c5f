package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/driver"
)

var _ driver.Killer = (*Driver)(nil)

// KillNow kills the box's processes with SIGKILL and returns without
// waiting for the engine to see them exit. The engine's own kill (docker
// kill, and the kill in docker rm -f) waits for the exit to be processed:
// 330-850 ms of the engine's time on this shared host, where the signal
// itself takes microseconds.
//
// A runc box's init (the agent, PID 1 of the box's PID namespace) is
// signalled through a pidfd, taken between two inspects that agree on its
// pid and start time, of a process in the box's cgroup, so the signal
// reaches that process and no other even if the pid were reused; the kernel kills every other process of
// the box's PID namespace with it. A paused box gets the signal on its
// thaw (the engine's removal thaws it). Other runtimes (gVisor's pid is
// its sentry, not the box's init) take the engine's kill.
func (d *Driver) KillNow(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	res, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return classify("inspect container "+ContainerName(id), err)
	}
	c := res.Container
	if c.State == nil || (!c.State.Running && !c.State.Paused) || c.State.Pid <= 0 {
		return nil
	}
	if c.HostConfig != nil && d.isGVisor(c.HostConfig.Runtime) {
		return d.engineKill(ctx, id)
	}
	pid, started := c.State.Pid, c.State.StartedAt
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // it exited meanwhile
	}
	if err != nil {
		// No pidfds (a kernel before 5.3, or a daemon in another PID
		// namespace than the engine): the engine kills it.
		return d.engineKill(ctx, id)
	}
	defer unix.Close(fd)
	// The engine's pid is in its PID namespace. A daemon in another one
	// (itself in a container, with the engine's socket) has another
	// process under that number: the process must be in the box's cgroup,
	// whose path names the container.
	if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err != nil || c.ID == "" || !strings.Contains(string(cg), c.ID) {
		return d.engineKill(ctx, id)
	}
	again, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return classify("inspect container "+ContainerName(id), err)
	}
	s := again.Container.State
	if s == nil || (!s.Running && !s.Paused) || s.Pid != pid || s.StartedAt != started {
		// It exited (or was started anew) between the inspects: the pidfd
		// may name another process. The engine kills what runs now.
		return d.engineKill(ctx, id)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill box %s (pid %d): %w", id, pid, err)
	}
	driver.TraceStep(ctx, "kill")
	return nil
}

// engineKill has the engine kill the box and wait for it to exit.
func (d *Driver) engineKill(ctx context.Context, id string) error {
	_, err := d.c.ContainerKill(ctx, ContainerName(id), client.ContainerKillOptions{Signal: "KILL"})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		// A box that stopped meanwhile is a conflict: not running.
		if st, ierr := d.Inspect(ctx, id); ierr == nil && st.State != driver.BoxRunning && st.State != driver.BoxPaused {
			return nil
		}
		return classify("kill container "+ContainerName(id), err)
	}
	driver.TraceStep(ctx, "kill")
	return nil
}
