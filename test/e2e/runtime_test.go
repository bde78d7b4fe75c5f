package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// needRuntime gives up on the test unless d's engine runs rt (scripts/test
// registers gVisor's runsc, so in CI it fails instead).
func needRuntime(t *testing.T, d *testdaemon.Daemon, rt string) {
	t.Helper()
	host, err := d.C.Host(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(host.Runtimes, rt) {
		testenv.SkipOrFail(t, "the engine cannot run %s sandboxes (runtimes %v); `sudo scripts/serve` or scripts/test registers gVisor's runsc", rt, host.Runtimes)
	}
}

// kernelOf reports which kernel answers a sandbox's system calls, from
// what the kernel log says: gVisor's Sentry greets with "Starting
// gVisor..."; the host's kernel refuses the log to the box (no
// CAP_SYSLOG) or shows its own.
func kernelOf(t *testing.T, d *testdaemon.Daemon, id string) string {
	t.Helper()
	res := run(t, d, id, "dmesg 2>&1; cat /proc/version")
	if strings.Contains(res.Stdout, "Starting gVisor") {
		return client.RuntimeGVisor
	}
	if strings.Contains(res.Stdout, "gVisor") {
		t.Fatalf("sandbox %s: a kernel log that names gVisor without its greeting: %q", id, res.Stdout)
	}
	return client.RuntimeRunc
}

// TestRuntimeGVisor creates a sandbox under gVisor beside one under runc
// and checks, from inside each, which kernel answers it; that the runtime
// is shown on get and list and kept across stop and start, a daemon
// restart, and a snapshot (a create from it keeps the snapshot's runtime
// unless it names another).
func TestRuntimeGVisor(t *testing.T) {
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	needRuntime(t, d, client.RuntimeGVisor)
	ctx := t.Context()

	gv := newSandbox(t, d, client.CreateSandboxRequest{Runtime: client.RuntimeGVisor})
	rc := newSandbox(t, d, client.CreateSandboxRequest{})
	if gv.Runtime != client.RuntimeGVisor || rc.Runtime != client.RuntimeRunc {
		t.Fatalf("created: got runtimes %q and %q, want gvisor and runc (the default)", gv.Runtime, rc.Runtime)
	}
	check := func(when string) {
		t.Helper()
		if k := kernelOf(t, d, gv.ID); k != client.RuntimeGVisor {
			t.Errorf("%s: the gvisor sandbox runs on %s", when, k)
		}
		if k := kernelOf(t, d, rc.ID); k != client.RuntimeRunc {
			t.Errorf("%s: the runc sandbox runs on %s", when, k)
		}
		list, err := d.C.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, sb := range list {
			got[sb.ID] = sb.Runtime
		}
		if got[gv.ID] != client.RuntimeGVisor || got[rc.ID] != client.RuntimeRunc {
			t.Errorf("%s: list shows runtimes %v, want %s gvisor and %s runc", when, got, gv.ID, rc.ID)
		}
		if sb, err := d.C.GetSandbox(ctx, gv.ID); err != nil || sb.Runtime != client.RuntimeGVisor {
			t.Errorf("%s: get: got runtime %q, %v; want gvisor", when, sb.Runtime, err)
		}
		for _, id := range []string{gv.ID, rc.ID} {
			if res := run(t, d, id, askResolver); !strings.Contains(res.Stdout, "Server:") || strings.Contains(res.Stdout, "no servers could be reached") {
				t.Errorf("%s: sandbox %s asked its resolver over its network: exit %d, %q %q", when, id, res.ExitCode, res.Stdout, res.Stderr)
			}
		}
	}
	check("after create")

	if _, err := d.C.StopSandbox(ctx, gv.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := d.C.StartSandbox(ctx, gv.ID); err != nil || sb.Runtime != client.RuntimeGVisor {
		t.Fatalf("start after stop: got runtime %q, %v; want gvisor", sb.Runtime, err)
	}
	check("after stop and start")

	d.Stop(syscall.SIGTERM)
	d.Restart()
	waitExec(t, d, gv.ID)
	waitExec(t, d, rc.ID)
	check("after a daemon restart")

	sn, err := d.C.CreateSnapshot(ctx, gv.ID)
	if err != nil {
		t.Fatalf("snapshot of the gvisor sandbox: %v\n%s", err, d.Logs())
	}
	// Registered before the sandboxes made from it, so it runs after
	// their destroys: the image of a snapshot in use cannot go.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.C.DeleteSnapshot(ctx, gv.ID, sn.ID); err != nil {
			t.Errorf("delete snapshot %s: %v", sn.ID, err)
		}
	})
	if sn.Runtime != client.RuntimeGVisor {
		t.Errorf("snapshot: got runtime %q, want gvisor", sn.Runtime)
	}
	for _, tc := range []struct{ ask, want string }{{"", client.RuntimeGVisor}, {client.RuntimeRunc, client.RuntimeRunc}} {
		sb := newSandbox(t, d, client.CreateSandboxRequest{Snapshot: sn.ID, Runtime: tc.ask})
		if sb.Runtime != tc.want {
			t.Errorf("create from the snapshot asking for %q: got runtime %q, want %q", tc.ask, sb.Runtime, tc.want)
		}
		if k := kernelOf(t, d, sb.ID); k != tc.want {
			t.Errorf("create from the snapshot asking for %q: runs on %s, want %s", tc.ask, k, tc.want)
		}
	}
}

