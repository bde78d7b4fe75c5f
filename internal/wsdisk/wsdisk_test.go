package wsdisk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/testenv"
)

func openPool(t *testing.T) *Pool {
	t.Helper()
	testenv.RequireRoot(t, "loop-mounting filesystem images")
	testenv.RequireTool(t, "mkfs.ext4")
	dir := t.TempDir()
	p, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		p.Close() // no spare being made while the dir goes
		// A failed test must not leave loop mounts behind. Not t.Context():
		// it is cancelled before cleanups run.
		ids, _ := p.IDs()
		for _, id := range ids {
			if err := p.Remove(context.Background(), id); err != nil {
				t.Errorf("remove disk %s: %v", id, err)
			}
		}
	})
	return p
}

func TestDiskHoldsItsSize(t *testing.T) {
	p := openPool(t)
	path, created, err := p.Ensure(t.Context(), "sb1", 16<<20)
	if err != nil || !created {
		t.Fatalf("Ensure: created %v, err %v", created, err)
	}
	mp := p.MountPoint("sb1")
	if ok, _ := Mounted(mp); !ok || filepath.Dir(path) != mp {
		t.Fatalf("%s is not mounted, or %s is not on it", mp, path)
	}
	// Mounted nodev and nosuid (the content is the sandbox's), with
	// discard, whether by mountLoop or mount(8).
	if opts, super := mountOptionsOf(t, mp); !slices.Contains(opts, "nodev") || !slices.Contains(opts, "nosuid") || !slices.Contains(super, "discard") {
		t.Errorf("%s mounted with %q, super options %q; want nodev, nosuid and discard", mp, opts, super)
	}
	if _, err := os.Stat(filepath.Join(mp, "lost+found")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lost+found: got %v, want it removed", err)
	}
	// Fill it: the write past its size fails with ENOSPC.
	f, err := os.Create(filepath.Join(path, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{1}, 1<<20)
	var werr error
	for range 32 {
		if _, werr = f.Write(buf); werr != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 32 MiB into a 16 MiB disk: got %v, want ENOSPC", werr)
	}

	// Ensure again keeps it and its content; IDs lists it.
	if _, created, err := p.Ensure(t.Context(), "sb1", 64<<20); err != nil || created {
		t.Fatalf("second Ensure: created %v, err %v", created, err)
	}
	if ids, err := p.IDs(); err != nil || len(ids) != 1 || ids[0] != "sb1" {
		t.Fatalf("IDs: got %v, %v, want [sb1]", ids, err)
	}

	// Unmounted behind its back (a host reboot): MountAll brings it back
	// with its content.
	if err := unmount(t.Context(), mp); err != nil {
		t.Fatal(err)
	}
	// Unmounted, the workspace path is not there: an engine refuses to
	// bind it rather than binding the host's empty mount point.
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("workspace path of an unmounted disk: got %v, want it absent", err)
	}
	if err := p.MountAll(t.Context()); err != nil {
		t.Fatalf("MountAll: %v", err)
	}
	if _, err := os.Stat(filepath.Join(path, "fill")); err != nil {
		t.Fatalf("after MountAll: %v", err)
	}

	if err := p.Remove(t.Context(), "sb1"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if ok, _ := Mounted(mp); ok {
		t.Errorf("%s still mounted after Remove", mp)
	}
	// The loop device goes with the mount (autoclear), not just the
	// mount; the kernel may let it go a moment after the unmount returns.
	if held := loopsBacking(p.Dir()); len(held) > 0 {
		time.Sleep(time.Second)
		if held := loopsBacking(p.Dir()); len(held) > 0 {
			t.Errorf("loop devices still backed by the pool's images after Remove: %q", held)
		}
	}
	p.Close() // the spare made after the Ensure is whole now
	if ents, _ := os.ReadDir(p.Dir()); len(ents) != 1 || ents[0].Name() != "16777216"+spareExt {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("pool dir after Remove: got %q, want the spare of 16 MiB alone", names)
	}
	if err := p.Remove(t.Context(), "sb1"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, ok, err := p.Mount(t.Context(), "sb1"); ok || err != nil {
		t.Errorf("Mount of a removed disk: ok %v, err %v; want false, nil", ok, err)
	}
}

func TestRefusesPaths(t *testing.T) {
	p := &Pool{dir: t.TempDir()}
	for _, id := range []string{"", "../x", "a/b", ".probe"} {
		if _, _, err := p.Ensure(t.Context(), id, MinSize); err == nil {
			t.Errorf("Ensure(%q): got nil error", id)
		}
		if err := p.Remove(t.Context(), id); err == nil {
			t.Errorf("Remove(%q): got nil error", id)
		}
	}
}

// loopsBacking lists the loop devices whose backing file is under dir.
func loopsBacking(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, bf := range files {
		if b, err := os.ReadFile(bf); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			out = append(out, bf)
		}
	}
	return out
}

// TestSpare: an Ensure takes the spare image of its size (formatted, never
// mounted) instead of running mkfs, and a new spare is made behind it;
// a request of another size replaces the spare with one of that size.
func TestSpare(t *testing.T) {
	p := openPool(t)
	ctx := t.Context()
	if _, _, err := p.Ensure(ctx, "sb1", 16<<20); err != nil {
		t.Fatal(err)
	}
	p.wg.Wait()
	spare := p.spare(16 << 20)
	st, err := os.Stat(spare)
	if err != nil {
		t.Fatalf("no spare after the first Ensure: %v", err)
	}
	// The spare becomes sb2's image: same inode, and it mounts as a
	// workspace of its size.
	path, created, err := p.Ensure(ctx, "sb2", 16<<20)
	if err != nil || !created {
		t.Fatalf("Ensure from the spare: created %v, err %v", created, err)
	}
	img, err := os.Stat(p.image("sb2"))
	if err != nil || !os.SameFile(st, img) {
		t.Fatalf("sb2's image is not the spare (%v)", err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("workspace on the spare: %v", err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil || int64(fs.Blocks)*fs.Bsize > 16<<20 {
		t.Errorf("workspace from the spare: %d bytes, %v; want at most 16 MiB", int64(fs.Blocks)*fs.Bsize, err)
	}
	p.wg.Wait()
	if _, err := os.Stat(spare); err != nil {
		t.Errorf("no new spare after one was taken: %v", err)
	}
	// Another size: its disk is made by mkfs, and the spare follows it.
	if _, _, err := p.Ensure(ctx, "sb3", 24<<20); err != nil {
		t.Fatal(err)
	}
	p.wg.Wait()
	if _, err := os.Stat(spare); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the spare of the old size is left: %v", err)
	}
	if _, err := os.Stat(p.spare(24 << 20)); err != nil {
		t.Errorf("no spare of the new size: %v", err)
	}
	if ids, _ := p.IDs(); len(ids) != 3 {
		t.Errorf("IDs: got %v, want the three disks and no spare", ids)
	}
}

// mountOptionsOf returns the mount options and the filesystem's options of
// the mount at mp, from /proc/self/mountinfo.
func mountOptionsOf(t *testing.T, mp string) (opts, super []string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 || fspath.UnescapeMount(f[4]) != mp {
			continue
		}
		i := slices.Index(f, "-")
		if i < 0 || i+3 >= len(f) {
			continue
		}
		opts, super = strings.Split(f[5], ","), strings.Split(f[i+3], ",")
	}
	if opts == nil {
		t.Fatalf("%s is not in the mount table", mp)
	}
	return opts, super
}
