package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	defaultProcDir     = "/.hotcell-state/procs"
	defaultLogCap      = 8 << 20
	minLogCap          = 1 << 10
	maxLogCap          = 1 << 30
	maxProcesses       = 1024 // records kept, exited ones included
	procMetaFile       = "meta.json"
	procExitDrainGrace = 200 * time.Millisecond
	procExitDrainPoll  = 50 * time.Millisecond
	procExitDrainMax   = 10 * time.Second
)

// procTable owns the background processes of one agent: their records,
// their output copiers and their log files under dir/<id>/. It outlives
// every request, and the daemon: a process keeps running and logging
// whether or not anyone is connected.
type procTable struct {
	dir    string
	reaper *Reaper
	log    *slog.Logger

	loadOnce sync.Once
	mu       sync.Mutex
	procs    map[string]*bgProc
}

func newProcTable(dir string, reaper *Reaper, log *slog.Logger) *procTable {
	return &procTable{dir: dir, reaper: reaper, log: log, procs: make(map[string]*bgProc)}
}

// bgProc is one background process.
type bgProc struct {
	id, dir string
	pid     int
	info    wire.Process // the immutable part: command, argv, cwd, name, start
	stdout  *streamLog
	stderr  *streamLog
	pipes   []*os.File   // read ends of stdout and stderr, closed by their copiers
	copying atomic.Int32 // copiers holding bytes read but not yet logged

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever something changes
	status   *ExitStatus
	ended    time.Time
	finished bool   // exited, and output drained (or the grace after exit passed)
	lostErr  string // set on records of a previous agent whose process was running
	removed  bool
}

func (p *bgProc) stream(name string) *streamLog {
	if name == wire.EventStderr {
		return p.stderr
	}
	return p.stdout
}

// broadcast wakes everyone waiting in wait.
func (p *bgProc) broadcast() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// wait returns a channel closed at the next change. Take it before looking
// at the state, so a change in between is not missed.
func (p *bgProc) wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

type procState struct {
	finished, removed bool
	status            *ExitStatus
	lostErr           string
}

func (p *bgProc) state() procState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return procState{finished: p.finished, removed: p.removed, status: p.status, lostErr: p.lostErr}
}

// snapshot is the process as the API shows it.
func (p *bgProc) snapshot() wire.Process { return p.view(false) }

// view is the process's record. The exit shows once the process has
// finished (see watchExit), or, for meta.json, as soon as it is known.
func (p *bgProc) view(unfinished bool) wire.Process {
	w := p.info
	p.mu.Lock()
	if p.status != nil && (p.finished || unfinished) {
		w.State = wire.ProcessExited
		code := p.status.Code
		w.ExitCode = &code
		w.Signal = p.status.SignalName()
		ended := p.ended
		w.EndedAt = &ended
	} else if p.lostErr != "" {
		w.State = wire.ProcessExited
		w.Error = p.lostErr
		if !p.ended.IsZero() {
			ended := p.ended
			w.EndedAt = &ended
		}
	} else {
		w.State = wire.ProcessRunning
	}
	p.mu.Unlock()
	_, w.StdoutBytes, _, _ = p.stdout.bounds()
	_, w.StderrBytes, _, _ = p.stderr.bounds()
	return w
}

// procMeta is what a process's meta.json holds, so that its record and
// logs can be found again by an agent that restarted.
type procMeta struct {
	Process wire.Process `json:"process"`
	Stdout  logMeta      `json:"stdout"`
	Stderr  logMeta      `json:"stderr"`
}

type logMeta struct {
	Base     int64 `json:"base"`
	PrevBase int64 `json:"prevBase"`
}

// saveMeta writes meta.json atomically. A failure is logged, not returned:
// the record in memory is what the API serves; the file only matters if the
// agent itself restarts.
func (t *procTable) saveMeta(p *bgProc) {
	m := procMeta{Process: p.view(true)}
	_, _, m.Stdout.Base, m.Stdout.PrevBase = p.stdout.bounds()
	_, _, m.Stderr.Base, m.Stderr.PrevBase = p.stderr.bounds()
	data, err := json.Marshal(m)
	if err == nil {
		tmp := filepath.Join(p.dir, procMetaFile+".tmp")
		if err = os.WriteFile(tmp, data, 0o600); err == nil {
			err = os.Rename(tmp, filepath.Join(p.dir, procMetaFile))
		}
	}
	if err != nil && !p.state().removed {
		t.log.Warn("save process record", "id", p.id, "err", err)
	}
}

