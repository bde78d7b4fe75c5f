package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestTemplateBuildBounds runs builds on a daemon with
// template_build_network none, template_build_limits memory=256,cpus=1 and
// a 20 s template_build_timeout: a RUN step sees only loopback and a 256 MiB
// memory limit; a build past the timeout is stopped with a 504 naming the
// setting and records nothing; a build running when the daemon shuts down
// is cancelled after the grace period and records nothing either.
func TestTemplateBuildBounds(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{
		"--template-build-network", "none", "--template-build-limits", "memory=256,cpus=1",
		"--template-build-timeout", "20s", "--shutdown-timeout", "1s",
	}})
	defer d.Close()
	ctx := t.Context()

	name := templateName(t)
	var log []string
	_, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{}, buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\n" +
		"RUN echo nets: $(ls /sys/class/net) && echo mem: $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)\n"}),
		func(l string) { log = append(log, l) })
	if err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(log, "\n"))
	}
	out := strings.Join(log, "\n")
	if !strings.Contains(out, "nets: lo\n") {
		t.Errorf("network of a RUN step: got %q, want loopback only", out)
	}
	if !strings.Contains(out, "mem: 268435456") {
		t.Errorf("memory limit of a RUN step: got %q, want 268435456", out)
	}

	slow := templateName(t)
	_, err = d.C.BuildTemplate(ctx, slow, client.BuildTemplateOptions{},
		buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\nRUN sleep 120\n"}), nil)
	wantTplStatus(t, "a build past the timeout", err, http.StatusGatewayTimeout, "template_build_timeout")
	_, err = d.C.GetTemplate(ctx, slow)
	wantTplStatus(t, "get after a timed-out build", err, http.StatusNotFound, slow)

	// A build in flight at shutdown: cancelled after the 1 s grace.
	cut := templateName(t)
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := d.C.BuildTemplate(context.WithoutCancel(ctx), cut, client.BuildTemplateOptions{},
			buildContext(t, map[string]string{"Dockerfile": "FROM hotcell/base:latest\nRUN echo long-step && sleep 60\n"}),
			func(l string) {
				if strings.Contains(l, "long-step") {
					once.Do(func() { close(started) })
				}
			})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the build ended before the shutdown: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the build never reached its RUN step")
	}
	d.Stop(syscall.SIGTERM)
	if err := <-done; err == nil {
		t.Error("a build cut by the shutdown succeeded")
	}
	d.Restart()
	_, err = d.C.GetTemplate(ctx, cut)
	wantTplStatus(t, "get after a build cut by the shutdown", err, http.StatusNotFound, cut)
	for _, n := range []string{slow, cut} {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		imgs, err := exec.CommandContext(lctx, "docker", "image", "ls", "-q", "hotcell-tpl/"+n).Output()
		cancel()
		if err != nil || len(bytes.TrimSpace(imgs)) != 0 {
			t.Errorf("images of %s after a stopped build: %q, %v, want none", n, imgs, err)
		}
	}
}
