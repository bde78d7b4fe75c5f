package enginerestart

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dockerdLog is where a dockerd this test starts writes, the same file
// scripts/lib.sh sends it to.
const dockerdLog = "/var/log/hotcell-dockerd.log"

// engineWait bounds how long the engine may take to stop or to answer again.
const engineWait = 60 * time.Second

// engine restarts the Docker Engine the way it was started on this host:
// through systemd when systemd runs it, else by signalling dockerd and
// starting it again with the command line it had (scripts/lib.sh starts a
// bare `dockerd` when there is no systemd, as on CI's fresh machines).
type engine struct {
	t    testing.TB
	argv []string // dockerd's command line, read before the first restart
}

// systemdRunsDocker reports whether systemd manages the engine here.
func systemdRunsDocker() bool {
	if _, err := exec.LookPath("systemctl"); err != nil {
		return false
	}
	out, err := exec.Command("systemctl", "is-active", "docker").Output()
	return err == nil && strings.TrimSpace(string(out)) == "active"
}

// answers reports whether `docker info` gets an answer within a few seconds.
func answers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info", "--format", "{{.ID}}").Run() == nil
}

func waitAnswers(d time.Duration) error {
	deadline := time.Now().Add(d)
	for !answers() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the docker engine did not answer within %s; see %s", d, dockerdLog)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}

// dockerdPID finds the running dockerd: pidof first, then its pid file.
func dockerdPID() (int, error) {
	if out, err := exec.Command("pidof", "dockerd").Output(); err == nil {
		f := strings.Fields(string(out))
		if len(f) > 1 {
			return 0, fmt.Errorf("find dockerd: %d dockerd processes (%s); this test restarts only a single engine", len(f), strings.Join(f, " "))
		}
		if len(f) == 1 {
			return strconv.Atoi(f[0])
		}
	}
	b, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		return 0, fmt.Errorf("find dockerd: not running and no pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !alive(pid) {
		return 0, fmt.Errorf("find dockerd: pid file names %q, which is not running", strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// alive reports whether pid runs; a zombie (exited, not yet reaped by
// whatever adopted it) counts as gone.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// children returns the pids whose parent is pid, with their names.
func children(pid int) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(s[j+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out[p] = s[i+1 : j]
		}
	}
	return out
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// startDockerd starts dockerd detached, as scripts/lib.sh does: its own
// session (setsid), immune to hangups (nohup), output to dockerdLog, and
// reparented at once (the shell exits), so it outlives this test.
func (e *engine) startDockerd() error {
	argv := e.argv
	if len(argv) == 0 {
		argv = []string{"dockerd"}
	}
	script := `nohup "$@" >>` + dockerdLog + ` 2>&1 </dev/null &`
	cmd := exec.Command("setsid", append([]string{"sh", "-c", script, "sh"}, argv...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("start %s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return nil
}

// restart restarts the engine and returns once it answers again.
func (e *engine) restart() error {
	if systemdRunsDocker() {
		e.t.Log("restarting the docker engine with systemctl restart docker")
		if out, err := exec.Command("systemctl", "restart", "docker").CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl restart docker: %v: %s", err, out)
		}
		return waitAnswers(engineWait)
	}
	pid, err := dockerdPID()
	if err != nil {
		return err
	}
	e.argv = cmdline(pid)
	// dockerd started without systemd runs its own containerd as a child
	// and stops it on the way out; wait for that too, so that the new
	// dockerd does not find a containerd that is still going away.
	kids := children(pid)
	e.t.Logf("stopping dockerd (pid %d, %q, children %v) with SIGTERM", pid, e.argv, kids)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal dockerd %d: %w", pid, err)
	}
	start := time.Now()
	if !waitGone(pid, engineWait) {
		return fmt.Errorf("dockerd %d did not exit within %s of SIGTERM", pid, engineWait)
	}
	for k, name := range kids {
		if !waitGone(k, 15*time.Second) {
			e.t.Logf("%s (pid %d), dockerd's child, still runs after dockerd exited; the new dockerd adopts it", name, k)
		}
	}
	e.t.Logf("dockerd exited after %s; starting it again", time.Since(start).Round(time.Millisecond))
	if err := e.startDockerd(); err != nil {
		return err
	}
	if err := waitAnswers(engineWait); err != nil {
		return err
	}
	e.t.Logf("the docker engine answers again, %s after the SIGTERM", time.Since(start).Round(time.Millisecond))
	return nil
}

// ensure leaves a working engine behind whatever happened: it starts one
// if none answers. Tests register it with t.Cleanup.
func (e *engine) ensure() {
	if answers() {
		return
	}
	e.t.Log("the docker engine does not answer; starting it again")
	var err error
	if systemdPresent() {
		// Start it the way scripts/lib.sh does: systemd first, a bare
		// dockerd if that does not bring it up.
		if out, serr := exec.Command("systemctl", "start", "docker").CombinedOutput(); serr != nil {
			e.t.Logf("systemctl start docker: %v: %s", serr, out)
		} else if waitAnswers(engineWait) == nil {
			return
		}
	}
	if pid, perr := dockerdPID(); perr == nil {
		// One is on its way up (or down): give it the time to answer.
		if waitAnswers(engineWait) == nil {
			return
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		waitGone(pid, engineWait)
	}
	if err = e.startDockerd(); err == nil {
		err = waitAnswers(engineWait)
	}
	if err != nil {
		e.t.Errorf("restore the docker engine: %v", errors.Join(err, errors.New("every later docker test on this host will fail until dockerd runs again")))
	}
}

func systemdPresent() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}
