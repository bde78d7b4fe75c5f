package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
)

func (a *app) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between a sandbox and this machine",
		Long: `Copy a file or a directory between this machine and a sandbox. Exactly one of
SRC and DST is in a sandbox, written ID:PATH; a relative sandbox path is
relative to /workspace. A local path with a colon before any slash must be
written ./like:this.

As with cp -r: if DST is an existing directory, SRC is copied into it under
its own name; otherwise SRC is copied to DST. Directories merge; a file
replaces a file. Copying a file onto a directory, or a directory onto a file,
is refused and changes nothing.

Everything is streamed; directories travel as tar. A directory from a sandbox
is extracted here only inside DST: entries that would escape it are refused.`,
		Example: `  hotcell cp ./main.go sb-3f9a1c2b7d4e:main.go
  hotcell cp ./src sb-3f9a1c2b7d4e:/workspace/
  hotcell cp sb-3f9a1c2b7d4e:/workspace/out ./results`,
		Args: requireArgs(2, 2, "SRC and DST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			switch {
			case src.sandbox != "" && dst.sandbox != "":
				return usagef("cp: copying between two sandboxes is not supported; copy to this machine first")
			case src.sandbox == "" && dst.sandbox == "":
				return usagef("cp: one of SRC and DST must be in a sandbox, written ID:PATH")
			case src.path == "" || dst.path == "":
				return usagef("cp: empty path in %q", args[0]+" "+args[1])
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			if src.sandbox != "" {
				return a.download(cmd.Context(), c, src.sandbox, src.path, dst.path)
			}
			return a.upload(cmd.Context(), c, src.path, dst.sandbox, dst.path)
		},
	}
}

// location is a cp argument: a path in a sandbox, or here when sandbox is "".
type location struct {
	sandbox, path string
}

// parseLocation reads ID:PATH the way docker cp does: a colon before any
// slash marks a sandbox.
func parseLocation(s string) location {
	if i := strings.IndexByte(s, ':'); i > 0 && !strings.Contains(s[:i], "/") {
		return location{sandbox: s[:i], path: s[i+1:]}
	}
	return location{path: s}
}

// download copies srcPath of sandbox id to the local dst.
func (a *app) download(ctx context.Context, c *client.Client, id, srcPath, dst string) error {
	st, err := c.Stat(ctx, id, srcPath)
	if err != nil {
		return err
	}
	isDir := st.Type == client.FileTypeDir
	if !isDir && st.Type != client.FileTypeFile {
		return fmt.Errorf("cp %s:%s: is a %s; only files and directories can be copied", id, srcPath, st.Type)
	}
	target := dst
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		if base := path.Base(st.Path); base != "/" && base != "." {
			target = filepath.Join(dst, base)
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cp: %w", err)
	}
	existing, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		existing = nil
	case err != nil:
		return fmt.Errorf("cp: %w", err)
	}
	if err := checkOverwrite(target, isDir, existing != nil, existing != nil && existing.IsDir()); err != nil {
		return err
	}
	// No setuid, setgid or sticky bits from a sandbox onto this host.
	mode := st.Mode.Perm()
	if !isDir {
		rc, err := c.ReadFile(ctx, id, st.Path, nil)
		if err != nil {
			return err
		}
		defer rc.Close()
		pr := a.copyProgress("copying "+id+":"+srcPath, rc)
		defer pr.finish()
		if err := writeFileAtomic(target, pr, mode); err != nil {
			return fmt.Errorf("cp %s:%s to %s: %w", id, srcPath, target, err)
		}
		return nil
	}
	if existing == nil {
		if err := os.Mkdir(target, mode|0o700); err != nil {
			return fmt.Errorf("cp: %w", err)
		}
	}
	rc, err := c.GetArchive(ctx, id, st.Path)
	if err != nil {
		return err
	}
	defer rc.Close()
	pr := a.copyProgress("copying "+id+":"+srcPath, rc)
	defer pr.finish()
	if err := extractTar(pr, target, a.stderr); err != nil {
		return fmt.Errorf("cp %s:%s to %s: %w", id, srcPath, target, err)
	}
	return nil
}

