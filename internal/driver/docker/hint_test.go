package docker

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
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

func TestStartErrorNetworkFull(t *testing.T) {
	t.Parallel()
	engine := errors.New("Error response from daemon: no available IPv4 addresses on this network's address pools: hc-egress (7b73bd)")
	err := startError("sb-1", engine)
	if !errors.Is(err, errdefs.ErrUnavailable) || !errors.Is(err, engine) || !strings.Contains(err.Error(), "--egress-subnet") {
		t.Errorf("got %v, want an unavailable error naming --egress-subnet that keeps the engine's", err)
	}
	if err := startError("sb-1", errors.New("Error response from daemon: something else")); errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("another engine error became unavailable: %v", err)
	}
}
