// Package backup owns sandbox backups and snapshots on the daemon side: the
// workspace tars under <data-dir>/backups/<sandbox-id>/, their records in the
// store, retention, uploads, restores (carried out inside the sandbox by its
// agent, never on the host) and snapshots (an engine image of the root
// filesystem plus a workspace backup).
//
// A backup file becomes visible only whole: it is written to a temp file
// while its size and sha256 are computed, synced, renamed into place, and
// only then recorded. A daemon killed half-way leaves a temp file, which
// Recover removes at the next start; nothing half-made is ever listed.
package backup

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/keyedmutex"
	"github.com/hotcell/hotcell/internal/wire"
)

// DefaultKeep is how many backups a sandbox keeps when nothing else is said.
const DefaultKeep = 10

// Sources of a backup.
const (
	SourceBackup   = "backup"
	SourceUpload   = "upload"
	SourceSnapshot = "snapshot" // a snapshot's workspace: kept while the snapshot is
	SourceTemplate = "template" // a template's workspace seed: kept while the template version is
)

// owned reports whether a backup belongs to a snapshot or a template:
// retention and a plain delete leave it alone.
func owned(b wire.Backup) bool { return b.Source == SourceSnapshot || b.Source == SourceTemplate }

// Store is what the service needs from persistence (store.Store).
type Store interface {
	PutBackup(ctx context.Context, b wire.Backup) error
	GetBackup(ctx context.Context, sandboxID, id string) (wire.Backup, error)
	ListBackups(ctx context.Context, sandboxID string) ([]wire.Backup, error)
	DeleteBackup(ctx context.Context, sandboxID, id string) error
	PutSnapshot(ctx context.Context, sn wire.Snapshot) error
	GetSnapshot(ctx context.Context, sandboxID, id string) (wire.Snapshot, error)
	ListSnapshots(ctx context.Context, sandboxID string) ([]wire.Snapshot, error)
	DeleteSnapshot(ctx context.Context, sandboxID, id string) error
}

// Sandboxes is what the service needs from the sandbox manager.
type Sandboxes interface {
	Get(ctx context.Context, id string) (wire.Sandbox, error)
	// Agent returns a running sandbox's agent, or a conflict naming the state.
	Agent(ctx context.Context, id string) (*agentconn.Conn, error)
	// Hold keeps the sandbox's lifecycle and reconciler still until the
	// returned func is called, while the box is changed outside the state
	// machine (the engine pauses it for a commit). It fails when ctx
	// ends first, or when the lock among the daemons of a set cannot be
	// taken.
	Hold(ctx context.Context, id string) (func(), error)
	// Event records an event in the sandbox's event log (backed-up,
	// restored, snapshot); it never fails the operation.
	Event(ctx context.Context, id, typ, message string, fields map[string]string)
}

// Options configure a Service.
type Options struct {
	// Dir is where backups are kept (config's BackupsPath).
	Dir   string
	Store Store
	// Shared says other daemons may serve the store (a set, on the
	// kubernetes driver): their backups are recorded there too, kept in
	// their Dir, which may be this one (a volume the set mounts) or not.
	// Recover then leaves alone what another daemon may be writing, and a
	// record whose file is not in Dir.
	Shared bool
	// Sandboxes is the sandbox manager.
	Sandboxes Sandboxes
	// Keep is how many backups (not counting snapshots' workspaces) each
	// sandbox keeps; the oldest go first. 0 means DefaultKeep.
	Keep int
	// Snapshotter commits boxes to images; nil turns snapshots off (501),
	// saying NoSnapshots (what to do about it) when set.
	Snapshotter driver.Snapshotter
	NoSnapshots string
	// Limits bound each backup's size, each sandbox's backups, and the
	// free space backups leave on the daemon's disk (limits.go).
	Limits Limits
	// Ops owns backups, restores and snapshots in flight: the daemon waits
	// for them at shutdown and cancels them after the grace period, and a
	// cancelled one leaves no file and no record. Nil: a group of its own.
	Ops *inflight.Group
	Log *slog.Logger
}

// Service manages backups and snapshots. It is safe for concurrent use.
type Service struct {
	opts      Options
	log       *slog.Logger
	sandboxes Sandboxes

	locks keyedmutex.Map // one per sandbox id

	// statfs reports the free bytes of a path's filesystem (freeBytes;
	// tests replace it).
	statfs func(path string) (int64, error)
}

