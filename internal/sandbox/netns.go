package sandbox

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// The host's git runs for a sandbox in the sandbox's network namespace, so
// that what it can reach is what the sandbox could: the egress rules of the
// box's address apply to it, its loopback is the box's own (not the host's)
// and a box without network (egress none) has none. Its name lookups go to
// the box's resolver (the egress DNS, which learns allowlisted names for the
// box) through a resolv.conf of its own, bind-mounted in a private mount
// namespace over the host's, with hosts and nsswitch.conf that name nothing
// else; the rest of the host's filesystem is as it is, so git, its helpers
// and a local repository (allow_local_repos) are where they always are.

// boxNetNS opens the network namespace of the running box id.
func (m *Manager) boxNetNS(ctx context.Context, id string) (*os.File, error) {
	st, err := m.drv.Inspect(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("find the network of box %s: %w", id, err)
	}
	if st.State != driver.BoxRunning || st.Pid <= 0 {
		return nil, fmt.Errorf("find the network of box %s: it is %s with no process to enter (pid %d): %w", id, st.State, st.Pid, errdefs.ErrConflict)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", st.Pid))
	if err != nil {
		return nil, fmt.Errorf("open the network namespace of box %s: %w", id, err)
	}
	// The process could have ended and its id been reused between the
	// inspect and the open: the namespace is the box's only if it still
	// runs as the same process.
	again, err := m.drv.Inspect(ctx, id)
	if err != nil || again.State != driver.BoxRunning || again.Pid != st.Pid || !again.StartedAt.Equal(st.StartedAt) {
		f.Close()
		return nil, fmt.Errorf("open the network namespace of box %s: the box stopped or restarted meanwhile: %w", id, errdefs.ErrConflict)
	}
	return f, nil
}

// netNSFiles writes, under dir, the files that replace the host's
// /etc/resolv.conf, /etc/hosts and /etc/nsswitch.conf for a command run in
// a box's network: name servers are the box's (none: the host's
// resolv.conf is kept, as Docker copies it into a box it gives no DNS).
func netNSFiles(dir string, nameservers []netip.Addr) (map[string]string, error) {
	files := map[string]string{
		"/etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
		// dns only: an nss module that asks a host daemon (systemd-resolved,
		// mdns) would resolve in the host's network.
		"/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
	}
	if len(nameservers) > 0 {
		var b strings.Builder
		for _, a := range nameservers {
			fmt.Fprintf(&b, "nameserver %s\n", a)
		}
		files["/etc/resolv.conf"] = b.String()
	}
	out := map[string]string{}
	for target, content := range files {
		src := filepath.Join(dir, filepath.Base(target))
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			return nil, err
		}
		out[target] = src
	}
	return out, nil
}

// netnsExecArg0 is the argv[0] with which the daemon's own binary is the
// helper that puts git in a box's network (netnsExec).
const netnsExecArg0 = "hotcell-netns-exec"

// The helper runs from init, before main: init runs on the process's main
// thread, locked to it, so the namespaces the helper changes are those of
// the thread that then execs git. Doing the same from a goroutine of the
// daemon would change one of the daemon's threads, possibly its main
// thread, whose namespaces /proc/self shows to the whole daemon.
func init() {
	if len(os.Args) > 0 && os.Args[0] == netnsExecArg0 {
		runtime.LockOSThread()
		err := netnsExec(os.Args[1:])
		fmt.Fprintf(os.Stderr, "hotcell: run git in the box's network: %v\n", err)
		os.Exit(127)
	}
}

// netnsExec is the helper: args are TARGET=SOURCE binds, "--", and the
// command; the box's network namespace is open on fd 3. It returns only on
// failure.
func netnsExec(args []string) error {
	i := slices.Index(args, "--")
	if i < 0 || i == len(args)-1 {
		return fmt.Errorf("usage: %s TARGET=SOURCE... -- COMMAND ARGS", netnsExecArg0)
	}
	binds, argv := args[:i], args[i+1:]
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	// Private first, or the binds below would propagate to the host's
	// mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	for _, b := range binds {
		target, src, _ := strings.Cut(b, "=")
		if _, err := os.Stat(target); err != nil {
			continue // nothing to replace: the default applies
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", target, err)
		}
	}
	if err := unix.Setns(3, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the box's network namespace: %w", err)
	}
	unix.CloseOnExec(3)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return unix.Exec(path, argv, os.Environ())
}

// startInNetNS starts cmd in the network namespace ns, with each target
// file of binds (a host path) replaced by its source for cmd alone: cmd
// runs as the daemon's own binary in its helper role (init above), which
// makes those changes to itself and then execs cmd's program. cmd keeps
// its process (its pid, group and pipes are the helper's).
func startInNetNS(cmd *exec.Cmd, ns *os.File, binds map[string]string) error {
	args := []string{netnsExecArg0}
	for _, target := range slices.Sorted(maps.Keys(binds)) {
		args = append(args, target+"="+binds[target])
	}
	args = append(append(args, "--"), cmd.Args...)
	// /proc/self/exe is the running binary even when its file was
	// replaced (an upgrade) since the daemon started.
	cmd.Path, cmd.Args, cmd.Err = "/proc/self/exe", args, nil
	cmd.ExtraFiles = []*os.File{ns}
	return cmd.Start()
}
