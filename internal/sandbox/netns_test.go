package sandbox

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestStartInNetNS runs commands the way a clone's git runs: in another
// network namespace (here one with only a loopback), with the resolver
// files replaced for them alone. The host's files and network stay as
// they were.
func TestStartInNetNS(t *testing.T) {
	testenv.RequireRoot(t, "entering a network namespace and mounting need root")
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "unshare (util-linux) is not installed")
	}
	holder := exec.Command("unshare", "--net", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	// unshare has made the namespace once its process is sleep.
	nsPath := fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, err := os.Readlink(nsPath); err == nil && l != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare --net did not make a namespace")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()

	hostResolv, _ := os.ReadFile("/etc/resolv.conf")
	hostMounts := resolvMounts(t)
	binds, err := netNSFiles(t.TempDir(), []netip.Addr{netip.MustParseAddr("192.0.2.53")})
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := startInNetNS(cmd, ns, binds); err != nil {
			t.Fatalf("start %v: %v", args, err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	if got := run("cat", "/etc/resolv.conf"); got != "nameserver 192.0.2.53\n" {
		t.Errorf("resolv.conf in the namespace: got %q", got)
	}
	if got := run("cat", "/etc/hosts"); got != "127.0.0.1\tlocalhost\n::1\tlocalhost\n" {
		t.Errorf("hosts in the namespace: got %q", got)
	}
	if got := run("cat", "/proc/net/dev"); strings.Count(got, ":") != 1 || !strings.Contains(got, "lo:") {
		t.Errorf("interfaces in the namespace: got %q, want only lo", got)
	}
	// Nothing leaked to the host.
	if got, _ := os.ReadFile("/etc/resolv.conf"); !bytes.Equal(got, hostResolv) {
		t.Errorf("the host's resolv.conf changed: %q", got)
	}
	if l, _ := os.Readlink("/proc/self/ns/net"); l != self {
		t.Errorf("the test's own network namespace changed")
	}
	if got := resolvMounts(t); got != hostMounts {
		t.Errorf("the host has %d mounts on /etc/resolv.conf, had %d: a bind leaked", got, hostMounts)
	}
}

// resolvMounts counts the mounts on /etc/resolv.conf that the test sees.
func resolvMounts(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " /etc/resolv.conf ")
}

func TestEgressHint(t *testing.T) {
	for _, c := range []struct {
		p    *wire.EgressPolicy
		want string
	}{
		{nil, "default network"},
		{&wire.EgressPolicy{Mode: wire.EgressNone}, "mode none"},
		{&wire.EgressPolicy{Mode: wire.EgressAllowlist}, "allowlist"},
		{&wire.EgressPolicy{Mode: wire.EgressOpen}, "not the daemon's host"},
	} {
		if got := egressHint(c.p); !strings.Contains(got, c.want) {
			t.Errorf("egressHint(%+v) = %q, want it to say %q", c.p, got, c.want)
		}
	}
}