// load reads the records an earlier agent left (the sandbox was stopped and
// started again). Their processes are gone: a record that says running is
// marked as ended with an unknown status.
func (t *procTable) load() {
	t.loadOnce.Do(func() {
		entries, err := os.ReadDir(t.dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			dir := filepath.Join(t.dir, e.Name())
			data, err := os.ReadFile(filepath.Join(dir, procMetaFile))
			var m procMeta
			if err == nil {
				err = json.Unmarshal(data, &m)
			}
			if err != nil || m.Process.ID != e.Name() {
				t.log.Warn("skip unreadable process record", "dir", dir, "err", err)
				continue
			}
			p := &bgProc{id: m.Process.ID, dir: dir, pid: m.Process.PID, info: m.Process, changed: make(chan struct{}), finished: true}
			p.info.State, p.info.ExitCode, p.info.Signal, p.info.EndedAt, p.info.Error = "", nil, "", nil, ""
			p.stdout = openStreamLog(filepath.Join(dir, "stdout.log"), m.Process.LogCapBytes, m.Stdout.Base, m.Stdout.PrevBase)
			p.stderr = openStreamLog(filepath.Join(dir, "stderr.log"), m.Process.LogCapBytes, m.Stderr.Base, m.Stderr.PrevBase)
			switch {
			case m.Process.ExitCode != nil:
				st := ExitStatus{Code: *m.Process.ExitCode}
				if n, ok := wire.ParseSignal(m.Process.Signal); ok && m.Process.Signal != "" {
					st.Signal = syscall.Signal(n)
				}
				p.status = &st
				if m.Process.EndedAt != nil {
					p.ended = *m.Process.EndedAt
				}
			default:
				p.lostErr = "the agent restarted while the process ran; its exit status is unknown"
			}
			t.procs[p.id] = p
		}
	})
}

// start runs spec as a background process.
func (t *procTable) start(h *handler, spec execSpec, req wire.StartProcessRequest) (wire.Process, error) {
	t.load()
	t.mu.Lock()
	n := len(t.procs)
	t.mu.Unlock()
	if n >= maxProcesses {
		return wire.Process{}, classErr(errdefs.ErrConflict, "start process: %d processes are recorded; remove exited ones first", n)
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return wire.Process{}, fmt.Errorf("start process: create %s: %w", t.dir, err)
	}
	proc, failure, err := h.startProcess(spec)
	if err != nil {
		return wire.Process{}, err
	}
	if failure != nil {
		field := "argv"
		if spec.shell {
			field = "command"
		}
		return wire.Process{}, errdefs.Invalid(field, "%s", trimNL(failure.msg))
	}
	// Nothing is fed to a background process: its stdin is at EOF.
	_ = proc.stdin.Close()

	capBytes := req.LogCapBytes
	if capBytes == 0 {
		capBytes = defaultLogCap
	}
	p := &bgProc{pid: proc.pid, changed: make(chan struct{}), pipes: []*os.File{proc.stdout, proc.stderr}}
	p.info = wire.Process{
		PID: proc.pid, Name: req.Name, Cwd: spec.cwd, StartedAt: proc.start.UTC(),
		KeepAlive: req.KeepAlive, LogCapBytes: capBytes,
	}
	if spec.shell {
		p.info.Command = spec.argv[0]
	} else {
		p.info.Argv = spec.argv
	}

	t.mu.Lock()
	p.id = strconv.Itoa(proc.pid)
	// A pid comes back once its process is reaped; the record of the old
	// one stays until removed, so the id gets a suffix.
	for i := 2; t.procs[p.id] != nil; i++ {
		p.id = strconv.Itoa(proc.pid) + "-" + strconv.Itoa(i)
	}
	p.info.ID = p.id
	p.dir = filepath.Join(t.dir, p.id)
	t.procs[p.id] = p
	t.mu.Unlock()

	if err := t.openLogs(p); err != nil {
		// Without logs the process would block on a full pipe; stop it.
		_ = syscall.Kill(-proc.pid, syscall.SIGKILL)
		closeAll(proc.stdout, proc.stderr)
		go func() { <-proc.exited }()
		t.mu.Lock()
		delete(t.procs, p.id)
		t.mu.Unlock()
		_ = os.RemoveAll(p.dir)
		return wire.Process{}, fmt.Errorf("start process: %w", err)
	}
	t.saveMeta(p)

	var copiers sync.WaitGroup
	copiers.Add(2)
	go t.copyOut(p, proc.stdout, p.stdout, &copiers)
	go t.copyOut(p, proc.stderr, p.stderr, &copiers)
	go t.watchExit(p, proc.exited, &copiers)
	return p.snapshot(), nil
}

func (t *procTable) openLogs(p *bgProc) error {
	// The dir may be left from a record removed while its files were open.
	_ = os.RemoveAll(p.dir)
	if err := os.Mkdir(p.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", p.dir, err)
	}
	var err error
	onMeta := func() { t.saveMeta(p) }
	if p.stdout, err = newStreamLog(filepath.Join(p.dir, "stdout.log"), p.info.LogCapBytes, onMeta); err != nil {
		return err
	}
	if p.stderr, err = newStreamLog(filepath.Join(p.dir, "stderr.log"), p.info.LogCapBytes, onMeta); err != nil {
		p.stdout.closeWriter()
		return err
	}
	return nil
}

// copyOut moves one pipe into its log until the pipe closes: when every
// process holding its write end is gone, or the record is removed.
func (t *procTable) copyOut(p *bgProc, pipe *os.File, l *streamLog, wg *sync.WaitGroup) {
	defer wg.Done()
	defer l.closeWriter()
	defer pipe.Close()
	bp := getBuf()
	defer putBuf(bp)
	for {
		n, err := pipe.Read(*bp)
		if n > 0 {
			p.copying.Add(1)
			l.write((*bp)[:n], p.broadcast)
			p.copying.Add(-1)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				t.log.Warn("read process output", "id", p.id, "err", err)
			}
			return
		}
	}
}