// upload copies the local src to dstPath of sandbox id.
func (a *app) upload(ctx context.Context, c *client.Client, src, id, dstPath string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	isDir := fi.IsDir()
	if !isDir && !fi.Mode().IsRegular() {
		return fmt.Errorf("cp %s: not a regular file or directory", src)
	}
	target := dstPath
	existing, err := statRemote(ctx, c, id, dstPath)
	if err != nil {
		return err
	}
	if existing != nil && existing.Type == client.FileTypeDir {
		if base := filepath.Base(filepath.Clean(src)); base != "/" && base != "." && base != ".." {
			target = path.Join(existing.Path, base)
			if existing, err = statRemote(ctx, c, id, target); err != nil {
				return err
			}
		}
	}
	if err := checkOverwrite(id+":"+target, isDir, existing != nil, existing != nil && existing.Type == client.FileTypeDir); err != nil {
		return err
	}
	if isDir {
		// WalkDir does not descend into a symlink given as its root.
		if src, err = filepath.EvalSymlinks(src); err != nil {
			return fmt.Errorf("cp: %w", err)
		}
	} else {
		f, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		defer f.Close()
		pr := a.copyProgress("copying "+src, f)
		defer pr.finish()
		_, err = c.WriteFile(ctx, id, target, pr, fi.Mode().Perm())
		return err
	}
	if existing == nil {
		if _, err := c.Mkdir(ctx, id, client.MkdirRequest{Path: target, Mode: client.Mode(client.FileMode(fi.Mode().Perm()))}); err != nil {
			return err
		}
	}
	// The tar is written while it is sent: nothing is held in memory.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := writeTar(pw, src, a.stderr)
		pw.CloseWithError(err)
		done <- err
	}()
	prog := a.copyProgress("copying "+src, pr)
	_, err = c.PutArchive(ctx, id, target, prog)
	prog.finish()
	// If the daemon stopped reading early, unblock the writer.
	pr.CloseWithError(errors.New("upload ended"))
	if tarErr := <-done; tarErr != nil && !errors.Is(tarErr, io.ErrClosedPipe) {
		return fmt.Errorf("cp %s: %w", src, tarErr)
	}
	return err
}

// statRemote is Stat with "not found" as a nil result.
func statRemote(ctx context.Context, c *client.Client, id, p string) (*client.FileInfo, error) {
	st, err := c.Stat(ctx, id, p)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// checkOverwrite refuses to replace a directory with a file or a file with
// a directory: cp -r refuses both, and either would lose data silently.
func checkOverwrite(target string, srcIsDir, exists, targetIsDir bool) error {
	switch {
	case !exists:
		return nil
	case srcIsDir && !targetIsDir:
		return fmt.Errorf("cp: cannot overwrite non-directory %s with a directory", target)
	case !srcIsDir && targetIsDir:
		return fmt.Errorf("cp: cannot overwrite directory %s with a file", target)
	}
	return nil
}

// writeFileAtomic writes r to a temporary file beside dst and renames it
// into place, so a failed copy leaves whatever was at dst untouched.
func writeFileAtomic(dst string, r io.Reader, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".hotcell-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// progressAfter is how much a copy moves before it shows progress: small
// copies stay quiet.
const progressAfter = 8 << 20

// progressReader reports the bytes read through it once there are more
// than progressAfter (a bar on a terminal, periodic lines otherwise).
type progressReader struct {
	r      io.Reader
	a      *app
	what   string
	n      int64
	report func(int64)
	done   func()
}

func (a *app) copyProgress(what string, r io.Reader) *progressReader {
	return &progressReader{r: r, a: a, what: what}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.report == nil && p.n > progressAfter {
		p.report, p.done = p.a.progress(p.what)
	}
	if p.report != nil {
		p.report(p.n)
	}
	return n, err
}

func (p *progressReader) finish() {
	if p.done != nil {
		p.done()
		p.done = nil
	}
}
