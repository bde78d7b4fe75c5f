// Package testenv is the one place tests get Docker, test images and
// binaries from. Outside CI a missing engine skips the test with the reason;
// with CI set it fails, so CI can never skip Docker tests silently.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/images"
)

// InCI reports whether the tests run in CI (env CI is non-empty).
func InCI() bool { return os.Getenv("CI") != "" }

// SkipOrFail is the one way a test gives up because its environment lacks
// something (root, an engine, a tool, a kernel feature): outside CI it skips
// with the reason, with CI set it fails, so CI never skips silently. A test
// that is off unless asked for (an expensive opt-in) may t.Skip itself.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf(format+" (CI is set, so this fails instead of skipping)", args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot gives up on the test unless it runs as root (network
// namespaces, iptables, subreapers of other users' processes).
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root: %s", why)
	}
}

var docker struct {
	once sync.Once
	c    *client.Client
	err  error
}

// RequireDocker returns a client of a Docker Engine that answers. It is
// shared by the whole test process; do not close it.
func RequireDocker(t testing.TB) *client.Client {
	t.Helper()
	docker.once.Do(func() {
		c, err := client.New(client.FromEnv)
		if err != nil {
			docker.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Ping(ctx, client.PingOptions{}); err != nil {
			c.Close()
			docker.err = err
			return
		}
		docker.c = c
	})
	if docker.err != nil {
		SkipOrFail(t, "needs a Docker Engine: %v", docker.err)
	}
	return docker.c
}

type imageOnce struct {
	once sync.Once
	err  error
}

var (
	busyboxImage imageOnce
	noShellImage imageOnce
)

// ensureImage builds ref with build once per process if the engine lacks it.
func ensureImage(t testing.TB, o *imageOnce, ref string, build func(context.Context, *client.Client, string) error) string {
	t.Helper()
	c := RequireDocker(t)
	o.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := c.ImageInspect(ctx, ref); err == nil {
			return
		} else if !cerrdefs.IsNotFound(err) {
			o.err = err
			return
		}
		o.err = build(ctx, c, ref)
	})
	if o.err != nil {
		t.Fatalf("test image %s: %v", ref, o.err)
	}
	return ref
}

// BusyboxImage returns hotcell/test-busybox:latest, building it if missing.
func BusyboxImage(t testing.TB) string {
	t.Helper()
	return ensureImage(t, &busyboxImage, images.BusyboxRef, images.BuildBusybox)
}

// NoShellImage returns hotcell/test-noshell:latest (no shell; /bin/echo and
// /bin/cat only), building it if missing.
func NoShellImage(t testing.TB) string {
	t.Helper()
	return ensureImage(t, &noShellImage, images.NoShellRef, images.BuildNoShell)
}

var baseImage imageOnce

// BaseImage returns hotcell/base:latest. Building it takes minutes, so
// outside CI a missing image skips the test (build it with `hotcell image
// build`); in CI it is built here.
func BaseImage(t testing.TB) string {
	t.Helper()
	c := RequireDocker(t)
	if _, err := c.ImageInspect(t.Context(), images.BaseRef); err == nil {
		return images.BaseRef
	}
	if !InCI() {
		t.Skipf("needs %s; build it with `hotcell image build`", images.BaseRef)
	}
	baseImage.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		baseImage.err = images.BuildBase(ctx, c, images.BaseRef, func(s string) { t.Log(s) })
	})
	if baseImage.err != nil {
		t.Fatalf("build %s: %v", images.BaseRef, baseImage.err)
	}
	return images.BaseRef
}

var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*buildResult
}

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// GoBuild builds the main package pkg (a path relative to the module root,
// such as "./cmd/hotcell-agent") as a static binary, once per test process,
// and returns its path. testdata packages work too.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*buildResult{}
	}
	b, ok := builds.bins[pkg]
	if !ok {
		b = &buildResult{}
		builds.bins[pkg] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = goBuild(pkg) })
	if b.err != nil {
		t.Fatalf("go build %s: %v", pkg, b.err)
	}
	return b.path
}

func goBuild(pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	builds.mu.Lock()
	if builds.dir == "" {
		builds.dir, err = binDir()
	}
	dir := builds.dir
	builds.mu.Unlock()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, msg)
	}
	return out, nil
}

