package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The settings that bound backups, as the operator names them (internal/config).
const (
	SettingMaxSize     = "backup_max_size"
	SettingQuota       = "backup_quota"
	SettingMinFree     = "min_free_disk"
	SettingIdleTimeout = "backup_idle_timeout"
)

// DefaultIdleTimeout is how long a backup's tar stream may deliver nothing
// when Limits gives no IdleTimeout.
const DefaultIdleTimeout = 2 * time.Minute

// freeCheckEvery is how many bytes a backup writes between two checks of
// the disk's free space: other writers (other backups, the workspaces, the
// store) share that disk, so the room measured at the start does not last.
const freeCheckEvery = 32 << 20

// Limits bound what backups cost on the daemon's disk. A zero field is no
// limit, except IdleTimeout, whose zero is DefaultIdleTimeout.
//
// The code in a sandbox is root and can answer the daemon's archive request
// itself, so the tar a backup reads is untrusted: it may be endless, or
// stall, or be made to fill the disk the store lives on.
type Limits struct {
	// MaxSize caps the workspace tar one backup reads from its agent (or
	// the body of one upload): the stream is aborted once it passes it and
	// its file removed (backup_max_size).
	MaxSize int64
	// Quota caps the bytes of one sandbox's kept backup files, snapshots'
	// workspaces included (backup_quota). A backup that would pass it is
	// refused, or aborted when its stream does; the backups that the
	// backup's own retention (keep) will delete do not count.
	Quota int64
	// MinFree is what backups leave free on the filesystem of the backups
	// directory (min_free_disk): a backup that finds less is refused, and
	// one that goes below it while it writes is aborted.
	MinFree int64
	// IdleTimeout aborts a backup whose tar stream delivers nothing for
	// this long (backup_idle_timeout).
	IdleTimeout time.Duration
}

// LimitError is a backup refused or aborted by one of the Limits. Its
// class decides the status: 413 for a tar over backup_max_size, 507 for the
// quota and the disk's reserve, 504 for a stalled stream.
type LimitError struct {
	// Setting names the limit: one of the Setting* constants.
	Setting string
	msg     string
	class   error
}

func (e *LimitError) Error() string { return e.msg }
func (e *LimitError) Unwrap() error { return e.class }

func limitErr(setting string, class error, format string, args ...any) *LimitError {
	return &LimitError{Setting: setting, msg: fmt.Sprintf(format, args...), class: class}
}

// freeBytes reports the bytes an unprivileged writer may still use on the
// filesystem that holds path.
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// budget is what one backup may write, worked out before it starts.
type budget struct {
	tarMax int64 // bytes of tar stream; 0: no cap
	// fileMax is the bytes the file may take (quota left, or room above
	// the reserve, whichever is less); fileSetting names the one that binds.
	fileMax     int64
	fileSetting string
	fileMsg     string
	hasFileMax  bool
}

// plan checks, before a backup of sandboxID starts, that its quota and the
// disk leave room for it, and returns what it may write. keep is the
// retention the backup will apply (0 for a snapshot's workspace, which
// prunes nothing).
func (s *Service) plan(ctx context.Context, sandboxID string, keep int) (budget, error) {
	l := s.opts.Limits
	bg := budget{tarMax: l.MaxSize}
	list, err := s.opts.Store.ListBackups(ctx, sandboxID)
	if err != nil {
		return bg, err
	}
	var expected int64 // the sandbox's newest backup: the best guess of this one's size
	if len(list) > 0 {
		expected = list[0].Size
	}
	if l.Quota > 0 {
		used := quotaUsed(list, keep)
		left := l.Quota - used
		if left <= 0 {
			return bg, limitErr(SettingQuota, errdefs.ErrInsufficientStorage,
				"sandbox %s's backups take %d bytes, its backup_quota is %d: refused; delete backups (or lower keep) first, or raise backup_quota",
				sandboxID, used, l.Quota)
		}
		bg.fileMax, bg.hasFileMax, bg.fileSetting = left, true, SettingQuota
		bg.fileMsg = fmt.Sprintf("the backup passed what is left of sandbox %s's backup_quota (%d of %d bytes; the other backups take %d): aborted and removed; delete backups or raise backup_quota",
			sandboxID, left, l.Quota, used)
	}
	if l.MinFree <= 0 {
		return bg, nil // no reserve: only a full disk (diskErr) stops it
	}
	free, err := s.statfs(s.root())
	if err != nil {
		return bg, err
	}
	room := free - l.MinFree
	if room <= expected || room <= 0 {
		return bg, limitErr(SettingMinFree, errdefs.ErrInsufficientStorage,
			"the backups disk has %d bytes free; min_free_disk keeps %d free and the sandbox's last backup took %d: refused; free space on the disk or delete backups",
			free, l.MinFree, expected)
	}
	if !bg.hasFileMax || room < bg.fileMax {
		bg.fileMax, bg.hasFileMax, bg.fileSetting = room, true, SettingMinFree
		bg.fileMsg = fmt.Sprintf("the backup would leave less than min_free_disk (%d bytes) free on the backups disk: aborted and removed; free space on the disk or delete backups", l.MinFree)
	}
	return bg, nil
}

