package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

var _ driver.ImageBuilder = (*Driver)(nil)

// BuildLimits bound the containers the engine's builder runs a build's RUN
// steps in. Zero fields are the engine's defaults (no limit, its bridge).
type BuildLimits struct {
	MemoryBytes int64
	CPUs        float64
	// Network is the builder's network mode: "" or "default" for the
	// engine's bridge, "none" for none.
	Network string
}

// UseBuildLimits makes every later BuildImage run under l. Call it before
// the driver is used.
func (d *Driver) UseBuildLimits(l BuildLimits) { d.build = l }

// buildCPUPeriod is the CFS period a build's CPU quota is counted in.
const buildCPUPeriod = 100_000

// BuildImage builds ref from the tar stream buildContext with the engine's
// builder (no registry: FROM names a local image, or one the engine can
// pull), passing each line of build output to progress. The image carries
// driver.LabelManaged and labels. A build that fails (a RUN that exits
// non-zero, a Dockerfile the engine rejects) is errdefs.ErrInvalidArgument
// naming the dockerfile, with the engine's message; its intermediate
// containers are removed and ref is not tagged.
func (d *Driver) BuildImage(ctx context.Context, ref, dockerfile string, labels map[string]string, buildContext io.Reader, progress driver.Progress) error {
	all := map[string]string{driver.LabelManaged: "true"}
	for k, v := range labels {
		all[k] = v
	}
	opts := client.ImageBuildOptions{
		Tags:        []string{ref},
		Dockerfile:  dockerfile,
		Remove:      true,
		ForceRemove: true,
		Labels:      all,
		NetworkMode: d.build.Network,
	}
	if m := d.build.MemoryBytes; m > 0 {
		// Swap as large as the memory: a RUN step cannot page past 2×.
		opts.Memory, opts.MemorySwap = m, 2*m
	}
	if c := d.build.CPUs; c > 0 {
		opts.CPUPeriod, opts.CPUQuota = buildCPUPeriod, int64(c*buildCPUPeriod)
	}
	res, err := d.c.ImageBuild(ctx, buildContext, opts)
	if err != nil {
		return classify("build image "+ref, err)
	}
	defer res.Body.Close()
	var partial string
	emit := func(s string) {
		partial += s
		for {
			i := strings.IndexByte(partial, '\n')
			if i < 0 {
				return
			}
			if progress != nil {
				progress(strings.TrimRight(partial[:i], "\r"))
			}
			partial = partial[i+1:]
		}
	}
	dec := json.NewDecoder(res.Body)
	for {
		var msg jsonstream.Message
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return classify("build image "+ref, err)
		}
		if msg.Error != nil {
			emit("\n")
			return errdefs.Invalid("dockerfile", "the build failed: %s", msg.Error.Message)
		}
		switch {
		case msg.Stream != "":
			emit(msg.Stream)
		case msg.Status != "":
			line := msg.Status
			if msg.ID != "" {
				line = msg.ID + ": " + line
			}
			emit(line + "\n")
		}
	}
	emit("\n")
	if ok, err := d.hasImage(ctx, ref); err != nil || !ok {
		if err == nil {
			err = errors.New("the build finished but the image is not tagged")
		}
		return fmt.Errorf("build image %s: %w", ref, err)
	}
	return nil
}
