// Package wsdisk gives each sandbox workspace a filesystem of its own: a
// sparse ext4 image under the daemon's data dir, loop-mounted on a directory
// that the box's /workspace is bound from. The filesystem's size is the
// workspace's disk limit, so a write past it fails with ENOSPC inside the box
// and touches no other filesystem.
//
// Why images and not quotas: overlay2 on ext4 has no --storage-opt size, and
// project quotas (XFS or ext4) need a kernel built with quota support, which
// not every host has (this project's CI kernel has neither). A loop device
// needs only root and the loop driver. An image costs a truncate, an mkfs of a
// sparse file (tens of milliseconds, a few MiB of metadata whatever its size)
// and a mount at create; deleted files go back to the host through discard.
//
// The mounts outlive the daemon: a restarted daemon finds them mounted, and
// after a host reboot MountAll mounts every image again before any box starts.
package wsdisk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/fspath"
)

const (
	imageExt = ".img"
	tmpExt   = ".img.tmp"
	// MinSize is the smallest disk: ext4 with a journal needs room for its
	// own metadata.
	MinSize = 8 << 20
	// probeID is the image Open makes and removes to prove the host can do this.
	probeID = ".probe"
)

// mountOptions: discard gives the host back the blocks of deleted files
// (the image stays sparse); noinit_itable keeps ext4 from zeroing inode
// tables in the background, which a sparse image reads as zeros anyway;
// nodev and nosuid because the content is the sandbox's. mountLoop passes
// the same without mount(8); this is the fallback's.
const mountOptions = "loop,discard,noinit_itable,nodev,nosuid"

// mkfsArgs make ext4 without reserved blocks (the box's root would get them
// anyway) and without touching the sparse file beyond its metadata.
var mkfsArgs = []string{"-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"}

// validID accepts the names a pool holds: sandbox ids, never a path.
var validID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// Pool holds the workspace disks under one directory. Calls for different
// ids may run concurrently; the caller serialises calls for one id.
//
// It keeps one spare: a formatted image of the size last asked for, never
// mounted, that the next Ensure of that size takes by a rename instead of
// running mkfs on a create's path (~30-60 ms of it here); a new spare is
// made in the background after each one is taken.
type Pool struct {
	dir string

	mu     sync.Mutex
	making bool // a spare is being made
	closed bool
	wg     sync.WaitGroup
}

// spareExt names the spare: <size in bytes>.spare.
const spareExt = ".spare"

func (p *Pool) spare(size int64) string {
	return filepath.Join(p.dir, strconv.FormatInt(size, 10)+spareExt)
}

// takeSpare moves a spare of size to img; false if there is none. Two
// creates cannot both take it: the rename is atomic.
func (p *Pool) takeSpare(size int64, img string) bool {
	return os.Rename(p.spare(size), img) == nil
}

// refill makes a spare of size in the background unless one is being made,
// and removes spares of other sizes (only the size last asked for is
// kept, so a host whose requests vary in size holds at most one).
func (p *Pool) refill(size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.making {
		return
	}
	p.making = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() {
			p.mu.Lock()
			p.making = false
			p.mu.Unlock()
		}()
		if old, _ := filepath.Glob(filepath.Join(p.dir, "*"+spareExt)); len(old) > 0 {
			for _, f := range old {
				if f != p.spare(size) {
					_ = os.Remove(f)
				}
			}
		}
		if _, err := os.Stat(p.spare(size)); err == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Made under a temporary name (MountAll removes a crash's) and
		// renamed when whole.
		tmp := p.spare(size) + tmpExt
		if err := makeImage(ctx, tmp, size); err != nil {
			_ = os.Remove(tmp)
			return // the next create runs mkfs itself
		}
		if err := os.Rename(tmp, p.spare(size)); err != nil {
			_ = os.Remove(tmp)
		}
	}()
}

// Close waits for a spare being made; no new one is made after it.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// Has reports whether id has a disk in the pool.
func (p *Pool) Has(id string) bool {
	if checkID(id) != nil {
		return false
	}
	_, err := os.Stat(p.image(id))
	return err == nil
}

