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
// builder is at hand: a sandbox of the FROM image runs the steps
// (stepbuild), and its root filesystem is committed to the registry with
// the steps' env and labels. The sandbox is destroyed whatever happens.
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
	from, err := stepbuild.From(plan)
	if err != nil {
		return err
	}
	req := wire.CreateSandboxRequest{
		Image:   from,
		Persist: new(bool),
		Labels:  map[string]string{LabelBuild: strings.ReplaceAll(strings.ReplaceAll(ref, "/", "."), ":", "-")},
		Limits:  k.cfg.TemplateBuildLimits,
		// No idle timeout: the build's own calls do not go through the
		// API, which counts activity. A lifetime past the build's bound
		// destroys the sandbox of a build whose daemon died.
		Timeouts: &wire.Timeouts{
			MaxLifetimeSeconds: int64((k.cfg.TemplateBuildTimeout + buildSandboxGrace) / time.Second),
			LifetimeAction:     wire.ActionDestroy,
		},
	}
	if k.cfg.TemplateBuildNetwork == config.BuildNetworkNone {
		req.Egress = &wire.EgressPolicy{Mode: wire.EgressNone}
	}
	progress(stepbuild.FromStep(plan, from))
	mgr := *k.mgr
	sb, err := mgr.Create(ctx, req, sandbox.CreateOptions{Progress: progress})
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.Invalid("dockerfile", "FROM %s: %v", from, err)
		}
		return fmt.Errorf("start the build's sandbox of %s: %w", from, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if derr := mgr.Destroy(dctx, sb.ID); derr != nil {
			err = errors.Join(err, fmt.Errorf("destroy the build's sandbox %s: %w", sb.ID, derr))
		}
	}()
	conn, err := mgr.Agent(ctx, sb.ID)
	if err != nil {
		return err
	}
	res, err := stepbuild.Run(ctx, plan, bctx, stepbuild.AgentBox(conn), progress)
	if err != nil {
		return err
	}
	all := maps.Clone(res.Labels)
	maps.Copy(all, labels)
	progress("Committing the build's root filesystem to the registry")
	return k.drv.CommitWithEnv(ctx, sb.ID, ref, all, res.Env)
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
