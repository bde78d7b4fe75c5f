// Package templates owns sandbox templates: named images built from a
// Dockerfile on the host's engine, each build a new version with its own
// image tag (hotcell-tpl/<name>:<version>-<build id>), with the create defaults that
// sandboxes made from the template start with.
package templates

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/keyedmutex"
	"github.com/hotcell/hotcell/internal/wire"
)

// Repo is the repository template images are tagged in.
const Repo = "hotcell-tpl"

// Labels on a template's image.
const (
	LabelTemplate = "hotcell.template"
	LabelVersion  = "hotcell.template.version"
)

// Store is what the service keeps templates in, and where it finds the
// sandboxes that use one.
type Store interface {
	PutTemplate(ctx context.Context, t wire.Template) error
	GetTemplate(ctx context.Context, name string) (wire.Template, error)
	LatestTemplateVersion(ctx context.Context, name string) (int, error)
	ListTemplates(ctx context.Context) ([]wire.Template, error)
	ListTemplateVersions(ctx context.Context, name string) ([]wire.Template, error)
	DeleteTemplate(ctx context.Context, name string) error
}

// Sandboxes lists the sandboxes that exist, to see which use a template.
type Sandboxes func(ctx context.Context) ([]wire.Sandbox, error)

// Capturer saves a running sandbox whole: its root filesystem as an image
// and its workspace as a backup (backup.Service).
type Capturer interface {
	Capture(ctx context.Context, sandboxID, ref string, labels map[string]string, source string) (backup.Capture, error)
	Discard(ctx context.Context, c backup.Capture)
	RemoveWorkspace(ctx context.Context, sandboxID, backupID string) error
}

// Service builds, lists and deletes templates. It is safe for concurrent use.
type Service struct {
	st        Store
	drv       driver.ImageBuilder
	sandboxes Sandboxes
	log       *slog.Logger
	capture   Capturer
	// ensure makes an image available to the driver (its EnsureImage),
	// for templates from an existing image; nil refuses them.
	ensure func(ctx context.Context, ref string, progress driver.Progress) error
	ops    *inflight.Group
	// buildTimeout bounds each build (template_build_timeout); 0: none.
	buildTimeout time.Duration
	// locks serialise the builds and deletes of one name, so that two
	// builds never take the same version.
	locks keyedmutex.Map
}

// New returns the service.
func New(st Store, drv driver.ImageBuilder, sandboxes Sandboxes, log *slog.Logger) *Service {
	return &Service{st: st, drv: drv, sandboxes: sandboxes, log: log.With("component", "templates"), ops: inflight.New()}
}

// BoundBuilds stops every later build that runs longer than timeout.
// Call it before the service is used.
func (s *Service) BoundBuilds(timeout time.Duration) { s.buildTimeout = timeout }

// UseCapture lets templates be saved from sandboxes (Save) with c, and
// tracks saves in ops, which the daemon's shutdown waits for. Call it
// before the service is used.
func (s *Service) UseCapture(c Capturer, ops *inflight.Group) {
	s.capture, s.ops = c, ops
}

// UseImages lets templates be registered from existing images
// (FromImage), ensure (the driver's EnsureImage) checking that each exists.
// Call it before the service is used.
func (s *Service) UseImages(ensure func(ctx context.Context, ref string, progress driver.Progress) error) {
	s.ensure = ensure
}

