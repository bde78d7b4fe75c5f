package k8se2e

import (
	"slices"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// TestKubernetesGVisorSandbox: on a cluster with the RuntimeClass gvisor
// (scripts/k8s makes it: gVisor's containerd shim, docs/kubernetes.md),
// `hotcell serve --driver kubernetes` offers the gvisor runtime, a sandbox
// created with it runs in a pod of that class, and what runs in it sees
// gVisor's kernel; a sandbox of the default runtime, beside it, sees the
// host's.
func TestKubernetesGVisorSandbox(t *testing.T) {
	env := testk8s.Cluster(t)
	env.RequireGVisor(t)
	d := startKubeDaemonIn(t, env, env.Namespace(t))
	ctx := t.Context()
	c := d.C

	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(host.Runtimes, client.RuntimeGVisor) || host.DefaultRuntime != client.RuntimeRunc {
		t.Fatalf("host runtimes %v (default %q): want gvisor offered, runc the default", host.Runtimes, host.DefaultRuntime)
	}

	for _, rt := range []string{client.RuntimeGVisor, client.RuntimeRunc} {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Runtime: rt, Labels: map[string]string{"test": "k8se2e-gvisor"}})
		if err != nil {
			t.Fatalf("create a %s sandbox: %v\n%s", rt, err, d.Logs())
		}
		if sb.Runtime != rt {
			t.Errorf("the %s sandbox reports runtime %q", rt, sb.Runtime)
		}
		class := d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pods", "-l", "hotcell.id="+sb.ID,
			"-o", "jsonpath={.items[*].spec.runtimeClassName}")
		kernel := execOK(t, c, sb.ID, "cat /proc/version; dmesg | head -n 1")
		gvisor := strings.Contains(kernel, "gvisor") && strings.Contains(kernel, "Starting gVisor")
		switch {
		case rt == client.RuntimeGVisor && (class != "gvisor" || !gvisor):
			t.Errorf("the gvisor sandbox: pod runtime class %q, kernel %q; want class gvisor and gVisor's kernel", class, kernel)
		case rt == client.RuntimeRunc && (class != "" || strings.Contains(kernel, "gvisor")):
			t.Errorf("the runc sandbox: pod runtime class %q, kernel %q; want none and the host's kernel", class, kernel)
		}
		// The agent's file calls work under gVisor too.
		if _, err := c.WriteFile(ctx, sb.ID, "/workspace/hello.txt", strings.NewReader("hello "+rt), 0o644); err != nil {
			t.Errorf("write a file in the %s sandbox: %v", rt, err)
		} else if got := execOK(t, c, sb.ID, "cat /workspace/hello.txt"); got != "hello "+rt {
			t.Errorf("the file written in the %s sandbox reads %q", rt, got)
		}
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Errorf("delete the %s sandbox: %v", rt, err)
		}
	}
}
