package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/wire"
)

// termRing keeps a session's recent output as the frames that were sent,
// dropping the oldest whole frames beyond max bytes, so that a client that
// re-attaches can be shown what it missed.
type termRing struct {
	frames [][]byte
	size   int
	max    int
}

func (r *termRing) add(frame []byte) {
	r.frames = append(r.frames, frame)
	r.size += len(frame)
	for r.size > r.max && len(r.frames) > 1 {
		r.size -= len(r.frames[0])
		r.frames[0] = nil
		r.frames = r.frames[1:]
	}
}

// snapshot returns the frames in order; frames are never modified, so the
// copy of the slice is enough.
func (r *termRing) snapshot() [][]byte {
	return append([][]byte(nil), r.frames...)
}

// termAttachment is one client's connection to a session. The output
// pumps hand it frames through out, unbuffered: a slow client slows the
// pumps, and through them the process (backpressure, not buffering).
type termAttachment struct {
	out      chan []byte
	gone     chan struct{} // closed when detached or replaced
	goneOnce sync.Once
}

func (a *termAttachment) close() { a.goneOnce.Do(func() { close(a.gone) }) }

// termSession is one terminal: a process, its PTY or pipes, its recent
// output and at most one attached client.
type termSession struct {
	id            string
	tty           bool
	argv          []string
	cwd           string
	pid           int
	started       time.Time
	detachTimeout time.Duration

	ptmx  *os.File // PTY master (TTY mode): output and stdin
	stdin *os.File // pipe mode

	done chan struct{} // closed once the process exited and output drained

	mu       sync.Mutex
	ring     termRing
	att      *termAttachment
	watchers map[*termAttachment]struct{} // followers besides att (terminal_stream.go)
	cols     int
	rows     int
	status   ExitStatus
	exitedAt time.Time
	timer    *time.Timer
	timerGen int
	removed  bool
}

func (s *termSession) info() wire.TerminalInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	ti := wire.TerminalInfo{
		ID:               s.id,
		PID:              s.pid,
		Argv:             s.argv,
		Cwd:              s.cwd,
		TTY:              s.tty,
		DetachTimeoutSec: int(s.detachTimeout / time.Second),
		StartedAt:        s.started.UTC(),
		Attached:         s.att != nil,
		Running:          s.exitedAt.IsZero(),
	}
	if s.tty {
		ti.Cols, ti.Rows = s.cols, s.rows
	}
	if !s.exitedAt.IsZero() {
		code := s.status.Code
		at := s.exitedAt.UTC()
		ti.ExitCode, ti.Signal, ti.ExitedAt = &code, s.status.SignalName(), &at
	}
	return ti
}

// pump copies one output of the process into the ring and to the attached
// client. prefix is the pipe-mode channel byte, 0 for a PTY.
// inRead counts the pumps waiting in read, which tells wait when the
// outputs are drained.
func (s *termSession) pump(f *os.File, prefix byte, inRead *atomic.Int32, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	bp := getBuf()
	defer putBuf(bp)
	buf := *bp
	for {
		inRead.Add(1)
		n, err := f.Read(buf)
		inRead.Add(-1)
		if n > 0 {
			var frame []byte
			if prefix != 0 {
				frame = make([]byte, 0, n+1)
				frame = append(frame, prefix)
			} else {
				frame = make([]byte, 0, n)
			}
			frame = append(frame, buf[:n]...)
			s.mu.Lock()
			s.ring.add(frame)
			att := s.att
			var watchers []*termAttachment
			for w := range s.watchers {
				watchers = append(watchers, w)
			}
			s.mu.Unlock()
			if att != nil {
				select {
				case att.out <- frame:
				case <-att.gone:
				}
			}
			for _, w := range watchers {
				select {
				case w.out <- frame:
				case <-w.gone:
				}
			}
		}
		if err != nil {
			return // EOF, or EIO from a PTY whose last slave closed
		}
	}
}