// New returns a Service. The sandbox manager does not know it: a create
// that restores a backup gets its populate step from PrepareCreate.
func New(opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Ops == nil {
		opts.Ops = inflight.New()
	}
	if opts.Limits.IdleTimeout <= 0 {
		opts.Limits.IdleTimeout = DefaultIdleTimeout
	}
	return &Service{opts: opts, log: opts.Log.With("component", "backup"), sandboxes: opts.Sandboxes, statfs: freeBytes}
}

// lock serialises backups, restores and snapshots of one sandbox: a backup
// taken during a restore would see half of each workspace.
func (s *Service) lock(id string) func() { return s.locks.Lock(id) }

var idPattern = regexp.MustCompile(`^(bk|sn)-[0-9a-f]{12}$`)

// ValidateID checks a backup id (bk-…) or snapshot id (sn-…) from a request.
func ValidateID(field, id string) error {
	if !idPattern.MatchString(id) {
		return errdefs.Invalid(field, "%q is not a backup or snapshot id (bk-… or sn-… with 12 hex digits)", id)
	}
	return nil
}

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func (s *Service) root() string { return s.opts.Dir }

func (s *Service) dir(sandboxID string) string {
	return filepath.Join(s.root(), sandboxID)
}

func (s *Service) file(b wire.Backup) string {
	name := b.ID + ".tar"
	if b.Gzip {
		name += ".gz"
	}
	return filepath.Join(s.dir(b.SandboxID), name)
}

const tmpPrefix = ".tmp-"

// sharedGrace is how old a file of a shared Dir must be before Recover
// takes it for one a killed daemon left: another daemon of the set may
// still be writing a younger one (a backup's file is written at least
// every backup_idle_timeout, and recorded as soon as it is renamed).
const sharedGrace = time.Hour

// Recover removes what a daemon killed during a backup or upload left:
// temp files, and finished files that were never recorded. A record whose
// file is gone (a delete cut short) is dropped, so nothing listed is known
// to be missing. When no record has its file, Dir is most likely not the
// directory that holds them (backup_dir changed, its volume not mounted):
// it drops none then, and says so. On a shared store it drops no record
// (the file may be in another daemon's Dir) and removes only files older
// than sharedGrace.
func (s *Service) Recover(ctx context.Context) error {
	root := s.root()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("create backups dir: %w", err)
	}
	recs, err := s.opts.Store.ListBackups(ctx, "")
	if err != nil {
		return err
	}
	known := map[string]bool{}
	var missing []wire.Backup
	for _, b := range recs {
		p := s.file(b)
		known[p] = true
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, b)
		}
	}
	switch {
	case len(missing) == 0:
	case s.opts.Shared:
		s.log.Warn("backups recorded in the store have no file in this daemon's backup_dir: they were taken by a daemon whose backup_dir is not this one, and this daemon cannot restore them; give every daemon of the set the same backup_dir, a volume they all mount (docs/kubernetes.md, Backups on a set of daemons)",
			"backups", len(missing), "backupDir", root)
	case len(missing) == len(recs):
		s.log.Warn("no backup recorded in the store has its file in backup_dir: it is most likely not the directory that holds them (backup_dir changed, or its volume is not mounted); the records are kept: point backup_dir at that directory (data_dir/backups by default), or delete the backups",
			"backups", len(missing), "backupDir", root)
	default:
		for _, b := range missing {
			s.log.Warn("backup file is missing; dropping its record", "sandbox", b.SandboxID, "backup", b.ID, "path", s.file(b))
			if err := s.opts.Store.DeleteBackup(ctx, b.SandboxID, b.ID); err != nil {
				return err
			}
		}
	}
	dirs, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("read backups dir: %w", err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, err := os.ReadDir(filepath.Join(root, d.Name()))
		if err != nil {
			return fmt.Errorf("read backups dir: %w", err)
		}
		for _, f := range files {
			p := filepath.Join(root, d.Name(), f.Name())
			if known[p] {
				continue
			}
			if s.opts.Shared {
				if fi, err := f.Info(); err != nil || time.Since(fi.ModTime()) < sharedGrace {
					continue // another daemon's, being written or just renamed
				}
			}
			s.log.Info("removing an unfinished or unrecorded backup file", "path", p)
			if err := os.Remove(p); err != nil {
				s.log.Warn("remove unfinished backup file", "path", p, "err", err)
			}
		}
	}
	return nil
}

