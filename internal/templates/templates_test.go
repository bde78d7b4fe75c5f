package templates

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"py", "py-data", "a.b_c-1", "x1"} {
		if err := ValidateName("name", n); err != nil {
			t.Errorf("name %q: got %v, want ok", n, err)
		}
	}
	for _, n := range []string{"", "Py", "-py", "py-", "a--b", "a/b", "a:b", "../x", string(make([]byte, 64))} {
		if err := ValidateName("name", n); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("name %q: got %v, want invalid", n, err)
		}
	}
	for _, p := range []string{"", "Dockerfile", "sub/Dockerfile.dev"} {
		if err := ValidateDockerfile(p); err != nil {
			t.Errorf("dockerfile %q: got %v, want ok", p, err)
		}
	}
	for _, p := range []string{"/etc/passwd", "../Dockerfile", "a/../../b", "a\nb"} {
		if err := ValidateDockerfile(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("dockerfile %q: got %v, want invalid", p, err)
		}
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	tpl := wire.Template{Name: "py", Version: 3, Image: ImageRef("py", 3, "0a1b2c3d"), Defaults: wire.TemplateDefaults{
		Env:      map[string]string{"A": "tpl", "B": "tpl"},
		Limits:   wire.Limits{MemoryMB: 512, CPUs: 2},
		Runtime:  wire.RuntimeGVisor,
		Timeouts: &wire.Timeouts{IdleSeconds: 1000},
	}}
	req := wire.CreateSandboxRequest{Template: "py", Env: map[string]string{"B": "req"}, Limits: wire.Limits{CPUs: 1}}
	Apply(&req, tpl)
	if req.Image != "hotcell-tpl/py:3-0a1b2c3d" || req.Env["A"] != "tpl" || req.Env["B"] != "req" ||
		req.Limits.MemoryMB != 512 || req.Limits.CPUs != 1 || req.Runtime != wire.RuntimeGVisor || req.Timeouts == nil || req.Timeouts.IdleSeconds != 1000 {
		t.Errorf("applied: got %+v", req)
	}
	if tpl.Defaults.Env["B"] != "tpl" {
		t.Errorf("the template's env was changed: %v", tpl.Defaults.Env)
	}
}

// fakeBuilder records images; a Dockerfile named "fail" fails the build.
type fakeBuilder struct{ images map[string]bool }

func (f *fakeBuilder) BuildImage(ctx context.Context, ref, dockerfile string, labels map[string]string, r io.Reader, progress driver.Progress) error {
	progress("step 1")
	if dockerfile == "fail" {
		return errdefs.Invalid("dockerfile", "the build failed: exit 1")
	}
	f.images[ref] = true
	return nil
}

func (f *fakeBuilder) RemoveImage(ctx context.Context, ref string) error {
	delete(f.images, ref)
	return nil
}

func TestBuildVersionsAndDelete(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fb := &fakeBuilder{images: map[string]bool{}}
	var sbs []wire.Sandbox
	svc := New(st, fb, func(context.Context) ([]wire.Sandbox, error) { return sbs, nil }, slog.New(slog.DiscardHandler))

	if _, err := svc.Build(ctx, "py", "fail", wire.TemplateDefaults{}, nil, func(string) {}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("failed build: got %v, want invalid", err)
	}
	if _, err := svc.Get(ctx, "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after a failed build: got %v, want not found", err)
	}
	for want := 1; want <= 2; want++ {
		tp, err := svc.Build(ctx, "py", "", wire.TemplateDefaults{}, nil, func(string) {})
		if err != nil || tp.Version != want || !strings.HasPrefix(tp.Image, "hotcell-tpl/py:"+strconv.Itoa(want)+"-") {
			t.Fatalf("build %d: got %+v, %v", want, tp, err)
		}
	}
	sbs = []wire.Sandbox{{ID: "sb1", Template: &wire.TemplateRef{Name: "py", Version: 1}}}
	if err := svc.Delete(ctx, "py", false); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("delete while used: got %v, want conflict", err)
	}
	if _, err := svc.Get(ctx, "py"); err != nil {
		t.Fatalf("a refused delete removed the template: %v", err)
	}
	if err := svc.Delete(ctx, "py", true); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if len(fb.images) != 0 {
		t.Errorf("images left: %v", fb.images)
	}
	if err := svc.Delete(ctx, "py", false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete again: got %v, want not found", err)
	}

	// Built again after the forced delete, while sb1 still runs version
	// 1 of the old one: the new build takes version 2 and another tag.
	tp, err := svc.Build(ctx, "py", "", wire.TemplateDefaults{}, nil, func(string) {})
	if err != nil || tp.Version != 2 {
		t.Fatalf("build after delete: got %+v, %v, want version 2 (sb1 still names version 1)", tp, err)
	}
	sbs = nil
	if err := svc.Delete(ctx, "py", false); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		tp, err := svc.Build(ctx, "py", "", wire.TemplateDefaults{}, nil, func(string) {})
		if err != nil || tp.Version != 1 || seen[tp.Image] {
			t.Fatalf("build %d after delete with no users: got %+v, %v, want version 1 with a tag never used before %v", i, tp, err, seen)
		}
		seen[tp.Image] = true
		if err := svc.Delete(ctx, "py", false); err != nil {
			t.Fatal(err)
		}
	}
}

