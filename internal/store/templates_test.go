package store

import (
	"errors"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestTemplates(t *testing.T) {
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		now := time.Unix(1700000000, 0).UTC()
		tpl := func(name string, v int) wire.Template {
			return wire.Template{Name: name, Version: v, Image: "hotcell-tpl/" + name + ":" + string(rune('0'+v)), CreatedAt: now,
				Defaults: wire.TemplateDefaults{Env: map[string]string{"V": string(rune('0' + v))}}}
		}
		if _, err := s.GetTemplate(ctx, "py"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get missing: got %v, want not found", err)
		}
		if v, err := s.LatestTemplateVersion(ctx, "py"); err != nil || v != 0 {
			t.Fatalf("latest of none: got %d, %v, want 0", v, err)
		}
		for _, x := range []wire.Template{tpl("py", 1), tpl("py", 2), tpl("go", 1)} {
			if err := s.PutTemplate(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutTemplate(ctx, tpl("py", 2)); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("rewrite a version: got %v, want already exists", err)
		}
		if err := s.PutTemplate(ctx, wire.Template{Name: "x"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("version 0: got %v, want invalid", err)
		}
		got, err := s.GetTemplate(ctx, "py")
		if err != nil || got.Version != 2 || got.Defaults.Env["V"] != "2" || !got.CreatedAt.Equal(now) {
			t.Errorf("get py: got %+v, %v, want version 2", got, err)
		}
		if v, _ := s.LatestTemplateVersion(ctx, "py"); v != 2 {
			t.Errorf("latest py: got %d, want 2", v)
		}
		list, err := s.ListTemplates(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "go" || list[1].Name != "py" || list[1].Version != 2 {
			t.Errorf("list: got %+v, %v, want go:1, py:2", list, err)
		}
		if vs, _ := s.ListTemplateVersions(ctx, "py"); len(vs) != 2 {
			t.Errorf("versions of py: got %d, want 2", len(vs))
		}
		if err := s.DeleteTemplate(ctx, "py"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTemplate(ctx, "py"); err != nil {
			t.Errorf("delete again: %v", err)
		}
		if _, err := s.GetTemplate(ctx, "py"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("get deleted: got %v, want not found", err)
		}
		if list, _ := s.ListTemplates(ctx); len(list) != 1 {
			t.Errorf("list after delete: got %+v, want go only", list)
		}
	})
}

func TestPoolsAndPooledSandboxes(t *testing.T) {
	eachBackend(t, func(t *testing.T, be backend) {
		ctx := t.Context()
		st, _ := openTest(t, be)
		if err := st.PutPool(ctx, "py", wire.PoolConfig{Min: 2, Max: 4}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutPool(ctx, "py", wire.PoolConfig{Min: 3}); err != nil {
			t.Fatal(err)
		}
		pools, err := st.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := pools["py"]; len(pools) != 1 || got.Min != 3 || got.Max != 0 {
			t.Fatalf("got %+v, want one pool py with min 3", pools)
		}
		now := time.Now()
		for _, sb := range []wire.Sandbox{
			{ID: "sb-a", State: wire.StateRunning, CreatedAt: now, UpdatedAt: now, Pool: "py"},
			{ID: "sb-b", State: wire.StateRunning, CreatedAt: now, UpdatedAt: now},
		} {
			if err := st.Put(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := st.Count(ctx); err != nil || n != 1 {
			t.Fatalf("count: got %d, %v, want 1 (the pooled box is not counted)", n, err)
		}
		if l, _ := st.List(ctx, Filter{HidePooled: true}); len(l) != 1 || l[0].ID != "sb-b" {
			t.Fatalf("hidden list: got %+v, want sb-b only", l)
		}
		if l, _ := st.List(ctx, Filter{}); len(l) != 2 {
			t.Fatalf("full list: got %d, want 2", len(l))
		}
		// A claim clears the pool: the box shows from then on.
		sb, _ := st.Get(ctx, "sb-a")
		sb.Pool = ""
		if err := st.Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if n, _ := st.Count(ctx); n != 2 {
			t.Fatalf("count after claim: got %d, want 2", n)
		}
		if err := st.DeletePool(ctx, "py"); err != nil {
			t.Fatal(err)
		}
		if pools, _ := st.Pools(ctx); len(pools) != 0 {
			t.Fatalf("after delete: got %+v", pools)
		}
	})
}
