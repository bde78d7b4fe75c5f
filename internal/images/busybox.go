package images

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/moby/moby/client"
)

// busyboxCandidates are where Debian's busybox-static and others install
// the binary.
var busyboxCandidates = []string{"/bin/busybox", "/usr/bin/busybox", "/usr/sbin/busybox"}

// FindBusybox returns the path of a statically linked busybox on the host.
func FindBusybox() (string, error) {
	paths := busyboxCandidates
	if p, err := exec.LookPath("busybox"); err == nil {
		paths = append([]string{p}, paths...)
	}
	var firstErr error
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := checkStatic(p); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		return p, nil
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", fmt.Errorf("no busybox found in %s; install busybox-static", strings.Join(busyboxCandidates, ", "))
}

const (
	etcPasswd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	etcGroup  = "root:x:0:\nnogroup:x:65534:\n"
)

// BuildBusybox builds ref as a tiny image made of the host's static busybox
// with every applet linked in /bin, a root user, /tmp and /workspace. It
// takes seconds and needs no network: it is what tests run sandboxes on.
func BuildBusybox(ctx context.Context, c *client.Client, ref string) error {
	bb, err := FindBusybox()
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	out, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("build image %s: %s --list: %w", ref, bb, err)
	}
	applets := strings.Fields(string(out))
	return importTar(ctx, c, ref, []string{"ENV HOME=/root"}, func(w io.Writer) error {
		r := &rootfs{tw: tar.NewWriter(w)}
		for _, d := range []struct {
			name string
			mode int64
		}{
			{"bin", 0o755}, {"sbin", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
			{"etc", 0o755}, {"root", 0o700}, {"tmp", 0o1777}, {"var", 0o755}, {"var/tmp", 0o1777},
			{"workspace", 0o755}, {"proc", 0o755}, {"sys", 0o755}, {"dev", 0o755},
		} {
			if err := r.dir(d.name, d.mode); err != nil {
				return err
			}
		}
		if err := r.hostFile("bin/busybox", 0o755, bb); err != nil {
			return err
		}
		for _, a := range applets {
			// busybox lists itself; linking it would replace the binary.
			if a == "busybox" || strings.Contains(a, "/") {
				continue
			}
			if err := r.symlink("bin/"+a, "busybox"); err != nil {
				return err
			}
		}
		if err := r.file("etc/passwd", 0o644, []byte(etcPasswd)); err != nil {
			return err
		}
		if err := r.file("etc/group", 0o644, []byte(etcGroup)); err != nil {
			return err
		}
		return r.tw.Close()
	})
}

// BuildNoShell builds ref as an image with no shell at all: only /bin/echo
// and /bin/cat, both the static busybox (which picks its applet from
// argv[0]), plus /tmp and /workspace. It proves that file transfer and exec
// of an absolute path work without anything in the image to lean on.
func BuildNoShell(ctx context.Context, c *client.Client, ref string) error {
	bb, err := FindBusybox()
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	return importTar(ctx, c, ref, nil, func(w io.Writer) error {
		r := &rootfs{tw: tar.NewWriter(w)}
		for _, d := range []struct {
			name string
			mode int64
		}{
			{"bin", 0o755}, {"etc", 0o755}, {"root", 0o700}, {"tmp", 0o1777}, {"workspace", 0o755},
			{"proc", 0o755}, {"sys", 0o755}, {"dev", 0o755},
		} {
			if err := r.dir(d.name, d.mode); err != nil {
				return err
			}
		}
		// Copies, not symlinks to a busybox path, so that nothing named
		// busybox or sh exists in the image.
		if err := r.hostFile("bin/echo", 0o755, bb); err != nil {
			return err
		}
		if err := r.hardlink("bin/cat", "bin/echo", 0o755); err != nil {
			return err
		}
		if err := r.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/nonexistent\n")); err != nil {
			return err
		}
		if err := r.file("etc/group", 0o644, []byte("root:x:0:\n")); err != nil {
			return err
		}
		return r.tw.Close()
	})
}