// askResolver asks the box's resolver, the egress DNS on the network's
// gateway, for a name (busybox's nslookup, straight to the resolver's
// address): a "Server:" line means an answer came (NXDOMAIN or REFUSED will
// do), so the box's network (the driver's veth) and the firewall's rule for
// DNS work.
const askResolver = `nslookup invalid "$(sed -n 's/^nameserver //p' /etc/resolv.conf | head -n 1)" 2>&1; true`

// waitExec waits for a sandbox's agent to answer after a daemon restart.
func waitExec(t *testing.T, d *testdaemon.Daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := d.C.Exec(t.Context(), id, client.ExecRequest{Command: "true"})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: exec did not work within a minute of the restart: %v\n%s", id, err, d.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRuntimeRefused checks the 400s of a create's runtime: an unknown
// one names the field, and one the engine lacks (here gVisor registered
// under a name the engine does not have) also says how to enable it, for
// a plain and a streamed create and for the daemon's default alike. A
// refused create leaves nothing, and runc still works.
func TestRuntimeRefused(t *testing.T) {
	ctx := t.Context()
	shared := sharedDaemon(t)
	_, err := shared.C.CreateSandbox(ctx, client.CreateSandboxRequest{Runtime: "runsc"})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "runtime") {
		t.Errorf("create with runtime runsc: got %v, want a 400 naming runtime", err)
	}

	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{
		"--default-runtime", "gvisor", "--gvisor-engine-runtime", "hotcell-test-no-such-runtime",
	}})
	t.Cleanup(d.Close)
	host, err := d.C.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(host.Runtimes, client.RuntimeGVisor) || !slices.Contains(host.Runtimes, client.RuntimeRunc) || host.DefaultRuntime != client.RuntimeGVisor {
		t.Errorf("host: got runtimes %v, default %q; want runc without gvisor, default gvisor", host.Runtimes, host.DefaultRuntime)
	}
	for name, create := range map[string]func() error{
		"gvisor": func() error {
			_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Runtime: client.RuntimeGVisor})
			return err
		},
		"the default": func() error {
			_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
			return err
		},
		"gvisor, streamed": func() error {
			_, err := d.C.CreateSandboxProgress(ctx, client.CreateSandboxRequest{Runtime: client.RuntimeGVisor}, func(string) {})
			return err
		},
	} {
		err := create()
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 400 {
			t.Errorf("create of %s: got %v, want a 400", name, err)
			continue
		}
		for _, want := range []string{"runtime", "hotcell-test-no-such-runtime", "scripts/serve", "apt-get install runsc", "daemon.json"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("create of %s: %q does not say %q", name, err, want)
			}
		}
	}
	if list, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("sandboxes after refused creates: got %d, %v; want none", len(list), err)
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: client.RuntimeRunc})
	if k := kernelOf(t, d, sb.ID); sb.Runtime != client.RuntimeRunc || k != client.RuntimeRunc {
		t.Errorf("create of runc beside a missing gvisor: got runtime %q on %s, want runc", sb.Runtime, k)
	}
}