// Open prepares dir as a pool and proves, by making, mounting and removing
// a small disk, that this host can loop-mount filesystem images. The error
// says what is missing (root, the loop driver, mkfs.ext4).
func Open(ctx context.Context, dir string) (*Pool, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("workspace disks need root (to loop-mount filesystem images)")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("workspace disks need %s (Debian: e2fsprogs, mount): %w", tool, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace disk dir: %w", err)
	}
	p := &Pool{dir: dir}
	if _, _, err := p.ensure(ctx, probeID, MinSize, false); err != nil {
		_ = p.remove(ctx, probeID)
		return nil, fmt.Errorf("workspace disks: make and mount a test image in %s: %w", dir, err)
	}
	if err := p.remove(ctx, probeID); err != nil {
		return nil, fmt.Errorf("workspace disks: remove the test image: %w", err)
	}
	return p, nil
}

// Dir is the pool's directory.
func (p *Pool) Dir() string { return p.dir }

// MountPoint is where id's disk is mounted.
func (p *Pool) MountPoint(id string) string { return filepath.Join(p.dir, id) }

// Path is the workspace on id's disk, the source of the box's /workspace:
// a directory inside the disk's filesystem, not its root, so that when the
// disk is not mounted (after a host reboot, before the daemon mounted it
// again) the path does not exist and the engine refuses to start the box,
// instead of binding the empty mount point on the host's own disk.
func (p *Pool) Path(id string) string { return filepath.Join(p.dir, id, workspaceDir) }

// workspaceDir is the workspace's directory on a disk.
const workspaceDir = "workspace"

func (p *Pool) image(id string) string { return filepath.Join(p.dir, id+imageExt) }

func checkID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("workspace disk: invalid sandbox id %q", id)
	}
	return nil
}

// Ensure makes id's disk of size bytes unless it exists, and mounts it. It
// returns the mount point and whether this call made the disk. An existing
// disk keeps its size.
func (p *Pool) Ensure(ctx context.Context, id string, size int64) (path string, created bool, err error) {
	if err := checkID(id); err != nil {
		return "", false, err
	}
	return p.ensure(ctx, id, size, true)
}

// ensure is Ensure; spare says whether a spare may be taken and made (not
// for Open's probe).
func (p *Pool) ensure(ctx context.Context, id string, size int64, spare bool) (string, bool, error) {
	img := p.image(id)
	if _, err := os.Stat(img); err == nil {
		return p.Path(id), false, p.mount(ctx, id)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	size = max(size, MinSize)
	if spare && p.takeSpare(size, img) {
		p.refill(size)
	} else {
		// Made under a temporary name: an image that exists is whole, so
		// a crash during mkfs leaves nothing that MountAll would try to
		// mount.
		tmp := filepath.Join(p.dir, id+tmpExt)
		if err := makeImage(ctx, tmp, size); err != nil {
			_ = os.Remove(tmp)
			return "", false, err
		}
		if err := os.Rename(tmp, img); err != nil {
			_ = os.Remove(tmp)
			return "", false, fmt.Errorf("workspace disk %s: %w", id, err)
		}
		if spare {
			p.refill(size)
		}
	}
	if err := p.mount(ctx, id); err != nil {
		_ = p.remove(context.WithoutCancel(ctx), id)
		return "", false, err
	}
	// ext4's lost+found would show in no workspace (that is a directory
	// beside it), but it is of no use to anyone either; e2fsck makes it
	// again when it needs it.
	_ = os.Remove(filepath.Join(p.MountPoint(id), "lost+found"))
	if err := os.Mkdir(p.Path(id), 0o755); err != nil {
		_ = p.remove(context.WithoutCancel(ctx), id)
		return "", false, fmt.Errorf("workspace disk %s: %w", id, err)
	}
	return p.Path(id), true, nil
}

func makeImage(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size disk image: %w", err)
	}
	args := slices.Clone(mkfsArgs)
	if size >= 512<<20 {
		// One inode per 8 KiB instead of ext4's 16 KiB: a workspace of
		// small files (node_modules) must not run out of inodes long
		// before bytes. Unused inode tables cost the host nothing (the
		// image is sparse); they take ~3% of the disk's own size.
		args = append(args, "-i", "8192")
	}
	return run(ctx, "mkfs.ext4", append(args, path)...)
}