// fileWriter writes a backup to a temp file, counting and hashing what goes
// to disk, and renames it into place on commit. It refuses to grow past
// max (when maxErr is set) and calls check every freeCheckEvery bytes.
type fileWriter struct {
	f      *os.File
	final  string
	hash   hashWriter
	size   int64
	closed bool

	max       int64
	maxErr    error
	check     func() error
	nextCheck int64
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (s *Service) newFile(b wire.Backup) (*fileWriter, error) {
	dir := s.dir(b.SandboxID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create backup dir: %w", err)
	}
	final := s.file(b)
	f, err := os.OpenFile(filepath.Join(dir, tmpPrefix+filepath.Base(final)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create backup file: %w", err)
	}
	return &fileWriter{f: f, final: final, hash: sha256.New()}, nil
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.maxErr != nil && w.size+int64(len(p)) > w.max {
		return 0, w.maxErr
	}
	if w.check != nil && w.size >= w.nextCheck {
		if err := w.check(); err != nil {
			return 0, err
		}
		w.nextCheck = w.size + freeCheckEvery
	}
	n, err := w.f.Write(p)
	w.hash.Write(p[:n])
	w.size += int64(n)
	if err != nil {
		return n, diskErr(err)
	}
	return n, nil
}

// diskErr says plainly when the backups disk is full.
func diskErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("write backup: the backups disk is full (%v); free space or delete backups: %w", err, errdefs.ErrInsufficientStorage)
	}
	return fmt.Errorf("write backup: %w", err)
}

func (w *fileWriter) sum() string { return hex.EncodeToString(w.hash.Sum(nil)) }

// commit makes the file durable and visible under its final name.
func (w *fileWriter) commit() error {
	if err := w.f.Sync(); err != nil {
		return diskErr(err)
	}
	if err := w.f.Close(); err != nil {
		return diskErr(err)
	}
	w.closed = true
	if err := os.Rename(w.f.Name(), w.final); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	syncDir(filepath.Dir(w.final))
	return nil
}

