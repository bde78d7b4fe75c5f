package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// BaseImage is the image hotcell builds itself (hotcell image build).
const BaseImage = "hotcell/base:latest"

// EnsureImage makes ref available locally. A local image wins; otherwise it
// is pulled, with the engine's progress messages passed to progress. When the
// pull fails (no registry is reachable on many hosts that run hotcell) the
// error wraps errdefs.ErrNotFound and says how to build the image instead.
func (d *Driver) EnsureImage(ctx context.Context, ref string, progress driver.Progress) error {
	if ref == "" {
		return errdefs.Invalid("image", "image is empty")
	}
	ok, err := d.hasImage(ctx, ref)
	if err != nil || ok {
		return err
	}
	pullErr := d.pull(ctx, ref, progress)
	if pullErr == nil {
		// A pull that "succeeds" without producing the image would fail
		// later at create with a less helpful message; check now.
		if ok, err := d.hasImage(ctx, ref); err != nil || ok {
			return err
		}
		pullErr = errors.New("pull finished but the image is not present")
	}
	if errors.Is(pullErr, errdefs.ErrUnavailable) || errors.Is(pullErr, context.Canceled) {
		return pullErr
	}
	return fmt.Errorf("image %s is not available locally and pulling it failed (%v); %s: %w",
		ref, pullErr, buildHint(ref), errdefs.ErrNotFound)
}

func (d *Driver) hasImage(ctx context.Context, ref string) (bool, error) {
	_, err := d.c.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, classify("inspect image "+ref, err)
}

// pull pulls ref and reports progress. Errors arrive inside the message
// stream, not only from ImagePull itself.
func (d *Driver) pull(ctx context.Context, ref string, progress driver.Progress) error {
	resp, err := d.c.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return classify("pull image "+ref, err)
	}
	defer resp.Close()
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return classify("pull image "+ref, err)
		}
		if msg.Error != nil {
			return fmt.Errorf("pull image %s: %s", ref, msg.Error.Message)
		}
		if progress != nil && msg.Status != "" {
			line := msg.Status
			if msg.ID != "" {
				line = msg.ID + ": " + line
			}
			progress(line)
		}
	}
	return nil
}

// buildHint tells the user how to get ref onto this host without a registry.
func buildHint(ref string) string {
	if strings.HasPrefix(ref, "hotcell/base") {
		return "build it with `hotcell image build`"
	}
	return fmt.Sprintf("build it with `docker build -t %s .` or load a root filesystem with `docker import rootfs.tar %s` (`hotcell image build` builds hotcell/base)", ref, ref)
}
