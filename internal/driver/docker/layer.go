package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
)

var _ driver.LayerSizer = (*Driver)(nil)

// maxLayerEntries bounds one measurement: a layer of more files than this
// is reported with what was counted, which is a lower bound.
const maxLayerEntries = 2_000_000

// LayerSize sums the blocks allocated under the box's overlay upper dir,
// as du does (hard links once). Only overlay-style storage drivers report
// an upper dir; others are ErrNotImplemented-like errors for the caller to
// log.
func (d *Driver) LayerSize(ctx context.Context, id string) (int64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	res, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		return 0, classify("inspect container "+ContainerName(id), err)
	}
	gd := res.Container.GraphDriver
	if gd == nil || gd.Data["UpperDir"] == "" {
		return 0, fmt.Errorf("measure the writable layer of %s: storage driver reports no upper dir", id)
	}
	return dirSize(ctx, gd.Data["UpperDir"])
}

// dirSize is du -s in bytes. It never follows symlinks (the tree is the
// sandbox's), and stops early when ctx ends or the entry cap is reached.
func dirSize(ctx context.Context, root string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var total int64
	n := 0
	errStop := errors.New("stop")
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			if path == root {
				return err
			}
			return nil
		}
		n++
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if n > maxLayerEntries {
			return errStop
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return nil
		}
		if st.Nlink > 1 && !de.IsDir() {
			k := inode{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return total, fmt.Errorf("measure %s: %w", root, err)
	}
	return total, nil
}
