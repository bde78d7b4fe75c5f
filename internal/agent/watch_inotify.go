package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The watcher speaks to inotify directly (package syscall has all of it)
// rather than through fsnotify: it needs the rename cookies to pair the two
// halves of a rename, IN_ISDIR to type an entry that is already gone, and
// the overflow flag, none of which fsnotify passes on.

const (
	// Events on directories (and the root, if it is a file). IN_MODIFY
	// rather than IN_CLOSE_WRITE so that a file being appended to is seen
	// while it grows; the debounce window is for coalescing those.
	watchDirMask = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MODIFY | syscall.IN_ATTRIB |
		syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF |
		syscall.IN_DONT_FOLLOW | syscall.IN_EXCL_UNLINK
	// moveWait is how long a rename's first half (IN_MOVED_FROM) waits for
	// its second when a read ended between them; the kernel queues the two
	// back to back, so only a split read makes them arrive apart.
	moveWait = 20 * time.Millisecond
)

// inotifyWatcher owns one inotify instance and the watches of one stream.
// run reads the kernel's events into out until Close; everything else about
// it is touched only by run's goroutine (and by the constructor before run
// starts).
type inotifyWatcher struct {
	f    *os.File
	rc   syscall.RawConn // f's descriptor, held open while in use
	spec watchSpec
	// out carries events to the stream; it is closed when run returns.
	out     chan wire.WatchEvent
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once

	rootWd  int32
	rootDir bool
	dirs    map[int32]string // watch descriptor → directory
	wds     map[string]int32 // directory → watch descriptor

	now     time.Time // when the current batch was read
	lost    bool      // an event did not fit into out; report an overflow
	lostErr string    // why, when it was not just a full queue
	fatal   string    // the root is gone: the last event of the stream
	move    *pendingMove
}

type pendingMove struct {
	cookie uint32
	path   string
	dir    bool
}

// newInotifyWatcher creates the instance and watches spec.root (and below
// it, if recursive). Errors are classified for the HTTP answer.
func newInotifyWatcher(spec watchSpec, queue int) (*inotifyWatcher, error) {
	fi, err := os.Stat(spec.root)
	if err != nil {
		return nil, fsErr("watch", spec.root, err)
	}
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		if errors.Is(err, syscall.EMFILE) {
			return nil, classErr(errdefs.ErrUnavailable, "watch %s: too many inotify instances (fs.inotify.max_user_instances): %v", spec.root, err)
		}
		return nil, fmt.Errorf("watch %s: inotify_init: %w", spec.root, err)
	}
	// A non-blocking descriptor goes to the runtime poller, so that Read
	// parks the goroutine, honours deadlines and returns when Close runs.
	w := &inotifyWatcher{
		f:       os.NewFile(uintptr(fd), "inotify"),
		spec:    spec,
		out:     make(chan wire.WatchEvent, max(queue, 1)),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		rootDir: fi.IsDir(),
		dirs:    map[int32]string{},
		wds:     map[string]int32{},
	}
	if !w.rootDir {
		w.spec.recursive = false
	}
	// Never f.Fd(): it would switch the descriptor back to blocking mode.
	if w.rc, err = w.f.SyscallConn(); err != nil {
		_ = w.f.Close()
		close(w.stopped)
		return nil, fmt.Errorf("watch %s: %w", spec.root, err)
	}
	wd, err := w.addWatch(spec.root)
	if err == nil {
		w.rootWd = wd
		if w.spec.recursive {
			err = w.addTree(spec.root, false)
		}
	}
	if err != nil {
		_ = w.f.Close()
		close(w.stopped)
		return nil, err
	}
	return w, nil
}

// Close stops run and releases the instance and every watch; it waits for
// run to return and may be called more than once.
func (w *inotifyWatcher) Close() {
	w.once.Do(func() {
		close(w.done)
		_ = w.f.Close()
	})
	<-w.stopped
}

func (w *inotifyWatcher) addWatch(dir string) (int32, error) {
	mask := uint32(watchDirMask)
	if dir != w.spec.root || w.rootDir {
		mask |= syscall.IN_ONLYDIR
	}
	var wd int
	var err error
	if cerr := w.rc.Control(func(fd uintptr) {
		wd, err = syscall.InotifyAddWatch(int(fd), dir, mask)
	}); cerr != nil {
		return 0, fmt.Errorf("watch %s: %w", dir, cerr)
	}
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOSPC):
			return 0, classErr(errdefs.ErrUnavailable, "watch %s: the inotify watch limit (fs.inotify.max_user_watches) is reached; exclude big directories such as node_modules", dir)
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
			return 0, fsErr("watch", dir, err)
		}
		return 0, fmt.Errorf("watch %s: inotify_add_watch: %w", dir, err)
	}
	id := int32(wd)
	// The same directory reached by another name (a bind mount) keeps one
	// descriptor; the latest name wins.
	if old, ok := w.dirs[id]; ok && old != dir {
		delete(w.wds, old)
	}
	w.dirs[id] = dir
	w.wds[dir] = id
	return id, nil
}