// watchExit records the exit once the process's output is drained, or,
// if a child it left behind still holds the pipes (that output still goes
// to the log), once everything written before the exit is in the log.
// Until then the process shows as running: whoever sees it exited can
// read all its output.
func (t *procTable) watchExit(p *bgProc, exited <-chan ExitStatus, copiers *sync.WaitGroup) {
	st := <-exited
	ended := time.Now().UTC()
	drained := make(chan struct{})
	go func() { copiers.Wait(); close(drained) }()
	waitCollected(p, drained)
	p.mu.Lock()
	p.status = &st
	p.ended = ended
	p.mu.Unlock()
	// Saved before the exit event goes out, so whoever saw it finds it on
	// disk too.
	t.saveMeta(p)
	p.mu.Lock()
	p.finished = true
	p.mu.Unlock()
	p.broadcast()
}

// waitCollected returns when drained closes or, after procExitDrainGrace,
// once the pipes hold no unread bytes, no copier holds bytes it has not
// logged and the logs did not grow for a poll interval; at the latest
// after procExitDrainMax. A timer alone is not enough: on a loaded host
// the copiers can lag the exit by more than any fixed grace, and the
// process would show exited with its output still in the pipe.
func waitCollected(p *bgProc, drained <-chan struct{}) {
	grace := time.NewTimer(procExitDrainGrace)
	defer grace.Stop()
	select {
	case <-drained:
		return
	case <-grace.C:
	}
	deadline := time.Now().Add(procExitDrainMax)
	tick := time.NewTicker(procExitDrainPoll)
	defer tick.Stop()
	last := int64(-1)
	for time.Now().Before(deadline) {
		_, out, _, _ := p.stdout.bounds()
		_, errs, _, _ := p.stderr.bounds()
		total := out + errs
		if total == last && p.copying.Load() == 0 && pipesEmpty(p.pipes) {
			return
		}
		last = total
		select {
		case <-drained:
			return
		case <-tick.C:
		}
	}
}

// pipesEmpty reports whether no pipe holds unread bytes (FIONREAD, named
// TIOCINQ on Linux). A pipe its copier closed counts as empty.
func pipesEmpty(pipes []*os.File) bool {
	for _, f := range pipes {
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		n := 0
		if rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }) != nil {
			continue
		}
		if n > 0 {
			return false
		}
	}
	return true
}

func (t *procTable) get(id string) (*bgProc, error) {
	t.load()
	t.mu.Lock()
	p := t.procs[id]
	t.mu.Unlock()
	if p == nil {
		return nil, classErr(errdefs.ErrNotFound, "process %q not found", clipID(id))
	}
	return p, nil
}

func (t *procTable) list(state, name string) []wire.Process {
	t.load()
	t.mu.Lock()
	all := make([]*bgProc, 0, len(t.procs))
	for _, p := range t.procs {
		all = append(all, p)
	}
	t.mu.Unlock()
	out := make([]wire.Process, 0, len(all))
	for _, p := range all {
		w := p.snapshot()
		if (state == "" || w.State == state) && (name == "" || w.Name == name) {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].StartedAt.Equal(out[j].StartedAt) {
			return out[i].StartedAt.Before(out[j].StartedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// signal delivers sig to the process's group. The group can outlive its
// leader (children it left running), and Linux does not reuse a pid that
// is still some group's id, so this is safe after the leader exited too.
func (t *procTable) signal(p *bgProc, sig syscall.Signal) error {
	st := p.state()
	if st.lostErr != "" {
		return classErr(errdefs.ErrConflict, "signal process %s: it ended with an earlier agent", p.id)
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return classErr(errdefs.ErrConflict, "signal process %s: it has exited and no process of its group is left", p.id)
		}
		return fmt.Errorf("signal process %s: %w", p.id, err)
	}
	return nil
}

// remove forgets an exited process and deletes its logs.
func (t *procTable) remove(p *bgProc) error {
	if st := p.state(); !st.finished {
		return classErr(errdefs.ErrConflict, "remove process %s: it is still running; signal it first", p.id)
	}
	t.mu.Lock()
	if t.procs[p.id] != p {
		t.mu.Unlock()
		return classErr(errdefs.ErrNotFound, "process %q not found", clipID(p.id))
	}
	delete(t.procs, p.id)
	t.mu.Unlock()
	p.mu.Lock()
	p.removed = true
	p.mu.Unlock()
	// A child left behind may still hold the pipes; closing our ends stops
	// the copiers (it gets EPIPE, as with any closed reader).
	for _, f := range p.pipes {
		_ = f.Close()
	}
	p.broadcast()
	if err := os.RemoveAll(p.dir); err != nil {
		return fmt.Errorf("remove process %s logs: %w", p.id, err)
	}
	return nil
}

func trimNL(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}

func clipID(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
