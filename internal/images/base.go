package images

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Debian release and packages of hotcell/base.
const (
	Suite          = "bookworm"
	slimRef        = "debian:bookworm-slim"
	defaultMirror  = "http://deb.debian.org/debian"
	EnvMirror      = "HOTCELL_DEBIAN_MIRROR" // overrides the mirror debootstrap uses
	basePackageCSV = "bash,ca-certificates,git,curl,python3,procps"
)

// The default non-root user of hotcell/base, as E2B's templates have it:
// E2B's envd runs commands as "user" unless asked for root.
const (
	UserName = "user"
	UserID   = 1000
	UserHome = "/home/user"
)

// BaseVersion is the version of what BuildBase makes, in the image's
// LabelBaseVersion label; scripts/lib.sh rebuilds an hotcell/base with
// another (version 2 added UserName). Raise it, here and in
// HOTCELL_BASE_VERSION in scripts/lib.sh, when the base changes.
const (
	BaseVersion      = "2"
	LabelBaseVersion = "hotcell.base.version"
)

// baseChanges are the image config of hotcell/base, on both paths.
var baseChanges = []string{"ENV LANG=C.UTF-8", `CMD ["/bin/bash"]`, "LABEL " + LabelBaseVersion + "=" + BaseVersion}

// addUserScript adds UserName to a Debian root file system, run by its own
// /bin/sh: in the build container from the slim image, and chrooted into
// the debootstrap tree, so both paths make the same account. useradd comes
// with passwd, which both bases have (priority required).
var addUserScript = fmt.Sprintf("groupadd --gid %[2]d %[1]s && "+
	"useradd --uid %[2]d --gid %[2]d --create-home --home-dir %[3]s --shell /bin/bash %[1]s",
	UserName, UserID, UserHome)

// pullProbeTimeout bounds how long BuildBase waits for a registry's first
// answer before it falls back to debootstrap; on a host without a registry
// the pull would otherwise hang on DNS or TCP for minutes.
const pullProbeTimeout = 15 * time.Second

// BuildBase builds ref as the hotcell/base image: Debian bookworm with bash,
// ca-certificates, git, curl, python3 and procps, /workspace, and the
// non-root user UserName (uid and gid UserID, home UserHome). It uses
// debian:bookworm-slim when that is present or can be pulled, else builds the
// root filesystem with debootstrap (needs root and the debootstrap package)
// from the mirror apt uses on this host. progress gets human-readable lines.
func BuildBase(ctx context.Context, c *client.Client, ref string, progress func(string)) error {
	if progress == nil {
		progress = func(string) {}
	}
	if err := haveSlim(ctx, c, progress); err == nil {
		progress("building " + ref + " from " + slimRef)
		return buildFromSlim(ctx, c, ref, progress)
	} else {
		progress(fmt.Sprintf("%s unavailable (%v); building with debootstrap", slimRef, err))
	}
	return buildWithDebootstrap(ctx, c, ref, progress)
}

// haveSlim makes debian:bookworm-slim available, failing fast when no
// registry answers.
func haveSlim(ctx context.Context, c *client.Client, progress func(string)) error {
	if _, err := c.ImageInspect(ctx, slimRef); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Only the wait for the first message is bounded; once layers arrive a
	// slow pull may take as long as it needs.
	first := time.AfterFunc(pullProbeTimeout, cancel)
	defer first.Stop()
	resp, err := c.ImagePull(pctx, slimRef, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	for m, err := range resp.JSONMessages(pctx) {
		first.Stop()
		if err != nil {
			return err
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
		if m.Status != "" {
			progress(strings.TrimSpace(m.ID + " " + m.Status))
		}
	}
	_, err = c.ImageInspect(ctx, slimRef)
	return err
}

// buildFromSlim installs the packages in a throwaway container of the slim
// image and commits it as ref.
func buildFromSlim(ctx context.Context, c *client.Client, ref string, progress func(string)) error {
	script := "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update; " +
		"apt-get install -y --no-install-recommends " + strings.ReplaceAll(basePackageCSV, ",", " ") + "; " +
		"apt-get clean; rm -rf /var/lib/apt/lists/*; mkdir -p /workspace; " + addUserScript
	return buildInContainer(ctx, c, slimRef, ref, script, nil, baseChanges, progress)
}

// buildInContainer runs script with /bin/sh in a throwaway container of
// from, after copying files (a tar, or nil) to its root, streams its output
// to progress, and commits the container as ref with commonChanges and
// changes.
func buildInContainer(ctx context.Context, c *client.Client, from, ref, script string, files io.Reader, changes []string, progress func(string)) error {
	cr, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Image:  from,
		Config: &container.Config{Cmd: []string{"/bin/sh", "-c", script}, Labels: map[string]string{LabelImage: "build"}},
	})
	if err != nil {
		return fmt.Errorf("build image %s: create build container: %w", ref, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = c.ContainerRemove(rctx, cr.ID, client.ContainerRemoveOptions{Force: true})
	}()
	if files != nil {
		if _, err := c.CopyToContainer(ctx, cr.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: files}); err != nil {
			return fmt.Errorf("build image %s: copy files into the build container: %w", ref, err)
		}
	}
	wait := c.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("build image %s: start build container: %w", ref, err)
	}
	// The log goroutines call progress, so they must be done before
	// BuildBase returns: canceling logCtx ends the log stream.
	logCtx, cancelLogs := context.WithCancel(ctx)
	logsDone := make(chan struct{})
	defer func() {
		cancelLogs()
		<-logsDone
	}()
	if logs, err := c.ContainerLogs(logCtx, cr.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true}); err != nil {
		close(logsDone)
	} else {
		pr, pw := io.Pipe()
		go func() {
			_, err := stdcopy.StdCopy(pw, pw, logs)
			logs.Close()
			pw.CloseWithError(err)
		}()
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				progress(sc.Text())
			}
			pr.CloseWithError(io.EOF) // unblock StdCopy if a line was too long
			close(logsDone)
		}()
	}
	select {
	case res := <-wait.Result:
		if res.StatusCode != 0 {
			return fmt.Errorf("build image %s: package install exited with status %d", ref, res.StatusCode)
		}
	case err := <-wait.Error:
		return fmt.Errorf("build image %s: wait for build container: %w", ref, err)
	}
	old := imageID(ctx, c, ref)
	_, err = c.ContainerCommit(ctx, cr.ID, client.ContainerCommitOptions{
		Reference: ref,
		Changes:   append(append([]string(nil), commonChanges...), changes...),
	})
	if err != nil {
		return fmt.Errorf("build image %s: commit: %w", ref, err)
	}
	dropReplaced(ctx, c, ref, old)
	return nil
}