func TestValidateWorkspaceFrom(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "/opt/seed", "/home/user/project", "/srv/a/b/"} {
		if err := ValidateWorkspaceFrom(p); err != nil {
			t.Errorf("%q: got %v, want ok", p, err)
		}
	}
	for _, p := range []string{"opt/seed", "../x", "/", "/workspace", "/workspace/sub", "/.hotcell/run", "/proc/self", "/sys", "/dev/shm", "/opt/\x00x", "/opt/" + strings.Repeat("a", 300)} {
		if err := ValidateWorkspaceFrom(p); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "workspace") {
			t.Errorf("%q: got %v, want invalid naming workspace", p, err)
		}
	}
}

// TestFromImage: a template from an existing image takes the next version
// beside builds, a missing image is invalid naming image and records
// nothing, and a delete removes the built images but not the one it was
// given.
func TestFromImage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fb := &fakeBuilder{images: map[string]bool{"registry.test/team/py:1": true}}
	svc := New(st, fb, func(context.Context) ([]wire.Sandbox, error) { return nil, nil }, slog.New(slog.DiscardHandler))
	if _, err := svc.FromImage(ctx, "py", "registry.test/team/py:1", "", wire.TemplateDefaults{}, nil); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("without UseImages: got %v, want not implemented", err)
	}
	svc.UseImages(func(ctx context.Context, ref string, _ driver.Progress) error {
		if !fb.images[ref] {
			return fmt.Errorf("image %s: %w", ref, errdefs.ErrNotFound)
		}
		return nil
	})
	if _, err := svc.FromImage(ctx, "py", "registry.test/team/missing:1", "", wire.TemplateDefaults{}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "image: ") {
		t.Fatalf("missing image: got %v, want invalid naming image", err)
	}
	if _, err := svc.Get(ctx, "py"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("after a missing image: got %v, want nothing recorded", err)
	}
	built, err := svc.Build(ctx, "py", "", wire.TemplateDefaults{}, nil, func(string) {})
	if err != nil || built.Version != 1 || built.FromImage {
		t.Fatalf("build: %+v, %v", built, err)
	}
	tp, err := svc.FromImage(ctx, "py", "registry.test/team/py:1", "", wire.TemplateDefaults{Env: map[string]string{"A": "1"}}, nil)
	if err != nil || tp.Version != 2 || tp.Image != "registry.test/team/py:1" || !tp.FromImage || tp.Defaults.Env["A"] != "1" {
		t.Fatalf("from image: %+v, %v, want version 2 of the image as named", tp, err)
	}
	if got, err := svc.Get(ctx, "py"); err != nil || got.Version != 2 || !got.FromImage {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if err := svc.Delete(ctx, "py", false); err != nil {
		t.Fatal(err)
	}
	if fb.images[built.Image] || !fb.images["registry.test/team/py:1"] {
		t.Errorf("images after the delete: %v, want the built one removed and the given one kept", fb.images)
	}
}
