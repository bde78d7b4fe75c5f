package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// streamLog is one output stream of a background process: an append-only
// byte sequence whose offsets count from the process's start. It lives in
// at most two files, path (bytes [base, base+size)) and path.1 (bytes
// [prevBase, base)), each at most fileCap long; when path is full it becomes
// path.1 and the old path.1 is dropped. So between half of and all of the
// cap is kept, always the newest bytes, and an offset names the same byte
// for as long as that byte is kept.
//
// One writer goroutine appends (it never waits for readers: the child must
// not block on someone reading its log). Readers open the file that holds
// their offset under mu, so a rotation can't swap it between choosing and
// opening; bytes once committed never change, so the read itself needs no
// lock, and an fd kept across a rotation still reads the renamed or
// unlinked file.
type streamLog struct {
	path    string
	fileCap int64
	onMeta  func() // called after a rotation, to persist base and prevBase

	mu       sync.Mutex
	base     int64 // offset of path's first byte
	size     int64 // committed bytes in path
	prevBase int64 // offset of path.1's first byte; -1: there is no path.1
	failed   error // the first write error; later output is discarded

	w *os.File // the writer's handle on path; only the writer uses it
}

// newStreamLog creates path empty, for a process that is starting.
func newStreamLog(path string, capBytes int64, onMeta func()) (*streamLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create log %s: %w", path, err)
	}
	return &streamLog{path: path, fileCap: fileCapOf(capBytes), onMeta: onMeta, prevBase: -1, w: f}, nil
}

// openStreamLog reopens a log written by an earlier agent, read-only: its
// process is gone, so nothing appends any more.
func openStreamLog(path string, capBytes, base, prevBase int64) *streamLog {
	l := &streamLog{path: path, fileCap: fileCapOf(capBytes), base: base, prevBase: prevBase}
	if fi, err := os.Stat(path); err == nil {
		l.size = fi.Size()
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		l.prevBase = -1
	}
	return l
}

func fileCapOf(capBytes int64) int64 { return max(capBytes/2, 1) }

// write appends p, rotating as files fill up, and calls commit after each
// piece becomes readable. It never fails: after a write error (disk full)
// the rest is dropped, so the child keeps running, and the error is kept.
func (l *streamLog) write(p []byte, commit func()) {
	for len(p) > 0 {
		if l.failed != nil || l.w == nil {
			return
		}
		room := l.fileCap - l.size
		if room <= 0 {
			if err := l.rotate(); err != nil {
				l.fail(err)
				return
			}
			continue
		}
		n := int64(len(p))
		if n > room {
			n = room
		}
		wrote, err := l.w.Write(p[:n])
		l.mu.Lock()
		l.size += int64(wrote)
		l.mu.Unlock()
		commit()
		if err != nil {
			l.fail(fmt.Errorf("write log %s: %w", l.path, err))
			return
		}
		p = p[n:]
	}
}

func (l *streamLog) fail(err error) {
	l.mu.Lock()
	if l.failed == nil {
		l.failed = err
	}
	l.mu.Unlock()
}

func (l *streamLog) rotate() error {
	l.mu.Lock()
	_ = l.w.Close()
	l.w = nil
	err := os.Rename(l.path, l.path+".1")
	var f *os.File
	if err == nil {
		f, err = os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	}
	if err == nil {
		l.w = f
		l.prevBase = l.base
		l.base += l.size
		l.size = 0
	}
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rotate log %s: %w", l.path, err)
	}
	if l.onMeta != nil {
		l.onMeta()
	}
	return nil
}

// closeWriter ends appending (the pipe reached EOF or the process was removed).
func (l *streamLog) closeWriter() {
	if l.w != nil {
		_ = l.w.Close()
		l.w = nil
	}
}

// bounds returns the offsets kept: [oldest, total).
func (l *streamLog) bounds() (oldest, total, base, prevBase int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest = l.base
	if l.prevBase >= 0 {
		oldest = l.prevBase
	}
	return oldest, l.base + l.size, l.base, l.prevBase
}

// readAt reads bytes from offset off into p. When off is older than what is
// kept it reads from the oldest kept byte instead; at says where the bytes
// read start. n == 0 with a nil error means there is nothing at off yet.
func (l *streamLog) readAt(off int64, p []byte) (n int, at int64, err error) {
	l.mu.Lock()
	oldest := l.base
	if l.prevBase >= 0 {
		oldest = l.prevBase
	}
	at = max(off, oldest)
	total := l.base + l.size
	if at >= total || len(p) == 0 {
		l.mu.Unlock()
		return 0, at, nil
	}
	name, fileOff, limit := l.path, at-l.base, total-at
	if at < l.base {
		name, fileOff, limit = l.path+".1", at-l.prevBase, l.base-at
	}
	f, err := os.Open(name)
	l.mu.Unlock()
	if err != nil {
		return 0, at, fmt.Errorf("open log %s: %w", name, err)
	}
	defer f.Close()
	if int64(len(p)) > limit {
		p = p[:limit]
	}
	n, err = f.ReadAt(p, fileOff)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	if err != nil {
		return n, at, fmt.Errorf("read log %s: %w", name, err)
	}
	return n, at, nil
}
