package images_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/testenv"
)

// tempRef returns a ref of a throwaway image removed when the test ends,
// so that building here never disturbs the shared test images.
func tempRef(t *testing.T, c *client.Client, repo string) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	ref := repo + ":t" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	return ref
}

// run runs argv in a new container of ref and returns its output and exit code.
func run(t *testing.T, c *client.Client, ref string, argv ...string) (string, int) {
	t.Helper()
	ctx := t.Context()
	cr, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Image:  ref,
		Config: &container.Config{Cmd: argv, Labels: map[string]string{"hotcell.test": "images"}},
	})
	if err != nil {
		t.Fatalf("create container of %s: %v", ref, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.ContainerRemove(ctx, cr.ID, client.ContainerRemoveOptions{Force: true})
	})
	wait := c.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start %v in %s: %v", argv, ref, err)
	}
	var code int
	select {
	case res := <-wait.Result:
		code = int(res.StatusCode)
	case err := <-wait.Error:
		t.Fatalf("wait: %v", err)
	}
	logs, err := c.ContainerLogs(ctx, cr.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

func TestBuildBusybox(t *testing.T) {
	t.Parallel()
	c := testenv.RequireDocker(t)
	ref := tempRef(t, c, "hotcell/test-busybox")
	start := time.Now()
	if err := images.BuildBusybox(t.Context(), c, ref); err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Logf("built %s in %v", ref, time.Since(start))
	out, code := run(t, c, ref, "sh", "-c", "pwd; ls -ld /tmp | cut -c1-10; id -un; test -x /bin/busybox && echo ok")
	if want := "/workspace\ndrwxrwxrwt\nroot\nok\n"; code != 0 || out != want {
		t.Fatalf("run: got %q exit %d, want %q exit 0", out, code, want)
	}
	in, err := c.ImageInspect(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if in.Config == nil || in.Config.Labels[images.LabelImage] != "true" {
		t.Errorf("label %s: got %v", images.LabelImage, in.Config)
	}
}

// TestRebuildDropsReplaced: a rebuild that moves a tag removes the image
// it moved it from, unless a container still uses that image.
func TestRebuildDropsReplaced(t *testing.T) {
	t.Parallel()
	c := testenv.RequireDocker(t)
	ctx := t.Context()
	ref := tempRef(t, c, "hotcell/test-rebuild")
	build := func() string {
		t.Helper()
		if err := images.BuildBusybox(ctx, c, ref); err != nil {
			t.Fatalf("build: %v", err)
		}
		img, err := c.ImageInspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = c.ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true})
		})
		return img.ID
	}
	exists := func(id string) bool {
		t.Helper()
		_, err := c.ImageInspect(ctx, id)
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	first := build()
	// A container of the first image (created, never started) holds it.
	cr, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{Image: first, Config: &container.Config{Cmd: []string{"true"}, Labels: map[string]string{"hotcell.test": "images"}}})
	if err != nil {
		t.Fatal(err)
	}
	second := build()
	if second == first {
		t.Fatalf("the rebuild made the same image %s", first)
	}
	if !exists(first) {
		t.Error("the replaced image was removed while a container uses it")
	}
	if _, err := c.ContainerRemove(ctx, cr.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	third := build()
	if exists(second) {
		t.Errorf("the image the rebuild replaced, %s, is still there (untagged)", second)
	}
	if !exists(third) {
		t.Errorf("the new image %s is gone", third)
	}
}

func TestBuildNoShell(t *testing.T) {
	t.Parallel()
	c := testenv.RequireDocker(t)
	ref := tempRef(t, c, "hotcell/test-noshell")
	if err := images.BuildNoShell(t.Context(), c, ref); err != nil {
		t.Fatalf("build: %v", err)
	}
	if out, code := run(t, c, ref, "/bin/echo", "no", "shell"); code != 0 || out != "no shell\n" {
		t.Fatalf("echo: got %q exit %d", out, code)
	}
	if out, code := run(t, c, ref, "/bin/cat", "/etc/passwd"); code != 0 || !strings.HasPrefix(out, "root:") {
		t.Fatalf("cat: got %q exit %d", out, code)
	}
	// No shell: a shell-form command cannot start.
	ctx := t.Context()
	cr, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{Image: ref, Config: &container.Config{Cmd: []string{"/bin/sh", "-c", "true"}}})
	if err == nil {
		t.Cleanup(func() {
			_, _ = c.ContainerRemove(context.Background(), cr.ID, client.ContainerRemoveOptions{Force: true})
		})
		if _, err = c.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err == nil {
			t.Fatal("/bin/sh started in the no-shell image")
		}
	}
}

func TestMirrorParsing(t *testing.T) {
	t.Parallel()
	deb822 := `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`
	if got := images.MirrorFromDeb822(deb822, "bookworm"); got != "http://deb.debian.org/debian" {
		t.Errorf("deb822: got %q", got)
	}
	security := "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n"
	if got := images.MirrorFromDeb822(security, "bookworm"); got != "" {
		t.Errorf("deb822 security only: got %q, want none", got)
	}
	list := `deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main
deb [arch=amd64 signed-by=/x.gpg] http://mirror.example/debian/ bookworm main contrib
deb http://deb.debian.org/debian bookworm main
`
	if got := images.MirrorFromList(list, "bookworm"); got != "http://mirror.example/debian" {
		t.Errorf("list: got %q", got)
	}
}