// Mount mounts id's disk if it has one and it is not mounted. ok is false
// when id has no disk (its workspace is elsewhere).
func (p *Pool) Mount(ctx context.Context, id string) (path string, ok bool, err error) {
	if err := checkID(id); err != nil {
		return "", false, err
	}
	if _, err := os.Stat(p.image(id)); errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	return p.Path(id), true, p.mount(ctx, id)
}

func (p *Pool) mount(ctx context.Context, id string) error {
	mp := p.MountPoint(id)
	if ok, err := Mounted(mp); err != nil || ok {
		return err
	}
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("workspace disk %s: %w", id, err)
	}
	if ok, err := mountLoop(p.image(id), mp); ok {
		if err != nil {
			return fmt.Errorf("mount workspace disk %s: %w", id, err)
		}
		return nil
	}
	if err := run(ctx, "mount", "-t", "ext4", "-o", mountOptions, p.image(id), mp); err != nil {
		return fmt.Errorf("mount workspace disk %s: %w", id, err)
	}
	return nil
}

// Remove unmounts id's disk and deletes it. A disk that is not there is not
// an error, so Remove can be retried.
func (p *Pool) Remove(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return p.remove(ctx, id)
}

func (p *Pool) remove(ctx context.Context, id string) error {
	mp := p.MountPoint(id)
	if err := unmount(ctx, mp); err != nil {
		return fmt.Errorf("unmount workspace disk %s: %w", id, err)
	}
	for _, f := range []string{p.image(id), filepath.Join(p.dir, id+tmpExt)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove workspace disk %s: %w", id, err)
		}
	}
	// Remove, not RemoveAll: after the unmount the mount point is empty,
	// and a directory that is not must never be emptied by accident.
	if err := os.Remove(mp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove workspace disk mount point %s: %w", mp, err)
	}
	return nil
}

// unmount unmounts mp, detaching it if something still holds it (a box
// being removed by the engine at the same moment); the loop device is freed
// when the last user goes (mount(8) sets it to autoclear).
func unmount(ctx context.Context, mp string) error {
	for range 3 {
		ok, err := Mounted(mp)
		if err != nil || !ok {
			return err
		}
		// umount(2), not umount(8): a process less on every destroy. The
		// loop device goes with the mount all the same (mount(8) set it to
		// autoclear).
		if err := syscall.Unmount(mp, 0); err == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ok, err := Mounted(mp); err != nil || !ok {
		return err
	}
	if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("umount -l %s: %w", mp, err)
	}
	return nil
}

// IDs lists the sandboxes that have a disk in the pool.
func (p *Pool) IDs() ([]string, error) {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, fmt.Errorf("list workspace disks: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), imageExt); ok && checkID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// MountAll mounts every disk of the pool that is not mounted (after a host
// reboot) and removes images a crash left half made. It tries every disk and
// returns the failures together.
func (p *Pool) MountAll(ctx context.Context) error {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return fmt.Errorf("list workspace disks: %w", err)
	}
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, tmpExt) {
			errs = append(errs, os.Remove(filepath.Join(p.dir, name)))
			continue
		}
		if id, ok := strings.CutSuffix(name, imageExt); ok && checkID(id) == nil {
			errs = append(errs, p.mount(ctx, id))
		}
	}
	return errors.Join(errs...)
}

// Mounted reports whether path is a mount point in this mount namespace.
func Mounted(path string) (bool, error) {
	mps, err := MountPoints()
	if err != nil {
		return false, err
	}
	return slices.Contains(mps, filepath.Clean(path)), nil
}

// MountPoints lists this mount namespace's mount points.
func MountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 {
			out = append(out, fspath.UnescapeMount(f[4]))
		}
	}
	return out, sc.Err()
}

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
