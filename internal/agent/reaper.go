package agent

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExitStatus is how a child ended: Code for a normal exit, or Signal (and
// Code 128+signal, as shells report it) for death by signal.
type ExitStatus struct {
	Code   int
	Signal syscall.Signal // 0 unless killed by a signal
}

// SignalName is the status's signal as "SIGKILL", or "".
func (s ExitStatus) SignalName() string {
	if s.Signal == 0 {
		return ""
	}
	return unix.SignalName(s.Signal)
}

func exitStatus(ws syscall.WaitStatus) ExitStatus {
	switch {
	case ws.Signaled():
		return ExitStatus{Code: 128 + int(ws.Signal()), Signal: ws.Signal()}
	default:
		return ExitStatus{Code: ws.ExitStatus()}
	}
}

// Reaper starts child processes and collects their exit statuses. It is the
// only thing in the agent that waits for processes: os/exec's Wait and a
// PID 1 reaper calling wait4(-1) would steal each other's statuses, so
// children are started here and their statuses handed out by pid.
//
// In PID 1 mode (reapAll) it waits for any child, which also reaps orphans
// re-parented to PID 1, and discards statuses nobody registered for. Else it
// waits only for the pids it started, so it can share a process (a test
// binary, the daemon) with other code that waits for its own children.
type Reaper struct {
	reapAll bool

	mu      sync.Mutex
	waiters map[int]chan ExitStatus

	sigc chan os.Signal
	stop chan struct{}
	done chan struct{}
}

// NewReaper starts a reaper; Close stops it. reapAll is for PID 1.
func NewReaper(reapAll bool) *Reaper {
	r := &Reaper{
		reapAll: reapAll,
		waiters: make(map[int]chan ExitStatus),
		sigc:    make(chan os.Signal, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	signal.Notify(r.sigc, syscall.SIGCHLD)
	go r.loop()
	return r
}

var (
	defaultReaperOnce sync.Once
	defaultReaperVal  *Reaper
)

// defaultReaper is shared by handlers built without Options.Reaper; it lives
// as long as the process, like the SIGCHLD disposition it depends on.
func defaultReaper() *Reaper {
	defaultReaperOnce.Do(func() { defaultReaperVal = NewReaper(false) })
	return defaultReaperVal
}

// Close stops the reaper goroutine. Children still running are not waited for.
func (r *Reaper) Close() {
	signal.Stop(r.sigc)
	close(r.stop)
	<-r.done
}

func (r *Reaper) loop() {
	defer close(r.done)
	// A slow poll backs up SIGCHLD, which coalesces and, in non-PID-1 mode,
	// may be consumed by nobody else's fault; it costs nothing when idle.
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.sigc:
		case <-poll.C:
		}
		r.reap()
	}
}

func (r *Reaper) reap() {
	if r.reapAll {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				return
			}
			r.deliver(pid, ws)
		}
	}
	r.mu.Lock()
	pids := make([]int, 0, len(r.waiters))
	for pid := range r.waiters {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	for _, pid := range pids {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err == nil && got == pid {
			r.deliver(pid, ws)
		}
	}
}

func (r *Reaper) deliver(pid int, ws syscall.WaitStatus) {
	if !ws.Exited() && !ws.Signaled() {
		return // stopped or continued: not an exit
	}
	r.mu.Lock()
	ch, ok := r.waiters[pid]
	delete(r.waiters, pid)
	r.mu.Unlock()
	if ok {
		ch <- exitStatus(ws) // buffered: never blocks
	}
}

// Start forks and execs argv[0]=path in its own process group and returns
// its pid and a channel that receives its exit status exactly once. The
// registration happens under the same lock as the fork, so an exit the
// reaper sees first can't be lost.
func (r *Reaper) Start(path string, argv []string, attr *syscall.ProcAttr) (int, <-chan ExitStatus, error) {
	if attr.Sys == nil {
		attr.Sys = &syscall.SysProcAttr{}
	}
	// A session leader (Setsid) is a group leader already; setpgid would fail.
	attr.Sys.Setpgid = !attr.Sys.Setsid
	ch := make(chan ExitStatus, 1)
	r.mu.Lock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err == nil {
		r.waiters[pid] = ch
	}
	r.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	return pid, ch, nil
}

// pids returns the children that have not exited yet.
func (r *Reaper) pids() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]int, 0, len(r.waiters))
	for pid := range r.waiters {
		pids = append(pids, pid)
	}
	return pids
}

// Signal sends sig to the process group of every child started by Start
// (each is a group leader, so the group's pgid is its pid).
func (r *Reaper) Signal(sig syscall.Signal) {
	for _, pid := range r.pids() {
		_ = syscall.Kill(-pid, sig)
	}
}

// signalAll reaches every process the agent is responsible for: in PID 1
// mode everything else in the pid namespace (kill(-1) spares the caller),
// including daemonized grandchildren; otherwise the groups it started.
func (r *Reaper) signalAll(sig syscall.Signal) {
	if r.reapAll {
		_ = syscall.Kill(-1, sig)
		return
	}
	r.Signal(sig)
}

// hasChildren reports whether anything is left to stop.
func (r *Reaper) hasChildren() bool {
	if !r.reapAll {
		return len(r.pids()) > 0
	}
	// Peek without reaping: the reaper goroutine must get the status.
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, unix.ECHILD)
}

// Shutdown stops all children: SIGTERM, then SIGKILL for whatever is still
// there after grace or when ctx ends. It returns once nothing is left or a
// short while after the SIGKILL.
func (r *Reaper) Shutdown(ctx context.Context, grace time.Duration) {
	if !r.hasChildren() {
		return
	}
	r.signalAll(syscall.SIGTERM)
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for r.hasChildren() {
		select {
		case <-tick.C:
			continue
		case <-deadline.C:
		case <-ctx.Done():
		}
		break
	}
	if !r.hasChildren() {
		return
	}
	r.signalAll(syscall.SIGKILL)
	// Give the reaper a moment to collect the zombies so the runtime exits clean.
	for i := 0; i < 25 && r.hasChildren(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
}