var namePattern = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*$`)

// ValidateName checks a template name: it becomes part of an image tag.
func ValidateName(field, name string) error {
	if name == "" {
		return errdefs.Invalid(field, "is required")
	}
	if len(name) > 63 || !namePattern.MatchString(name) {
		return errdefs.Invalid(field, "%q is not a template name (lower-case letters and digits, joined by single . _ or -, at most 63)", clip(name))
	}
	return nil
}

// ValidateDockerfile checks the Dockerfile's path inside the build
// context; empty means "Dockerfile".
func ValidateDockerfile(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > 255 || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) ||
		path.IsAbs(p) || strings.HasPrefix(path.Clean(p), "..") {
		return errdefs.Invalid("dockerfile", "%q is not a relative path inside the build context", clip(p))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ValidateWorkspaceFrom checks a build's workspace seed directory: an
// absolute path in the image, outside /workspace (the sandbox's own) and
// the kernel's and hotcell's mounts.
func ValidateWorkspaceFrom(p string) error {
	if p == "" {
		return nil
	}
	clean := path.Clean(p)
	if len(p) > 255 || !path.IsAbs(p) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errdefs.Invalid("workspace", "%q is not an absolute directory path in the image", clip(p))
	}
	for _, no := range []string{"/", "/workspace", "/.hotcell", "/proc", "/sys", "/dev"} {
		if clean == no || (no != "/" && strings.HasPrefix(clean, no+"/")) {
			return errdefs.Invalid("workspace", "%q: the seed must be a directory of the image outside %s", clip(p), no)
		}
	}
	return nil
}

// SeedFromImage is a create's populate step that copies directory dir of
// the sandbox's own image into its /workspace, through its agent (tar out,
// tar in: nothing of it is read on the host).
func SeedFromImage(dir string) func(ctx context.Context, id string, conn *agentconn.Conn) error {
	return func(ctx context.Context, id string, conn *agentconn.Conn) error {
		get, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/archive?"+url.Values{"path": {dir}}.Encode(), nil)
		if err != nil {
			return err
		}
		resp, err := conn.Do(get)
		if err != nil {
			return fmt.Errorf("seed the workspace from %s: %w", dir, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("seed the workspace from the template's %s (is it a directory of the image?): %w", dir, errdefs.Read(resp))
		}
		put, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/archive?"+url.Values{"path": {fspath.Workspace}}.Encode(), resp.Body)
		if err != nil {
			return err
		}
		put.Header.Set("Content-Type", "application/x-tar")
		presp, err := conn.Send(put)
		if err != nil {
			return fmt.Errorf("seed the workspace from %s: %w", dir, err)
		}
		presp.Body.Close()
		return nil
	}
}

// Seed is the populate step a create from t needs for its workspace seed
// from the image, nil when t has none or the create restores a backup (a
// saved template's seed is a backup: Apply made it the create's restore).
func Seed(t wire.Template, req *wire.CreateSandboxRequest) func(ctx context.Context, id string, conn *agentconn.Conn) error {
	if t.WorkspaceFrom == "" || req.Restore != nil {
		return nil
	}
	return SeedFromImage(t.WorkspaceFrom)
}

// ImageRef is the image tag of a template version made by build: the
// build id keeps it apart from the tags of other daemons on the same engine
// and of the versions of an earlier template of the same name, whose
// images sandboxes may still run.
func ImageRef(name string, version int, build string) string {
	return Repo + "/" + name + ":" + strconv.Itoa(version) + "-" + build
}

func newBuildID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// nextVersion is the version the next build of name takes: past every
// recorded one, and past every version a sandbox still names, so that a
// name deleted (forced) and built again never hands out a version a
// running sandbox reports as another image's.
func (s *Service) nextVersion(ctx context.Context, name string) (int, error) {
	v, err := s.st.LatestTemplateVersion(ctx, name)
	if err != nil {
		return 0, err
	}
	sbs, err := s.sandboxes(ctx)
	if err != nil {
		return 0, err
	}
	for _, sb := range sbs {
		if sb.Template != nil && sb.Template.Name == name && sb.Template.Version > v {
			v = sb.Template.Version
		}
	}
	return v + 1, nil
}

// Build builds the next version of name from buildContext (a tar stream
// holding the Dockerfile at dockerfile), passing the build log to
// progress, and records it with defaults once its image exists. A failed
// build records nothing. The inputs are validated by the caller.
func (s *Service) Build(ctx context.Context, name, dockerfile string, defaults wire.TemplateDefaults, buildContext io.Reader, progress driver.Progress) (wire.Template, error) {
	return s.BuildSeeded(ctx, name, dockerfile, "", defaults, buildContext, progress)
}

// BuildSeeded is Build with a workspace seed: directory workspaceFrom of
// the built image (ValidateWorkspaceFrom), copied into the workspace of
// every sandbox made from the version.
func (s *Service) BuildSeeded(ctx context.Context, name, dockerfile, workspaceFrom string, defaults wire.TemplateDefaults, buildContext io.Reader, progress driver.Progress) (wire.Template, error) {
	if dockerfile == "" {
		dockerfile = "Dockerfile"
	}
	// A build is one of the daemon's operations: the shutdown waits for
	// it, then cancels it (the engine stops the build, nothing is recorded).
	ctx, end, err := s.ops.Begin(ctx)
	if err != nil {
		return wire.Template{}, err
	}
	defer end()
	var errTimeout error
	if s.buildTimeout > 0 {
		errTimeout = fmt.Errorf("the build ran past template_build_timeout (%s) and was stopped; nothing was recorded: make it faster or raise template_build_timeout: %w",
			s.buildTimeout, errdefs.ErrDeadlineExceeded)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.buildTimeout, errTimeout)
		defer cancel()
	}
	unlock := s.locks.Lock(name)
	defer unlock()
	v, err := s.nextVersion(ctx, name)
	if err != nil {
		return wire.Template{}, err
	}
	t := wire.Template{Name: name, Version: v, Image: ImageRef(name, v, newBuildID()), Defaults: defaults, WorkspaceFrom: workspaceFrom}
	labels := map[string]string{LabelTemplate: name, LabelVersion: strconv.Itoa(t.Version)}
	if err := s.drv.BuildImage(ctx, t.Image, dockerfile, labels, buildContext, progress); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			// The engine may have tagged the image just before it saw
			// the cancellation; nothing records it, so it goes.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			if rerr := s.drv.RemoveImage(rctx, t.Image); rerr != nil {
				s.log.Warn("remove the image of a stopped build", "image", t.Image, "err", rerr)
			}
			cancel()
			if errTimeout != nil && errors.Is(cause, errTimeout) || errors.Is(cause, inflight.ErrShuttingDown) {
				err = cause
			}
		}
		return wire.Template{}, fmt.Errorf("build template %q: %w", name, err)
	}
	t.CreatedAt = time.Now().UTC()
	// The record outlives a client that hung up once the image exists.
	ctx = context.WithoutCancel(ctx)
	if err := s.st.PutTemplate(ctx, t); err != nil {
		if rerr := s.drv.RemoveImage(ctx, t.Image); rerr != nil {
			s.log.Warn("remove the image of an unrecorded template", "image", t.Image, "err", rerr)
		}
		return wire.Template{}, err
	}
	s.log.Info("template built", "name", name, "version", t.Version, "image", t.Image)
	return t, nil
}

// FromImage records the next version of name as the existing image ref,
// with no build: the driver makes it available (a pull on Docker, a
// node or the registry on Kubernetes), passing its progress on, and a
// missing image is errdefs.ErrInvalidArgument naming image. Deleting the
// template leaves the image. The inputs are validated by the caller.
func (s *Service) FromImage(ctx context.Context, name, ref, workspaceFrom string, defaults wire.TemplateDefaults, progress driver.Progress) (wire.Template, error) {
	if s.ensure == nil {
		return wire.Template{}, fmt.Errorf("templates from images are not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	ctx, end, err := s.ops.Begin(ctx)
	if err != nil {
		return wire.Template{}, err
	}
	defer end()
	if err := s.ensure(ctx, ref, progress); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return wire.Template{}, errdefs.Invalid("image", "%v", err)
		}
		return wire.Template{}, fmt.Errorf("template %q: image %s: %w", name, ref, err)
	}
	unlock := s.locks.Lock(name)
	defer unlock()
	v, err := s.nextVersion(ctx, name)
	if err != nil {
		return wire.Template{}, err
	}
	t := wire.Template{Name: name, Version: v, Image: ref, Defaults: defaults, WorkspaceFrom: workspaceFrom,
		FromImage: true, CreatedAt: time.Now().UTC()}
	if err := s.st.PutTemplate(context.WithoutCancel(ctx), t); err != nil {
		return wire.Template{}, err
	}
	s.log.Info("template registered from an image", "name", name, "version", t.Version, "image", t.Image)
	return t, nil
}

// Get returns the latest version of name.
func (s *Service) Get(ctx context.Context, name string) (wire.Template, error) {
	return s.st.GetTemplate(ctx, name)
}

// List returns the latest version of every template.
func (s *Service) List(ctx context.Context) ([]wire.Template, error) {
	return s.st.ListTemplates(ctx)
}

// Delete removes every version of name and their images. While a sandbox
// made from it exists, it is refused with errdefs.ErrConflict unless
// force; forced, the images those sandboxes run stay on the engine (it
// refuses to remove them) until removed by hand.
func (s *Service) Delete(ctx context.Context, name string, force bool) error {
	unlock := s.locks.Lock(name)
	defer unlock()
	versions, err := s.st.ListTemplateVersions(ctx, name)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		return fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	sbs, err := s.sandboxes(ctx)
	if err != nil {
		return err
	}
	var users []string
	for _, sb := range sbs {
		if sb.Template != nil && sb.Template.Name == name {
			users = append(users, sb.ID)
		}
	}
	slices.Sort(users)
	if len(users) > 0 && !force {
		return fmt.Errorf("template %q is used by sandbox(es) %s; destroy them first or delete with force=true: %w",
			name, strings.Join(users, ", "), errdefs.ErrConflict)
	}
	if err := s.st.DeleteTemplate(ctx, name); err != nil {
		return err
	}
	for _, t := range versions {
		if t.FromImage {
			// Not hotcell's image: other templates, sandboxes or
			// users of the engine may name it.
		} else if err := s.drv.RemoveImage(ctx, t.Image); err != nil {
			s.log.Warn("keep the image of a deleted template version", "image", t.Image, "err", err)
		}
		if w := t.Workspace; w != nil && s.capture != nil {
			if err := s.capture.RemoveWorkspace(ctx, w.SandboxID, w.BackupID); err != nil {
				s.log.Warn("keep the workspace seed of a deleted template version", "backup", w.BackupID, "err", err)
			}
		}
	}
	s.log.Info("template deleted", "name", name, "versions", len(versions), "force", force, "users", len(users))
	return nil
}

// Apply fills req from template t: its image, and each default the request
// leaves out (env key by key). The request must not name an image or a
// snapshot (the caller checks).
func Apply(req *wire.CreateSandboxRequest, t wire.Template) {
	d := t.Defaults
	req.Image = t.Image
	if len(d.Env) > 0 {
		env := make(map[string]string, len(d.Env)+len(req.Env))
		for k, v := range d.Env {
			env[k] = v
		}
		for k, v := range req.Env {
			env[k] = v
		}
		req.Env = env
	}
	if req.Limits.MemoryMB == 0 {
		req.Limits.MemoryMB = d.Limits.MemoryMB
	}
	if req.Limits.CPUs == 0 {
		req.Limits.CPUs = d.Limits.CPUs
	}
	if req.Limits.PidsLimit == 0 {
		req.Limits.PidsLimit = d.Limits.PidsLimit
	}
	if req.Limits.DiskMB == 0 {
		req.Limits.DiskMB = d.Limits.DiskMB
	}
	if req.Runtime == "" {
		req.Runtime = d.Runtime
	}
	if req.Egress == nil && d.Egress != nil {
		e := *d.Egress
		req.Egress = &e
	}
	if req.Timeouts == nil && d.Timeouts != nil {
		to := *d.Timeouts
		req.Timeouts = &to
	}
	// The seed is where the workspace starts; a create that restores a
	// backup of its own starts from that instead.
	if w := t.Workspace; w != nil && req.Restore == nil {
		req.Restore = &wire.RestoreSource{SandboxID: w.SandboxID, BackupID: w.BackupID}
	}
}

// Save makes the next version of template name from a running sandbox:
// its root filesystem (committed while the engine pauses the box; its
// processes go on after) as the image, its workspace as the workspace
// seed, and its env, limits, runtime and egress policy as the defaults,
// each overridden by over's (env key by key). A failed save records
// nothing and leaves the name's earlier versions as they were.
func (s *Service) Save(ctx context.Context, sandboxID, name string, over *wire.TemplateDefaults) (wire.Template, error) {
	if s.capture == nil {
		return wire.Template{}, fmt.Errorf("saving sandboxes as templates is not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	// The image and the seed are recorded or removed, whoever hangs up;
	// the daemon's shutdown waits for the save.
	ctx, end, err := s.ops.Detach(ctx)
	if err != nil {
		return wire.Template{}, err
	}
	defer end()
	sb, err := s.sandbox(ctx, sandboxID)
	if err != nil {
		return wire.Template{}, err
	}
	// The engine's commit keeps the box's whole env in the image, the
	// gateway's tokens with it (they are in the box's env, not in the
	// record): every sandbox made from the template would hold them.
	if len(sb.Gateway) > 0 {
		return wire.Template{}, fmt.Errorf("sandbox %s holds LLM gateway tokens (%s), which its image would carry into every sandbox made from the template; revoke them first (DELETE /v1/sandboxes/%s/gateway/{provider}) or save a sandbox made without gateway: %w",
			sandboxID, strings.Join(sb.Gateway, ", "), sandboxID, errdefs.ErrConflict)
	}
	unlock := s.locks.Lock(name)
	defer unlock()
	v, err := s.nextVersion(ctx, name)
	if err != nil {
		return wire.Template{}, err
	}
	t := wire.Template{Name: name, Version: v, Image: ImageRef(name, v, newBuildID()), FromSandbox: sandboxID,
		Defaults: fromSandbox(sb, over)}
	labels := map[string]string{LabelTemplate: name, LabelVersion: strconv.Itoa(v)}
	c, err := s.capture.Capture(ctx, sandboxID, t.Image, labels, backup.SourceTemplate)
	if err != nil {
		return wire.Template{}, fmt.Errorf("save sandbox %s as template %q: %w", sandboxID, name, err)
	}
	t.Workspace = &wire.TemplateWorkspace{SandboxID: sandboxID, BackupID: c.Workspace.ID, Size: c.Workspace.Size}
	t.CreatedAt = time.Now().UTC()
	if err := s.st.PutTemplate(ctx, t); err != nil {
		s.capture.Discard(ctx, c)
		return wire.Template{}, err
	}
	s.log.Info("template saved from a sandbox", "name", name, "version", v, "image", t.Image, "sandbox", sandboxID, "workspace", c.Workspace.ID)
	return t, nil
}

func (s *Service) sandbox(ctx context.Context, id string) (wire.Sandbox, error) {
	sbs, err := s.sandboxes(ctx)
	if err != nil {
		return wire.Sandbox{}, err
	}
	for _, sb := range sbs {
		if sb.ID == id {
			return sb, nil
		}
	}
	return wire.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// fromSandbox is the defaults of a template saved from sb: sb's env,
// limits, runtime and egress, each overridden by over's.
func fromSandbox(sb wire.Sandbox, over *wire.TemplateDefaults) wire.TemplateDefaults {
	d := wire.TemplateDefaults{Env: sb.Env, Limits: sb.Limits, Runtime: sb.Runtime}
	if sb.Egress != nil {
		e := *sb.Egress
		d.Egress = &e
	}
	if over == nil {
		return d
	}
	req := wire.CreateSandboxRequest{Env: over.Env, Limits: over.Limits, Runtime: over.Runtime, Egress: over.Egress, Timeouts: over.Timeouts}
	Apply(&req, wire.Template{Defaults: d})
	return wire.TemplateDefaults{Env: req.Env, Limits: req.Limits, Runtime: req.Runtime, Egress: req.Egress, Timeouts: req.Timeouts}
}
