package templates

import (
	"context"
	"errors"
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