// addTree watches every directory below dir that is not excluded. With emit
// it also reports every entry it finds as created: they appeared in a new
// directory before its watch was in place, and would be missed otherwise.
// (An entry made while the watch is being added can be reported twice.)
func (w *inotifyWatcher) addTree(dir string, emit bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil // gone already; its delete event follows
		}
		return fsErr("watch: read directory", dir, err)
	}
	for _, e := range entries {
		p := path.Join(dir, e.Name())
		if w.excluded(p) {
			continue
		}
		isDir := e.IsDir() // a symlink to a directory is not followed
		if emit {
			w.push(w.event(wire.WatchCreated, p, isDir))
		}
		if !isDir {
			continue
		}
		if _, err := w.addWatch(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errdefs.ErrInvalidArgument) {
				continue // removed or replaced meanwhile
			}
			return err
		}
		if err := w.addTree(p, emit); err != nil {
			return err
		}
	}
	return nil
}

// watchNewTree is addTree for a directory that appeared while running: a
// failure cannot be answered with an HTTP error any more, so it becomes an
// overflow event saying what is not watched.
func (w *inotifyWatcher) watchNewTree(dir string) {
	if _, err := w.addWatch(dir); err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			w.markLost(err)
		}
		return
	}
	if err := w.addTree(dir, true); err != nil {
		w.markLost(err)
	}
}

// unwatchTree drops the watches of dir and everything below it (it left
// the watched tree or was renamed to an excluded name).
func (w *inotifyWatcher) unwatchTree(dir string) {
	for p, wd := range w.wds {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			_ = w.rc.Control(func(fd uintptr) { _, _ = syscall.InotifyRmWatch(int(fd), uint32(wd)) })
			delete(w.wds, p)
			delete(w.dirs, wd)
		}
	}
}

// renameTree follows a directory renamed inside the tree: its descriptors
// stay valid, only the names they stand for change.
func (w *inotifyWatcher) renameTree(from, to string) {
	for p, wd := range w.wds {
		if p == from || strings.HasPrefix(p, from+"/") {
			np := to + p[len(from):]
			delete(w.wds, p)
			w.wds[np] = wd
			w.dirs[wd] = np
		}
	}
}

func (w *inotifyWatcher) excluded(p string) bool {
	if w.spec.exclude.empty() {
		return false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, w.spec.root), "/")
	return w.spec.exclude.match(rel)
}

func (w *inotifyWatcher) event(typ, p string, dir bool) wire.WatchEvent {
	ft := wire.FileTypeFile
	if dir {
		ft = wire.FileTypeDir
	}
	t := w.now
	if t.IsZero() {
		t = time.Now()
	}
	return wire.WatchEvent{Type: typ, Path: p, FileType: ft, Time: t.UTC()}
}

// push queues ev for the stream without ever blocking the reader: when the
// queue is full the event is dropped and an overflow is owed, which run
// delivers (in order, after what was queued) before any later event.
func (w *inotifyWatcher) push(ev wire.WatchEvent) {
	if w.lost {
		return
	}
	select {
	case w.out <- ev:
	default:
		w.lost = true
	}
}

func (w *inotifyWatcher) markLost(err error) {
	w.lost = true
	if w.lostErr == "" {
		w.lostErr = err.Error()
	}
}

// send delivers ev even if the queue is full, waiting for room; false means
// the watcher is being closed.
func (w *inotifyWatcher) send(ev wire.WatchEvent) bool {
	select {
	case w.out <- ev:
		return true
	case <-w.done:
		return false
	}
}

// run reads events until Close, or until the root is gone (then its last
// event is an error). It closes out when it returns.
func (w *inotifyWatcher) run() {
	defer close(w.stopped)
	defer close(w.out)
	// inotify events are at most sizeof(struct inotify_event)+NAME_MAX+1.
	buf := make([]byte, 64<<10)
	for {
		if w.move != nil {
			_ = w.f.SetReadDeadline(time.Now().Add(moveWait))
		} else {
			_ = w.f.SetReadDeadline(time.Time{})
		}
		n, err := w.f.Read(buf)
		w.now = time.Now()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.flushMove()
		case err != nil:
			return // closed
		default:
			w.parse(buf[:n])
		}
		if w.lost {
			ev := wire.WatchEvent{Type: wire.WatchOverflow, Time: w.now.UTC(), Message: w.lostErr}
			if !w.send(ev) {
				return
			}
			w.lost, w.lostErr = false, ""
		}
		if w.fatal != "" {
			w.send(wire.WatchEvent{Type: watchFailed, Path: w.spec.root, Time: w.now.UTC(), Message: w.fatal})
			return
		}
	}
}