// attach makes a the session's client, replacing (and so detaching) any
// other, and returns the output to replay first. A pump appends to the ring
// and reads s.att under the same lock, so every frame is either in the
// replay or delivered live, never both and never neither.
func (s *termSession) attach() (*termAttachment, [][]byte) {
	a := &termAttachment{out: make(chan []byte), gone: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att != nil {
		s.att.close()
	}
	s.att = a
	s.disarmLocked()
	return a, s.ring.snapshot()
}

// detach ends a's attachment if it is still the current one and starts
// the grace period.
func (s *termSession) detach(a *termAttachment, expire func(*termSession)) {
	a.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.att == a {
		s.att = nil
		if len(s.watchers) == 0 {
			s.armLocked(expire)
		}
	}
}

// watch adds a follower of the session's output that, unlike attach,
// replaces nobody. Followers get what the pumps read from now on.
func (s *termSession) watch() *termAttachment {
	a := &termAttachment{out: make(chan []byte), gone: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers == nil {
		s.watchers = map[*termAttachment]struct{}{}
	}
	s.watchers[a] = struct{}{}
	s.disarmLocked()
	return a
}

// unwatch removes a follower; the last client gone starts the grace period.
func (s *termSession) unwatch(a *termAttachment, expire func(*termSession)) {
	a.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.watchers[a]; !ok {
		return
	}
	delete(s.watchers, a)
	if s.att == nil && len(s.watchers) == 0 {
		s.armLocked(expire)
	}
}

// armLocked starts the grace timer; when it fires with no client attached,
// expire runs. The generation makes a timer that fires while being
// disarmed a no-op.
func (s *termSession) armLocked(expire func(*termSession)) {
	s.disarmLocked()
	if s.removed {
		return
	}
	gen := s.timerGen
	s.timer = time.AfterFunc(s.detachTimeout, func() {
		s.mu.Lock()
		stale := gen != s.timerGen || s.att != nil || len(s.watchers) > 0
		s.mu.Unlock()
		if !stale {
			expire(s)
		}
	})
}

func (s *termSession) disarmLocked() {
	s.timerGen++
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

func (s *termSession) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// writeStdin passes client bytes to the process. A write may block while
// the process does not read; that holds the client back, as a terminal
// would.
func (s *termSession) writeStdin(p []byte) error {
	f := s.stdin
	if s.tty {
		f = s.ptmx
	}
	if _, err := f.Write(p); err != nil {
		return fmt.Errorf("write stdin: %w", err)
	}
	return nil
}

// closeStdin ends the process's input: the pipe is closed (pipe mode), or
// the PTY gets the EOF character, as Ctrl-D at a terminal would.
func (s *termSession) closeStdin() error {
	if s.tty {
		return s.writeStdin([]byte{4})
	}
	// A second close reports os.ErrClosed, which is what it is.
	return s.stdin.Close()
}

func (s *termSession) resize(cols, rows int) error {
	if !s.tty {
		return fmt.Errorf("resize: session %s has no PTY", s.id)
	}
	if err := termSetSize(s.ptmx, cols, rows); err != nil {
		return err
	}
	s.mu.Lock()
	s.cols, s.rows = cols, rows
	s.mu.Unlock()
	return nil
}

// signal delivers sig as a terminal would: in TTY mode to the foreground
// process group (a job an interactive shell runs has a group of its own),
// else to the session's process group.
func (s *termSession) signal(sig syscall.Signal) error {
	if s.exited() {
		return fmt.Errorf("signal %s: the process has exited", unix.SignalName(sig))
	}
	pgrp := s.pid
	if s.tty {
		fg, err := termForeground(s.ptmx)
		switch {
		case err == nil && fg > 0:
			pgrp = fg
		case errors.Is(err, unix.ENOTTY):
			// gVisor (runsc) does not answer TIOCGPGRP on the master side,
			// and its line discipline sends no signal for ^C either: guess
			// the foreground job from the session's groups instead.
			if g := guessForeground("/proc", s.pid); g > 0 {
				pgrp = g
			}
		}
	}
	if err := syscall.Kill(-pgrp, sig); err != nil {
		return fmt.Errorf("signal %s to process group %d: %w", unix.SignalName(sig), pgrp, err)
	}
	return nil
}

// kill ends everything the session started: its process group and, for a
// PTY session, every process in its session (jobs a shell put in groups of
// their own).
func (s *termSession) kill() {
	if s.pid <= 0 {
		return
	}
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	if s.tty {
		for _, pid := range procsInSession(s.pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// procsInSession lists the pids whose session id is sid, from /proc.
func procsInSession(sid int) []int {
	var pids []int
	for _, p := range sessionProcs("/proc", sid) {
		pids = append(pids, p.pid)
	}
	return pids
}

// sessionProc is what /proc/<pid>/stat says of one process of a session.
type sessionProc struct {
	pid, pgrp int
	stopped   bool // state T or t: a job suspended with ^Z, or traced
}

// sessionProcs lists the processes whose session id is sid, from the proc
// file system mounted at proc.
func sessionProcs(proc string, sid int) []sessionProc {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var procs []sessionProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces; fields count
		// from after its closing parenthesis: state ppid pgrp session.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(data[i+1:])
		if len(f) < 4 {
			continue
		}
		pgrp, err1 := strconv.Atoi(string(f[2]))
		s, err2 := strconv.Atoi(string(f[3]))
		if err1 != nil || err2 != nil || s != sid {
			continue
		}
		procs = append(procs, sessionProc{pid: pid, pgrp: pgrp, stopped: bytes.EqualFold(f[0], []byte("t"))})
	}
	return procs
}

// guessForeground picks the process group of session sid a terminal's ^C
// would most likely reach, for a kernel that will not say (gVisor): the
// newest group other than the session leader's that has a process not
// stopped — the job a shell waits for is the one it started last, unless it
// was sent to the background with &, which this cannot see — else the
// leader's own. 0 when the session has no process left.
func guessForeground(proc string, sid int) int {
	best := 0
	for _, p := range sessionProcs(proc, sid) {
		switch {
		case p.pgrp == sid:
			if best == 0 {
				best = sid
			}
		case !p.stopped && (best == sid || best == 0 || p.pgrp > best):
			best = p.pgrp
		}
	}
	return best
}

// openPTY opens a PTY pair. The master is opened non-blocking so that it
// lives in the runtime poller: closing it then wakes a blocked Read, which
// a blocking descriptor (what os.File.Fd leaves behind) would not.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty: unlock: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty: get number: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	slave, err = os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("open pty: %s: %w", name, err)
	}
	return master, slave, nil
}

// ptyControl runs fn on f's descriptor without taking it out of the poller
// (os.File.Fd would make it blocking).
func ptyControl(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func termSetSize(f *os.File, cols, rows int) error {
	err := ptyControl(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
	if err != nil {
		return fmt.Errorf("resize pty to %dx%d: %w", cols, rows, err)
	}
	return nil
}

func termForeground(f *os.File) (int, error) {
	var pgrp int
	err := ptyControl(f, func(fd int) error {
		var err error
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pgrp, err
}