// quotaUsed sums the files that count against a sandbox's quota once a
// backup with retention keep has succeeded: all of them but those that
// retention then deletes (its oldest plain backups beyond keep-1; keep 0
// deletes none).
func quotaUsed(list []wire.Backup, keep int) int64 {
	var used int64
	n := 0
	for _, b := range list { // newest first
		if !owned(b) {
			n++
			if keep > 0 && n > keep-1 {
				continue
			}
		}
		used += b.Size
	}
	return used
}

// guard enforces a budget on a fileWriter as it writes.
func (s *Service) guard(fw *fileWriter, bg budget) {
	if bg.hasFileMax {
		fw.max, fw.maxErr = bg.fileMax, limitErr(bg.fileSetting, errdefs.ErrInsufficientStorage, "%s", bg.fileMsg)
	}
	if min := s.opts.Limits.MinFree; min > 0 {
		root := s.root()
		fw.nextCheck = freeCheckEvery
		fw.check = func() error {
			free, err := s.statfs(root)
			if err != nil {
				return err
			}
			if free < min {
				return limitErr(SettingMinFree, errdefs.ErrInsufficientStorage,
					"the backups disk is down to %d bytes free, below min_free_disk (%d): the backup was aborted and removed; free space on the disk or delete backups", free, min)
			}
			return nil
		}
	}
}

// capReader fails a stream once it has delivered more than max bytes.
type capReader struct {
	r   io.Reader
	max int64
	n   int64
	err error
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.max <= 0 {
		return c.r.Read(p)
	}
	if c.n > c.max {
		return 0, c.err
	}
	// One byte past the cap tells a stream that ends exactly at it from
	// one that goes on.
	if rest := c.max + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, c.err
	}
	return n, err
}

// stallGuard cancels a stream that delivers nothing for its timeout.
type stallGuard struct {
	t       *time.Timer
	d       time.Duration
	stalled atomic.Bool
}

func newStallGuard(d time.Duration, cancel func()) *stallGuard {
	g := &stallGuard{d: d}
	g.t = time.AfterFunc(d, func() {
		g.stalled.Store(true)
		cancel()
	})
	return g
}

func (g *stallGuard) reader(r io.Reader) io.Reader { return stallReader{r, g} }

func (g *stallGuard) stop() { g.t.Stop() }

// err turns a failure of the stream into the stall that caused it.
func (g *stallGuard) err(err error) error {
	if err == nil || !g.stalled.Load() {
		return err
	}
	return limitErr(SettingIdleTimeout, errdefs.ErrDeadlineExceeded,
		"the workspace tar from the sandbox's agent delivered nothing for %s (backup_idle_timeout): the backup was aborted and removed", g.d)
}

type stallReader struct {
	r io.Reader
	g *stallGuard
}

func (s stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.g.t.Reset(s.g.d)
	}
	return n, err
}

// limitReason is the reason field of a backup-failed event.
func limitReason(err error) string {
	var le *LimitError
	if errors.As(err, &le) {
		return le.Setting
	}
	return "error"
}

// roomForCommit refuses a snapshot's commit when the data dir's disk is
// already below its reserve.
func (s *Service) roomForCommit() error {
	min := s.opts.Limits.MinFree
	if min <= 0 {
		return nil
	}
	free, err := s.statfs(s.root())
	if err != nil {
		return err
	}
	if free <= min {
		return limitErr(SettingMinFree, errdefs.ErrInsufficientStorage,
			"the data dir's disk has %d bytes free, min_free_disk keeps %d free: the snapshot's image was not committed; free space on the disk or delete snapshots", free, min)
	}
	return nil
}