// binDir makes the directory of this test process's builds. It is shared
// by every test of the process, so not a t.TempDir, and nothing runs when
// the process ends to remove it. So it goes under $HOTCELL_TESTBIN when
// set (scripts/test sets it and removes it when the suite ends), and its
// name carries the process's pid, so that the directories of processes
// that have ended are removed here, by the next one.
func binDir() (string, error) {
	parent := os.Getenv("HOTCELL_TESTBIN")
	if parent == "" {
		parent = os.TempDir()
	}
	prefix := "hotcell-testbin-"
	old, _ := filepath.Glob(filepath.Join(parent, prefix+"*"))
	for _, d := range old {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
		if n, err := strconv.Atoi(pid); err == nil && !alive(n) {
			os.RemoveAll(d)
		}
	}
	return os.MkdirTemp(parent, fmt.Sprintf("%s%d-", prefix, os.Getpid()))
}

// alive reports whether process pid exists (signal 0 reaches it, or it
// exists but belongs to another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// AgentBinary returns a static build of ./cmd/hotcell-agent.
func AgentBinary(t testing.TB) string {
	t.Helper()
	return GoBuild(t, "./cmd/hotcell-agent")
}

// ModuleRoot returns the directory of the main module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// CleanupSandbox removes, when the test ends, every container and volume
// labelled with sandbox id, whatever the code under test left behind.
func CleanupSandbox(t testing.TB, c *client.Client, id string) {
	t.Helper()
	t.Cleanup(func() {
		// t.Context is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := RemoveByLabel(ctx, c, driver.LabelID+"="+id); err != nil {
			t.Errorf("cleanup sandbox %s: %v", id, err)
		}
	})
}

// RemoveByLabel force-removes containers and then volumes carrying label
// (key=value).
func RemoveByLabel(ctx context.Context, c *client.Client, label string) error {
	f := make(client.Filters).Add("label", label)
	cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return err
	}
	for _, ct := range cs.Items {
		if _, err := c.ContainerRemove(ctx, ct.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	vs, err := c.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return err
	}
	for _, v := range vs.Items {
		if _, err := c.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// RequireTool returns the path of a host program a test needs. Outside CI a
// missing one skips the test; in CI it fails, since scripts/test installs it.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(t, "needs %s on the host: %v", name, err)
	}
	return p
}

var codeImage imageOnce

// CodeImage returns hotcell/code:latest, the code-interpreter image. It
// takes minutes to build (scripts/test builds it with `hotcell image build
// --code --if-stale`), so outside CI a missing or stale image skips the
// test; in CI it is built here.
func CodeImage(t testing.TB) string {
	t.Helper()
	c := RequireDocker(t)
	if ok, err := images.CodeImageCurrent(t.Context(), c, images.CodeRef); err == nil && ok {
		return images.CodeRef
	}
	if !InCI() {
		t.Skipf("needs a current %s; build it with `hotcell image build --code`", images.CodeRef)
	}
	BaseImage(t)
	codeImage.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		codeImage.err = images.BuildCode(ctx, c, images.CodeRef, func(s string) { t.Log(s) })
	})
	if codeImage.err != nil {
		t.Fatalf("build %s: %v", images.CodeRef, codeImage.err)
	}
	return images.CodeRef
}

var egressBase imageOnce

// HotcellImage builds ref as the hotcell image of the egress-node
// DaemonSet (images.BuildHotcell) from a static build of ./cmd/hotcell,
// and returns it. Its base, hotcell/egress-base, installs iptables and
// ipset from Debian's mirror (scripts/test builds it with `hotcell image
// build --hotcell`), so outside CI a missing or stale one skips the test;
// in CI it is built here. Layering the binary needs no network.
func HotcellImage(t testing.TB, ref string) string {
	t.Helper()
	c := RequireDocker(t)
	if ok, err := images.EgressBaseCurrent(t.Context(), c); err != nil || !ok {
		if !InCI() {
			t.Skipf("needs a current %s; build it with `hotcell image build --hotcell` (%v)", images.EgressBaseRef, err)
		}
		BaseImage(t)
		egressBase.once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			egressBase.err = images.BuildEgressBase(ctx, c, func(s string) { t.Log(s) })
		})
		if egressBase.err != nil {
			t.Fatalf("build %s: %v", images.EgressBaseRef, egressBase.err)
		}
	}
	bin := GoBuild(t, "./cmd/hotcell")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := images.BuildHotcell(ctx, c, ref, bin, func(s string) { t.Log(s) }); err != nil {
		t.Fatalf("build %s: %v", ref, err)
	}
	return ref
}
