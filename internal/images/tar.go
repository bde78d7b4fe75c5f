package images

import (
	"archive/tar"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// rootfs writes a synthetic root filesystem as a tar stream.
type rootfs struct {
	tw *tar.Writer
}

// epoch gives built images stable file times.
var epoch = time.Unix(0, 0)

func (r *rootfs) dir(name string, mode int64) error {
	return r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: epoch})
}

func (r *rootfs) file(name string, mode int64, data []byte) error {
	if err := r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := r.tw.Write(data)
	return err
}

// hostFile copies a host file into the image.
func (r *rootfs) hostFile(name string, mode int64, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: fi.Size(), ModTime: epoch}); err != nil {
		return err
	}
	_, err = io.Copy(r.tw, f)
	return err
}

func (r *rootfs) symlink(name, target string) error {
	return r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: epoch})
}

// hardlink links name to target. mode must be target's: the engine applies
// a link's mode to the file it shares.
func (r *rootfs) hardlink(name, target string, mode int64) error {
	return r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: mode, ModTime: epoch})
}

// checkStatic fails unless the program at p is a statically linked ELF:
// a dynamically linked one would not run in an image without its libraries.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; install a static build (Debian: busybox-static)", p)
		}
	}
	return nil
}

// tarTree writes the directory tree at root as a root filesystem, keeping
// owners, modes, symlinks and hard links. Contents of /proc, /sys and /dev
// are skipped: the engine provides them at run time.
func tarTree(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{} // (dev, inode) → first path, for hard links
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := filepath.ToSlash(rel)
		if top, rest, _ := strings.Cut(name, "/"); rest != "" && (top == "proc" || top == "sys" || top == "dev") {
			if de.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		// Names, not ids, would be looked up on the host; the image needs
		// the numeric owners as debootstrap made them.
		hdr.Uname, hdr.Gname = "", ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			links[key] = name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