// inotifyHeader is sizeof(struct inotify_event) without the name.
const inotifyHeader = syscall.SizeofInotifyEvent

func (w *inotifyWatcher) parse(b []byte) {
	for len(b) >= inotifyHeader && w.fatal == "" {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		cookie := binary.NativeEndian.Uint32(b[8:12])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		if len(b) < inotifyHeader+nameLen {
			return // cannot happen: the kernel never splits an event
		}
		name := string(b[inotifyHeader : inotifyHeader+nameLen])
		if i := strings.IndexByte(name, 0); i >= 0 {
			name = name[:i] // NUL padding
		}
		b = b[inotifyHeader+nameLen:]
		w.handle(wd, mask, cookie, name)
	}
}

func (w *inotifyWatcher) handle(wd int32, mask, cookie uint32, name string) {
	if mask&syscall.IN_Q_OVERFLOW != 0 {
		w.flushMove()
		w.markLost(errors.New("the kernel's inotify queue overflowed (fs.inotify.max_queued_events)"))
		return
	}
	dir, ok := w.dirs[wd]
	if !ok {
		return // a watch already dropped; its last events trickle in
	}
	isDir := mask&syscall.IN_ISDIR != 0
	isMoveTo := mask&syscall.IN_MOVED_TO != 0
	if w.move != nil && !(isMoveTo && cookie == w.move.cookie) {
		// The first half of a rename with no second half here: the entry
		// left the watched tree.
		w.flushMove()
	}
	if mask&syscall.IN_IGNORED != 0 {
		delete(w.dirs, wd)
		if w.wds[dir] == wd {
			delete(w.wds, dir)
		}
		if wd == w.rootWd && w.fatal == "" {
			w.fatal = "the watched path " + w.spec.root + " was removed"
		}
		return
	}
	if name == "" && wd != w.rootWd {
		// A directory's event about itself; its parent's watch reports
		// the same change by name, so this one would be a duplicate.
		return
	}
	p := dir
	if name != "" {
		p = path.Join(dir, name)
	} else {
		isDir = w.rootDir
	}
	switch {
	case mask&syscall.IN_DELETE_SELF != 0:
		w.push(w.event(wire.WatchDeleted, p, isDir))
		w.fatal = "the watched path " + p + " was removed"
	case mask&syscall.IN_MOVE_SELF != 0:
		w.fatal = "the watched path " + p + " was moved away"
	case mask&syscall.IN_MOVED_FROM != 0:
		if !w.excluded(p) {
			w.move = &pendingMove{cookie: cookie, path: p, dir: isDir}
		}
	case isMoveTo:
		m := w.move
		w.move = nil
		paired := m != nil && m.cookie == cookie
		switch {
		case w.excluded(p):
			if paired {
				w.moveAway(m) // renamed to a name that is not watched
			}
		case paired:
			ev := w.event(wire.WatchRenamed, p, isDir)
			ev.OldPath = m.path
			w.push(ev)
			if isDir && w.spec.recursive {
				w.renameTree(m.path, p)
			}
		default:
			// Moved in from outside the tree: new to this watcher.
			w.push(w.event(wire.WatchCreated, p, isDir))
			if isDir && w.spec.recursive {
				w.watchNewTree(p)
			}
		}
	case w.excluded(p):
	case mask&syscall.IN_CREATE != 0:
		w.push(w.event(wire.WatchCreated, p, isDir))
		if isDir && w.spec.recursive {
			w.watchNewTree(p)
		}
	case mask&syscall.IN_DELETE != 0:
		w.push(w.event(wire.WatchDeleted, p, isDir))
	case mask&syscall.IN_MODIFY == 0 && mask&syscall.IN_ATTRIB != 0 && w.spec.attrib:
		w.push(w.event(watchChmod, p, isDir))
	case mask&(syscall.IN_MODIFY|syscall.IN_ATTRIB) != 0:
		w.push(w.event(wire.WatchModified, p, isDir))
	}
}

// flushMove reports a rename whose second half never came as a delete.
func (w *inotifyWatcher) flushMove() {
	if m := w.move; m != nil {
		w.move = nil
		w.moveAway(m)
	}
}

func (w *inotifyWatcher) moveAway(m *pendingMove) {
	w.push(w.event(wire.WatchDeleted, m.path, m.dir))
	if m.dir {
		w.unwatchTree(m.path)
	}
}
