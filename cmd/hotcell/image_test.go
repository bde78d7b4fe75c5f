package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/testenv"
)

// TestImageBuildAgent: `hotcell image build --agent` builds the agent
// image of the Kubernetes driver's pods from an agent binary, into a real
// Docker Engine: its one file is the binary, run as its entrypoint.
func TestImageBuildAgent(t *testing.T) {
	t.Parallel()
	c := testenv.RequireDocker(t)
	agent := testenv.AgentBinary(t)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	ref := "hotcell/test-agent:t" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})
	res := runCLI(t, nil, "image", "build", "--agent", "--binary", agent, "--tag", ref)
	if res.code != 0 || strings.TrimSpace(res.stdout) != ref || !strings.Contains(res.stderr, "building "+ref+" from "+agent) {
		t.Fatalf("image build --agent: exit %d, stdout %q, stderr %q; want 0, the ref, and progress naming the binary", res.code, res.stdout, res.stderr)
	}
	img, err := c.ImageInspect(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Config.Entrypoint; len(got) != 1 || got[0] != "/hotcell-agent" {
		t.Errorf("entrypoint %v, want [/hotcell-agent]", got)
	}
	if len(img.RootFS.Layers) != 1 {
		t.Errorf("%d layers, want the binary's one", len(img.RootFS.Layers))
	}
}

// TestImageBuildUsage: flags that do not go together are refused before
// any engine is asked, naming what goes with what.
func TestImageBuildUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "build", "--binary", "/bin/true"}, "--binary goes with --hotcell or --agent"},
		{[]string{"image", "build", "--agent", "--hotcell"}, "none of the others can be"},
		// The engine unreachable is said as such, not as the daemon.
		{[]string{"image", "build", "--agent", "--binary", "/nonexistent/hotcell-agent", "--docker-host", "unix:///nonexistent.sock"}, "build image hotcell/agent:latest: reach the Docker Engine"},
	} {
		res := runCLI(t, nil, tc.args...)
		if res.code == 0 || !strings.Contains(res.stderr, tc.want) || strings.Contains(res.stderr, "hotcell daemon") {
			t.Errorf("%v: exit %d, stderr %q; want a failure saying %q", tc.args, res.code, res.stderr, tc.want)
		}
	}
}