// abort removes the temp file (or the renamed file, when recording failed).
func (w *fileWriter) abort() {
	if !w.closed {
		_ = w.f.Close()
		_ = os.Remove(w.f.Name())
		return
	}
	_ = os.Remove(w.final)
	_ = os.Remove(w.f.Name())
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// Progress learns how many bytes of the workspace tar were read so far.
type Progress func(bytes int64)

// Create backs up a running sandbox's workspace.
func (s *Service) Create(ctx context.Context, sandboxID string, req wire.CreateBackupRequest, progress Progress) (wire.Backup, error) {
	ctx, end, err := s.opts.Ops.Begin(ctx)
	if err != nil {
		return wire.Backup{}, err
	}
	defer end()
	conn, err := s.sandboxes.Agent(ctx, sandboxID)
	if err != nil {
		return wire.Backup{}, err
	}
	unlock := s.lock(sandboxID)
	defer unlock()
	keep := s.opts.Keep
	if req.Keep > 0 {
		keep = req.Keep
	}
	b, err := s.create(ctx, conn, sandboxID, req.Gzip, SourceBackup, keep, progress)
	if err != nil {
		s.failed(ctx, sandboxID, err)
		return b, err
	}
	s.retain(ctx, sandboxID, keep)
	s.sandboxes.Event(ctx, sandboxID, wire.SandboxEventBackedUp, b.ID, map[string]string{"backup": b.ID, "size": fmt.Sprint(b.Size), "sha256": b.SHA256})
	return b, nil
}

// failed records a backup's failure in the sandbox's event log, with the
// setting that stopped it as the reason ("error" for anything else).
func (s *Service) failed(ctx context.Context, sandboxID string, err error) {
	reason := limitReason(err)
	s.log.Warn("backup failed", "sandbox", sandboxID, "reason", reason, "err", err)
	s.sandboxes.Event(context.WithoutCancel(ctx), sandboxID, wire.SandboxEventBackupFailed, err.Error(),
		map[string]string{"reason": reason})
}

// create streams the workspace tar from the agent into a recorded backup.
// The tar comes from inside the sandbox, where code runs as root and can
// answer for the agent: it is capped (backup_max_size), the file it makes
// is capped by the quota and the disk's reserve, and a stream that stalls
// is cut (limits.go). keep is the retention the caller applies afterwards.
func (s *Service) create(ctx context.Context, conn *agentconn.Conn, sandboxID string, gz bool, source string, keep int, progress Progress) (wire.Backup, error) {
	b := wire.Backup{ID: newID("bk"), SandboxID: sandboxID, Gzip: gz, Source: source}
	bg, err := s.plan(ctx, sandboxID, keep)
	if err != nil {
		return b, fmt.Errorf("back up sandbox %s: %w", sandboxID, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stall := newStallGuard(s.opts.Limits.IdleTimeout, cancel)
	defer stall.stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/archive?"+url.Values{"path": {fspath.Workspace}}.Encode(), nil)
	if err != nil {
		return b, err
	}
	resp, err := conn.Do(req)
	if err != nil {
		return b, fmt.Errorf("back up sandbox %s: %w", sandboxID, stall.err(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("back up sandbox %s: %w", sandboxID, errdefs.Read(resp))
	}
	fw, err := s.newFile(b)
	if err != nil {
		return b, diskErr(err)
	}
	s.guard(fw, bg)
	src := s.capped(stall.reader(resp.Body), "the workspace tar")
	if err := s.fill(fw, src, gz, progress); err != nil {
		fw.abort()
		return b, fmt.Errorf("back up sandbox %s: %w", sandboxID, stall.err(err))
	}
	stall.stop()
	return s.record(ctx, fw, b)
}

// capped cuts r once it passes backup_max_size.
func (s *Service) capped(r io.Reader, what string) io.Reader {
	max := s.opts.Limits.MaxSize
	return &capReader{r: r, max: max, err: limitErr(SettingMaxSize, errdefs.ErrTooLarge,
		"%s passed backup_max_size (%d bytes): the backup was aborted and removed; make the workspace smaller or raise backup_max_size", what, max)}
}

// fill copies the tar stream src into fw (compressing it when gz) and
// checks, while it streams, that it is a whole tar: an agent whose stream
// stopped early must not leave a backup that looks complete.
func (s *Service) fill(fw *fileWriter, src io.Reader, gz bool, progress Progress) error {
	chk := newTarChecker()
	defer chk.close()
	counted := &progressReader{r: src, fn: progress}
	var dst io.Writer = fw
	var zw *gzipWriter
	if gz {
		zw = newGzipWriter(fw)
		dst = zw
	}
	if err := copyTo(io.MultiWriter(dst, chk), counted); err != nil {
		return err
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return err
		}
	}
	counted.report()
	if err := chk.finish(); err != nil {
		return fmt.Errorf("the workspace tar is incomplete: %w", err)
	}
	return nil
}

// readError marks a failure of the source of a copy, not of the disk.
type readError struct{ error }

func (e readError) Unwrap() error { return e.error }

// copyTo copies src to dst and tells read failures (readError) from write
// failures.
func copyTo(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 256<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return readError{err}
		}
	}
}

// record commits fw's file and records b with its size and sha256.
func (s *Service) record(ctx context.Context, fw *fileWriter, b wire.Backup) (wire.Backup, error) {
	if err := fw.commit(); err != nil {
		fw.abort()
		return b, err
	}
	b.Size = fw.size
	b.SHA256 = fw.sum()
	b.CreatedAt = time.Now().UTC()
	// The record outlives the request: a client gone now must not leave a
	// finished file without its record.
	if err := s.opts.Store.PutBackup(context.WithoutCancel(ctx), b); err != nil {
		fw.abort()
		return b, err
	}
	s.log.Info("backup recorded", "sandbox", b.SandboxID, "backup", b.ID, "size", b.Size, "source", b.Source)
	return b, nil
}

// progressReader reports bytes read, at most every 200ms.
type progressReader struct {
	r    io.Reader
	fn   Progress
	n    int64
	last time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.fn != nil && time.Since(p.last) > 200*time.Millisecond {
		p.last = time.Now()
		p.fn(p.n)
	}
	return n, err
}

func (p *progressReader) report() {
	if p.fn != nil {
		p.fn(p.n)
	}
}

// retain deletes sandboxID's oldest backups beyond keep. Snapshots'
// workspaces do not count and never go this way.
func (s *Service) retain(ctx context.Context, sandboxID string, keep int) {
	list, err := s.opts.Store.ListBackups(ctx, sandboxID)
	if err != nil {
		s.log.Warn("list backups for retention", "sandbox", sandboxID, "err", err)
		return
	}
	n := 0
	for _, b := range list { // newest first
		if owned(b) {
			continue
		}
		n++
		if n <= keep {
			continue
		}
		if err := s.remove(ctx, b); err != nil {
			s.log.Warn("retention: delete backup", "sandbox", sandboxID, "backup", b.ID, "err", err)
		}
	}
}

// List returns a sandbox's backups, newest first.
func (s *Service) List(ctx context.Context, sandboxID string) ([]wire.Backup, error) {
	return s.opts.Store.ListBackups(ctx, sandboxID)
}

// Get returns one backup's record.
func (s *Service) Get(ctx context.Context, sandboxID, id string) (wire.Backup, error) {
	return s.opts.Store.GetBackup(ctx, sandboxID, id)
}

// Open returns a backup's file for download. The caller closes it.
func (s *Service) Open(ctx context.Context, sandboxID, id string) (*os.File, wire.Backup, error) {
	b, err := s.Get(ctx, sandboxID, id)
	if err != nil {
		return nil, b, err
	}
	f, err := s.openFile(b)
	if err != nil {
		return nil, b, err
	}
	return f, b, nil
}

// openFile opens a backup's file. One missing on a shared store was most
// likely taken by a daemon whose backup_dir is not this one's: the error
// says so, and what to do.
func (s *Service) openFile(b wire.Backup) (*os.File, error) {
	f, err := os.Open(s.file(b))
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, os.ErrNotExist) && s.opts.Shared:
		return nil, fmt.Errorf("backup %s: its file is not in this daemon's backup_dir (%s): another daemon of the set took it, and its backup_dir is not this one's; give every daemon the same backup_dir, a volume they all mount (docs/kubernetes.md, Backups on a set of daemons): %w", b.ID, s.root(), errdefs.ErrConflict)
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("backup %s: its file is missing: %w", b.ID, errdefs.ErrConflict)
	}
	return nil, fmt.Errorf("open backup %s: %w", b.ID, err)
}

