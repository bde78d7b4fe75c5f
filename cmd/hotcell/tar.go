package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/hotcell/hotcell/internal/termsafe"
	"github.com/hotcell/hotcell/internal/treetar"
)

// writeTar writes the contents of dir as a tar, names relative to dir;
// what cannot be archived (sockets, devices, fifos) is skipped with a warning.
func writeTar(w io.Writer, dir string, warn io.Writer) error {
	return treetar.Write(w, dir, func(p string) {
		fmt.Fprintf(warn, "hotcell: cp: skipping %s: not a file, directory or symlink\n", termsafe.String(p))
	})
}

// entryName checks a tar entry name from a sandbox and returns it clean and
// relative; "" is the directory itself. It refuses rather than repairs:
// an absolute name or ".." has no honest meaning inside the destination.
func entryName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("refuse archive entry %q: contains a NUL byte", name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("refuse archive entry %q: absolute path", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("refuse archive entry %q: it escapes the destination", name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// extractTar extracts a tar that came out of a sandbox into dir. The tar is
// untrusted: names are checked, and every file operation goes through an
// os.Root, so that a symlink in the archive (or already in dir) cannot
// lead a later entry outside dir. Setuid, setgid and sticky bits are
// dropped; device nodes and other special files are skipped.
func extractTar(r io.Reader, dir string, warn io.Writer) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		perm := fs.FileMode(hdr.Mode).Perm()
		if name == "" {
			continue
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, perm|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("extract %s: %w", name, err)
			}
			if fi, err := root.Lstat(name); err != nil || !fi.IsDir() {
				return fmt.Errorf("extract %s: exists and is not a directory", name)
			}
		case tar.TypeReg:
			if err := extractFile(root, name, tr, perm); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
			// Keep mtimes so that make and friends see what changed; a
			// failure here loses nothing worth failing the copy for.
			if !hdr.ModTime.IsZero() {
				_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
			}
		case tar.TypeSymlink:
			// The link itself may point anywhere: it is only followed by
			// later entries through root, which refuses to leave dir.
			if err := replaceWith(root, name, func() error { return root.Symlink(hdr.Linkname, name) }); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		case tar.TypeLink:
			old, err := entryName(hdr.Linkname)
			if err != nil || old == "" {
				return fmt.Errorf("refuse archive entry %q: bad hard link target %q", hdr.Name, hdr.Linkname)
			}
			if err := replaceWith(root, name, func() error { return root.Link(old, name) }); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		default:
			fmt.Fprintf(warn, "hotcell: cp: skipping %s: unsupported entry type %q\n", termsafe.String(name), hdr.Typeflag)
		}
	}
}

func extractFile(root *os.Root, name string, r io.Reader, perm fs.FileMode) error {
	// A symlink at name would be followed by OpenFile (within root, but to
	// a different file than the archive names); replace it instead.
	if fi, err := root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := root.Remove(name); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replaceWith creates a link at name, replacing a file or link there but
// never a directory.
func replaceWith(root *os.Root, name string, create func() error) error {
	if fi, err := root.Lstat(name); err == nil {
		if fi.IsDir() {
			return errors.New("exists and is a directory")
		}
		if err := root.Remove(name); err != nil {
			return err
		}
	}
	return create()
}
