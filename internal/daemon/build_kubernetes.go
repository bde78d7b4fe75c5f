package daemon

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/stepbuild"
	"github.com/hotcell/hotcell/internal/wire"
)

// LabelBuild marks the sandbox a template build on Kubernetes runs in;
// its value is the image being built, its / and : made . and - (a label
// value's characters).
const LabelBuild = "hotcell.build"

// buildSandboxGrace is how long a build's sandbox outlives the build's
// bound (template_build_timeout) before its lifetime destroys it.
const buildSandboxGrace = 5 * time.Minute

// BuildImage builds a template's Dockerfile on Kubernetes, where no image
// builder is at hand: each stage runs in a sandbox of its base
// (stepbuild), and the last one's root filesystem is committed to the
// registry with the steps' env and labels. A stage that more than one
// stage builds on is committed too, as an image of its own removed after
// the build. Every sandbox is destroyed whatever happens.
func (k kubeImages) BuildImage(ctx context.Context, ref, dockerfile string, labels map[string]string, buildContext io.Reader, progress driver.Progress) (err error) {
	if progress == nil {
		progress = func(string) {}
	}
	bctx, done, err := buildContextOf(buildContext)
	if err != nil {
		return err
	}
	defer done()
	df, err := stepbuild.ReadFile(bctx, dockerfile)
	if err != nil {
		return err
	}
	plan, err := stepbuild.Parse(df)
	if err != nil {
		return err
	}
	boxes := &kubeBuildBoxes{k: k, ref: ref, progress: progress}
	defer func() { err = errors.Join(err, boxes.removeImages(ctx)) }()
	last, res, err := stepbuild.Build(ctx, plan, bctx, boxes, progress)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, boxes.Drop(ctx, last)) }()
	all := maps.Clone(res.Labels)
	maps.Copy(all, labels)
	progress("Committing the build's root filesystem to the registry")
	return k.drv.CommitWithEnv(ctx, last.(*kubeBuildBox).id, ref, all, res.Env)
}

// kubeBuildBoxes are the sandboxes a build on Kubernetes runs in.
type kubeBuildBoxes struct {
	k        kubeImages
	ref      string // the image being built
	progress driver.Progress
	saved    []string // the stages' images Save made
}

// kubeBuildBox is a build's sandbox.
type kubeBuildBox struct {
	stepbuild.Box
	id string
}

// Start starts a sandbox of image for the build, labelled LabelBuild and
// bound by the build's limits, its network as template_build_network
// says.
func (b *kubeBuildBoxes) Start(ctx context.Context, image string) (stepbuild.Box, error) {
	cfg := b.k.cfg
	req := wire.CreateSandboxRequest{
		Image:   image,
		Persist: new(bool),
		Labels:  map[string]string{LabelBuild: strings.ReplaceAll(strings.ReplaceAll(b.ref, "/", "."), ":", "-")},
		Limits:  cfg.TemplateBuildLimits,
		// No idle timeout: the build's own calls do not go through the
		// API, which counts activity. A lifetime past the build's bound
		// destroys the sandbox of a build whose daemon died.
		Timeouts: &wire.Timeouts{
			MaxLifetimeSeconds: int64((cfg.TemplateBuildTimeout + buildSandboxGrace) / time.Second),
			LifetimeAction:     wire.ActionDestroy,
		},
	}
	if cfg.TemplateBuildNetwork == config.BuildNetworkNone {
		req.Egress = &wire.EgressPolicy{Mode: wire.EgressNone}
	}
	mgr := *b.k.mgr
	sb, err := mgr.Create(ctx, req, sandbox.CreateOptions{Progress: b.progress})
	if err != nil {
		return nil, err
	}
	conn, err := mgr.Agent(ctx, sb.ID)
	if err != nil {
		return nil, errors.Join(err, b.destroy(ctx, sb.ID))
	}
	return &kubeBuildBox{stepbuild.AgentBox(conn), sb.ID}, nil
}

// Save commits a stage's sandbox as an image of the template's repository,
// tagged after the built one's.
func (b *kubeBuildBoxes) Save(ctx context.Context, box stepbuild.Box, env map[string]string) (string, error) {
	ref := fmt.Sprintf("%s-stage%d", b.ref, len(b.saved)+1)
	if err := b.k.drv.CommitWithEnv(ctx, box.(*kubeBuildBox).id, ref, nil, env); err != nil {
		return "", err
	}
	b.saved = append(b.saved, ref)
	return ref, nil
}

// Drop destroys a build's sandbox.
func (b *kubeBuildBoxes) Drop(ctx context.Context, box stepbuild.Box) error {
	return b.destroy(ctx, box.(*kubeBuildBox).id)
}

func (b *kubeBuildBoxes) destroy(ctx context.Context, id string) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	mgr := *b.k.mgr
	if err := mgr.Destroy(dctx, id); err != nil {
		return fmt.Errorf("destroy the build's sandbox %s: %w", id, err)
	}
	return nil
}

// removeImages removes the stages' images from the registry, once the
// sandboxes that ran them are gone.
func (b *kubeBuildBoxes) removeImages(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var errs []error
	for _, ref := range b.saved {
		if err := b.k.drv.RemoveImage(ctx, ref); err != nil {
			errs = append(errs, fmt.Errorf("remove the build stage's image %s: %w", ref, err))
		}
	}
	return errors.Join(errs...)
}

// buildContextOf makes a context a build can read more than once: the
// API's spooled file as it is, any other stream spooled to a file.
func buildContextOf(r io.Reader) (stepbuild.Context, func(), error) {
	if f, ok := r.(*os.File); ok {
		return fileContext{f}, func() {}, nil
	}
	f, err := os.CreateTemp("", "hotcell-build-context-*.tar")
	if err != nil {
		return nil, nil, fmt.Errorf("spool the build context: %w", err)
	}
	done := func() { f.Close(); os.Remove(f.Name()) }
	if _, err := io.Copy(f, r); err != nil {
		done()
		return nil, nil, fmt.Errorf("spool the build context: %w", err)
	}
	return fileContext{f}, done, nil
}

// fileContext is a build context in a file: a tar, gzip-compressed or not.
type fileContext struct{ f *os.File }

func (c fileContext) Open() (io.ReadCloser, error) {
	if _, err := c.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c.f)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, errdefs.Invalid("context", "read gzip: %v", err)
		}
		return zr, nil
	}
	return io.NopCloser(br), nil
}
