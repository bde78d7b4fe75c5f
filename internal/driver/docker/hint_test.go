package docker

import (
	"strings"
	"testing"
)

// The pull path is covered against a closed loopback registry in
// driver_test.go; the hint is checked here so that no test has to ask
// Docker Hub for hotcell/base.
func TestBuildHint(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string]string{
		"hotcell/base:latest": "hotcell image build",
		"hotcell/base":        "hotcell image build",
		"myorg/dev:1":         "docker build -t myorg/dev:1",
		"ubuntu:24.04":        "docker import rootfs.tar ubuntu:24.04",
	} {
		if got := buildHint(ref); !strings.Contains(got, want) {
			t.Errorf("buildHint(%q): got %q, want it to contain %q", ref, got, want)
		}
	}
}