// buildWithDebootstrap makes the root filesystem with debootstrap on the
// host and imports it.
func buildWithDebootstrap(ctx context.Context, c *client.Client, ref string, progress func(string)) error {
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		return fmt.Errorf("build image %s: debootstrap not found (install it: apt-get install debootstrap): %w", ref, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("build image %s: debootstrap needs root", ref)
	}
	tmp, err := os.MkdirTemp("", "hotcell-rootfs-")
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	defer removeRootfs(tmp, progress)
	mirror := DebianMirror()
	progress(fmt.Sprintf("debootstrap %s from %s into %s", Suite, mirror, tmp))
	cmd := exec.CommandContext(ctx, bin, "--variant=minbase", "--include="+basePackageCSV, Suite, tmp, mirror)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("build image %s: start debootstrap: %w", ref, err)
	}
	var tail []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		progress(sc.Text())
		tail = append(tail, sc.Text())
		if len(tail) > 20 {
			tail = tail[1:]
		}
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("build image %s: debootstrap: %w; last output:\n%s", ref, err, strings.Join(tail, "\n"))
	}
	// An image needs no package lists or downloaded .debs; apt-get update
	// fetches fresh lists inside the sandbox.
	for _, glob := range []string{"var/lib/apt/lists/*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/log/*.log", "var/log/apt/*"} {
		matches, _ := filepath.Glob(filepath.Join(tmp, glob))
		for _, m := range matches {
			if filepath.Base(m) == "lock" || filepath.Base(m) == "partial" {
				continue
			}
			_ = os.RemoveAll(m)
		}
	}
	if err := os.MkdirAll(filepath.Join(tmp, "workspace"), 0o755); err != nil {
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	progress("adding user " + UserName)
	// The tree's own useradd, chrooted: the host's could differ, or be absent.
	if out, err := exec.CommandContext(ctx, "chroot", tmp, "/bin/sh", "-c", addUserScript).CombinedOutput(); err != nil {
		return fmt.Errorf("build image %s: add user %s: %w: %s", ref, UserName, err, strings.TrimSpace(string(out)))
	}
	progress("importing root filesystem as " + ref)
	return importTar(ctx, c, ref, baseChanges, func(w io.Writer) error {
		return tarTree(w, tmp)
	})
}

// removeRootfs removes a debootstrap target, but never while something is
// still mounted below it (a failed debootstrap can leave /proc mounted, and
// RemoveAll would then walk into the host's /proc or /sys).
func removeRootfs(dir string, progress func(string)) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		progress(fmt.Sprintf("leaving %s in place: cannot read mounts: %v", dir, err))
		return
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			progress(fmt.Sprintf("leaving %s in place: %s is still mounted", dir, f[1]))
			return
		}
	}
	_ = os.RemoveAll(dir)
}

// DebianMirror returns the Debian mirror to debootstrap from: $HOTCELL_DEBIAN_MIRROR,
// else the first apt source on this host that serves the bookworm suite
// itself (not -security or -updates), else deb.debian.org.
func DebianMirror() string {
	if m := os.Getenv(EnvMirror); m != "" {
		return m
	}
	files := []string{"/etc/apt/sources.list"}
	for _, g := range []string{"/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var m string
		if strings.HasSuffix(f, ".sources") {
			m = mirrorFromDeb822(string(data), Suite)
		} else {
			m = mirrorFromList(string(data), Suite)
		}
		if m != "" {
			return m
		}
	}
	return defaultMirror
}

// mirrorFromList finds a one-line-style source (`deb [opts] URI suite comps`)
// for suite.
func mirrorFromList(data, suite string) string {
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) >= 2 && f[1] == suite && isHTTP(f[0]) {
			return strings.TrimSuffix(f[0], "/")
		}
	}
	return ""
}

// mirrorFromDeb822 finds a deb822-style source stanza for suite.
func mirrorFromDeb822(data, suite string) string {
	for _, stanza := range strings.Split(data, "\n\n") {
		fields := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok && !strings.HasPrefix(k, " ") {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if fields["enabled"] == "no" || !strings.Contains(" "+fields["types"]+" ", " deb ") {
			continue
		}
		hasSuite := false
		for _, s := range strings.Fields(fields["suites"]) {
			hasSuite = hasSuite || s == suite
		}
		if !hasSuite {
			continue
		}
		for _, u := range strings.Fields(fields["uris"]) {
			if isHTTP(u) {
				return strings.TrimSuffix(u, "/")
			}
		}
	}
	return ""
}

func isHTTP(u string) bool {
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")
}