// Delete removes a backup. A snapshot's workspace goes with its snapshot.
func (s *Service) Delete(ctx context.Context, sandboxID, id string) error {
	ctx, end, err := s.opts.Ops.Begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	b, err := s.Get(ctx, sandboxID, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	switch b.Source {
	case SourceSnapshot:
		return fmt.Errorf("backup %s is the workspace of a snapshot of sandbox %s; delete the snapshot instead: %w", id, sandboxID, errdefs.ErrConflict)
	case SourceTemplate:
		return fmt.Errorf("backup %s is the workspace seed of a template saved from sandbox %s; delete the template instead: %w", id, sandboxID, errdefs.ErrConflict)
	}
	return s.remove(ctx, b)
}

// remove drops the record first, then the file: a crash between the two
// leaves an unrecorded file, which Recover removes, never a record of a
// missing file.
func (s *Service) remove(ctx context.Context, b wire.Backup) error {
	if err := s.opts.Store.DeleteBackup(context.WithoutCancel(ctx), b.SandboxID, b.ID); err != nil {
		return err
	}
	if err := os.Remove(s.file(b)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete backup file: %w", err)
	}
	return nil
}

// Upload records a tar (or tar.gz) sent by a client as a backup of
// sandboxID. It is checked to be a whole tar whose names stay inside the
// workspace; its content is only ever extracted inside a sandbox.
func (s *Service) Upload(ctx context.Context, sandboxID string, body io.Reader) (wire.Backup, error) {
	ctx, end, err := s.opts.Ops.Begin(ctx)
	if err != nil {
		return wire.Backup{}, err
	}
	defer end()
	if _, err := s.sandboxes.Get(ctx, sandboxID); err != nil {
		return wire.Backup{}, err
	}
	br := newPeekReader(body)
	gz, err := br.isGzip()
	if err != nil {
		return wire.Backup{}, errdefs.Invalid("body", "read upload: %v", err)
	}
	unlock := s.lock(sandboxID)
	defer unlock()
	b := wire.Backup{ID: newID("bk"), SandboxID: sandboxID, Gzip: gz, Source: SourceUpload}
	bg, err := s.plan(ctx, sandboxID, s.opts.Keep)
	if err != nil {
		return b, fmt.Errorf("upload a backup of sandbox %s: %w", sandboxID, err)
	}
	fw, err := s.newFile(b)
	if err != nil {
		return b, diskErr(err)
	}
	s.guard(fw, bg)
	chk := newTarChecker()
	if gz {
		chk = newGzipTarChecker()
	}
	err = copyTo(io.MultiWriter(fw, chk), s.capped(br, "the upload"))
	var rerr readError
	var lerr *LimitError
	if errors.As(err, &lerr) {
		err = lerr
	} else if errors.As(err, &rerr) {
		err = errdefs.Invalid("body", "read upload: %v", rerr.error)
	}
	if err == nil {
		if err = chk.finish(); err != nil {
			err = errdefs.Invalid("body", "the upload is not a whole tar archive: %v", err)
		}
	}
	chk.close()
	if err != nil {
		fw.abort()
		return b, fmt.Errorf("upload a backup of sandbox %s: %w", sandboxID, err)
	}
	b, err = s.record(ctx, fw, b)
	if err != nil {
		return b, err
	}
	s.retain(ctx, sandboxID, s.opts.Keep)
	return b, nil
}
