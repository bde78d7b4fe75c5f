// Package treetar writes a directory tree of this host as a tar stream, the
// form in which trees travel into a sandbox (hotcell cp, repository clones).
// Root filesystems for images keep owners and hard links and are written by
// internal/images instead.
package treetar

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes the contents of dir to w with names relative to dir. Files,
// directories and symlinks are archived, without owners (the host's ids mean
// nothing in a sandbox); other kinds (sockets, devices, fifos) are passed to
// skipped, which may be nil.
func Write(w io.Writer, dir string, skipped func(path string)) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.Mode().IsRegular(), info.IsDir():
		default:
			if skipped != nil {
				skipped(p)
			}
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// CopyN: a file that grows while it is read must not overrun the
		// size already written in its header.
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	return tw.Close()
}
