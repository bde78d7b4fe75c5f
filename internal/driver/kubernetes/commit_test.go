package kubernetes_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestCommitBounded: a box cannot fill the registry. Its root filesystem
// goes past the driver's bound (a box is hostile: its agent may as well
// stream without end), and the commit fails as too large, pushes no
// image, and leaves the box running. A registry that does not answer is
// said to be unreachable, naming the setting.
func TestCommitBounded(t *testing.T) {
	d, image, env := clusterDriverOn(t, true, func(c *kubernetes.Config) { c.MaxImageBytes = 8 << 20 })
	ctx := t.Context()
	spec, listen := newBox(t, d, image)
	must(t, "create", d.Create(ctx, spec))
	conn := listen()
	d.UseAgents(func(_ context.Context, id string) (*agentconn.Conn, error) {
		if id != spec.ID {
			return nil, fmt.Errorf("no agent of %s: %w", id, errdefs.ErrNotFound)
		}
		return conn, nil
	})
	must(t, "start", d.Start(ctx, spec.ID))
	waitAgent(t, conn)
	var res wire.ExecResult
	must(t, "write 16 MiB to the root filesystem", conn.DoJSON(ctx, http.MethodPost, "/v1/exec",
		wire.ExecRequest{Command: "head -c 16777216 /dev/urandom > /big && echo done"}, &res))
	if res.ExitCode != 0 {
		t.Fatalf("writing the big file: exit %d", res.ExitCode)
	}

	ref := "hotcell/snapshot:bounded-" + spec.ID
	t.Cleanup(func() { _ = d.RemoveImage(context.WithoutCancel(ctx), ref) })
	err := d.Commit(ctx, spec.ID, ref, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "larger than the driver's bound") {
		t.Errorf("commit of a root filesystem past the bound: got %v, want invalid, too large", err)
	}
	if err := d.EnsureImage(ctx, ref, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the refused commit's image: got %v, want not in the registry", err)
	}
	var out wire.ExecResult
	if err := conn.DoJSON(ctx, http.MethodPost, "/v1/exec", wire.ExecRequest{Command: "echo alive"}, &out); err != nil || out.ExitCode != 0 {
		t.Errorf("the box after the refused commit: %+v, %v", out, err)
	}

	// The same box: a registry that does not answer, one that wants
	// credentials the driver was not given, and wrong ones.
	other := func(t *testing.T, c kubernetes.Config) *kubernetes.Driver {
		c.Kubeconfig, c.Namespace, c.Registry = env.Kubeconfig, d.Namespace(), env.Registry
		o, err := kubernetes.New(c)
		if err != nil {
			t.Fatal(err)
		}
		o.UseAgents(func(context.Context, string) (*agentconn.Conn, error) { return conn, nil })
		return o
	}
	down := other(t, kubernetes.Config{RegistryURL: "http://127.0.0.1:1"})
	if err := down.Commit(ctx, spec.ID, ref, nil); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "kubernetes_registry_url") {
		t.Errorf("commit to a registry that does not answer: got %v, want unavailable, naming kubernetes_registry_url", err)
	}
	anon := other(t, kubernetes.Config{RegistryURL: "http://" + env.Registry})
	if err := anon.Commit(ctx, spec.ID, ref, nil); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "kubernetes_registry_secret") {
		t.Errorf("commit without the registry's credentials: got %v, want its 401, naming kubernetes_registry_secret", err)
	}
	env.MustKubectl(t, "-n", d.Namespace(), "create", "secret", "docker-registry", "wrong", "--docker-server="+env.Registry, "--docker-username="+env.RegistryUser, "--docker-password=not-the-password")
	wrong := other(t, kubernetes.Config{RegistryURL: "http://" + env.Registry, RegistrySecret: "wrong"})
	if err := wrong.Commit(ctx, spec.ID, ref, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("commit with a wrong password: got %v, want the registry's 401", err)
	}
	if err := d.EnsureImage(ctx, ref, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after the refused commits: got %v, want no image in the registry", err)
	}
}