// TestBaseVersionInScripts keeps scripts/lib.sh, which rebuilds an
// outdated hotcell/base, in step with BaseVersion.
func TestBaseVersionInScripts(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../scripts/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nHOTCELL_BASE_VERSION=" + images.BaseVersion + "\n"; !strings.Contains(string(data), want) {
		t.Errorf("scripts/lib.sh lacks %q", strings.TrimSpace(want))
	}
}

// TestBuildBase builds hotcell/base with whatever path works on this host
// (debootstrap when no registry answers). It takes minutes and fetches
// packages from the Debian mirror, so it only runs when asked for:
// scripts/test asks, in a step of its own after the other tests.
func TestBuildBase(t *testing.T) {
	if os.Getenv("HOTCELL_TEST_BUILD_BASE") == "" {
		t.Skip("set HOTCELL_TEST_BUILD_BASE=1 to build hotcell/base (minutes, needs the Debian mirror)")
	}
	c := testenv.RequireDocker(t)
	ref := os.Getenv("HOTCELL_TEST_BASE_REF")
	if ref == "" {
		ref = tempRef(t, c, "hotcell/test-base")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	if err := images.BuildBase(ctx, c, ref, func(s string) { t.Log(s) }); err != nil {
		t.Fatalf("build base: %v", err)
	}
	out, code := run(t, c, ref, "bash", "-c", "pwd; git --version | cut -d' ' -f1; python3 -c 'print(1+1)'; curl --version | head -c4; echo; ps -p 1 -o comm=; test -d /var/lib/apt/lists && ls /var/lib/apt/lists | grep -vc lock")
	t.Logf("run in base: %q exit %d", out, code)
	if !strings.HasPrefix(out, "/workspace\ngit\n2\ncurl\n") {
		t.Errorf("base image tools: got %q", out)
	}
	img, err := c.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Config.Labels[images.LabelBaseVersion]; got != images.BaseVersion {
		t.Errorf("label %s: got %q, want %q", images.LabelBaseVersion, got, images.BaseVersion)
	}
	// The non-root user E2B code expects: uid/gid 1000, /home/user owned
	// by it, bash; and the home is usable as that user.
	out, code = run(t, c, ref, "bash", "-c", `getent passwd user; getent group user; stat -c '%u:%g %F' /home/user; su -s /bin/bash user -c 'cd && touch .probe && id -un && pwd'`)
	want := "user:x:1000:1000::/home/user:/bin/bash\nuser:x:1000:\n1000:1000 directory\nuser\n/home/user\n"
	if out != want || code != 0 {
		t.Errorf("user in base: got %q exit %d, want %q", out, code, want)
	}
}

// TestBuildHotcell: the egress-node image has the hotcell binary as its
// entrypoint and the programs egress-node runs (iptables, iptables-restore,
// ip6tables, ipset); a build of the same binary keeps the image, and a
// dynamically linked binary is refused.
func TestBuildHotcell(t *testing.T) {
	t.Parallel()
	c := testenv.RequireDocker(t)
	ref := testenv.HotcellImage(t, tempRef(t, c, "hotcell/hotcell"))
	ctx := t.Context()
	if out, code := run(t, c, ref, "egress-node", "--help"); code != 0 || !strings.Contains(out, "--teardown") {
		t.Errorf("hotcell egress-node --help: got %q exit %d", out, code)
	}
	cr, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{Image: ref, Config: &container.Config{
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"for p in iptables iptables-restore ip6tables ipset; do command -v $p || exit 1; done; iptables -V"},
		Labels: map[string]string{"hotcell.test": "images"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.ContainerRemove(context.Background(), cr.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := c.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	res := <-c.ContainerWait(ctx, cr.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning}).Result
	logs, err := c.ContainerLogs(ctx, cr.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, logs)
	logs.Close()
	if res.StatusCode != 0 || strings.Count(out.String(), "/usr/sbin/") != 4 || !strings.Contains(out.String(), "nf_tables") {
		t.Errorf("the image's firewall programs: got %q exit %d, want four under /usr/sbin and iptables-nft", out.String(), res.StatusCode)
	}
	before, err := c.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if before.Config == nil || len(before.Config.Entrypoint) != 1 || before.Config.Entrypoint[0] != images.HotcellBinary || before.Config.Labels[images.LabelHotcellBinary] == "" {
		t.Errorf("image config: %+v, want entrypoint %s and label %s", before.Config, images.HotcellBinary, images.LabelHotcellBinary)
	}
	if err := images.BuildHotcell(ctx, c, ref, testenv.GoBuild(t, "./cmd/hotcell"), nil); err != nil {
		t.Fatal(err)
	}
	if after, err := c.ImageInspect(ctx, ref); err != nil || after.ID != before.ID {
		t.Errorf("a build of the same binary made image %s (%v), want %s kept", after.ID, err, before.ID)
	}
	// Debian's ls is dynamically linked.
	if err := images.BuildHotcell(ctx, c, ref, "/bin/ls", nil); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("a build from /bin/ls: got %v, want it refused as dynamically linked", err)
	}
}
