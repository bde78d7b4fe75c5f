package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestEgressWithoutDockerUser: the rules hold while Docker moves its jump
// to DOCKER-USER, and after the engine puts accepts of the network's
// bridge on top of FORWARD.
//
// Whenever a network is made on the host, Docker 20.10 deletes its jump
// from FORWARD to DOCKER-USER and inserts it again on top (two iptables
// processes, each waiting on the xtables lock, so up to seconds on a busy
// host). With hotcell's jump only in DOCKER-USER, a box's packets met
// Docker's accept of its bridge's traffic in between, with none of
// hotcell's rules: TestPoolClaimEgress once saw an allowlist box reach the
// metadata address and a private range in such a window, while the tests
// beside it made networks. The test makes the window (the jump gone) for
// as long as it checks, then the layout an engine restart leaves (Docker's
// accept of the bridge above everything of hotcell's), which the daemon's
// check of its rules must mend.
func TestEgressWithoutDockerUser(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t, "egress tests make network namespaces and change iptables")
	in := newInternet(t)
	up := newUpstream(t, map[string]netip.Addr{"allowed.test": in.allowed})
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--egress-dns-upstream", up.addr}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Egress: &client.EgressPolicy{Allow: []string{"allowed.test"}}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	t.Cleanup(func() { _ = d.C.DeleteSandbox(ctx, sb.ID) })

	reaches := func(host string) bool {
		t.Helper()
		out := run(t, d, sb.ID, fmt.Sprintf("timeout 5 nc %s 80 </dev/null 2>&1; true", host)).Stdout
		return strings.Contains(out, "hello from")
	}
	check := func(when string) {
		t.Helper()
		if !reaches("allowed.test") {
			t.Errorf("%s: the box does not reach its allowed host", when)
		}
		for _, bad := range append([]string{in.other.String(), in.metadata.String(), in.private.String()}, addrStrings(in.metadataOther)...) {
			if reaches(bad) {
				t.Errorf("%s: the box reached %s", when, bad)
			}
		}
	}
	check("with the usual layout")

	ipt := func(args ...string) error {
		return exec.Command("iptables", append([]string{"-w"}, args...)...).Run()
	}
	restoreDockerUser := func() {
		if ipt("-C", "FORWARD", "-j", "DOCKER-USER") != nil {
			if err := ipt("-I", "FORWARD", "-j", "DOCKER-USER"); err != nil {
				t.Errorf("put Docker's jump to DOCKER-USER back: %v", err)
			}
		}
	}
	t.Cleanup(restoreDockerUser)
	// Docker's move, stopped halfway.
	if err := ipt("-D", "FORWARD", "-j", "DOCKER-USER"); err != nil {
		t.Fatalf("delete Docker's jump to DOCKER-USER: %v", err)
	}
	check("without Docker's jump to DOCKER-USER")
	restoreDockerUser()

	// An engine restart makes the network's rules again, on top of
	// FORWARD: an accept of the bridge's outgoing traffic above hotcell's
	// jump. With DOCKER-USER's jump gone too, only the daemon's check,
	// which moves its jump back above the accept, keeps the box confined.
	out, err := exec.Command("docker", "network", "inspect", "-f", "{{.Id}}", d.EgressNetwork).Output()
	if err != nil {
		t.Fatalf("inspect network %s: %v", d.EgressNetwork, err)
	}
	bridge := "br-" + strings.TrimSpace(string(out))[:12]
	accept := []string{"-i", bridge, "!", "-o", bridge, "-m", "comment", "--comment", "hotcell test: an engine's accept", "-j", "ACCEPT"}
	if err := ipt(append([]string{"-I", "FORWARD", "1"}, accept...)...); err != nil {
		t.Fatalf("insert an accept of %s: %v", bridge, err)
	}
	t.Cleanup(func() { _ = ipt(append([]string{"-D", "FORWARD"}, accept...)...) })
	h := sha256.Sum256([]byte(d.EgressNetwork + "|" + d.EgressSubnet.String()))
	base := "HCN-" + hex.EncodeToString(h[:4])
	deadline := time.Now().Add(60 * time.Second)
	for !jumpAbove(t, base, bridge) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not move its FORWARD jump above the engine's accept of %s in 60 s\n%s", bridge, d.Logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := ipt("-D", "FORWARD", "-j", "DOCKER-USER"); err != nil {
		t.Fatalf("delete Docker's jump to DOCKER-USER: %v", err)
	}
	check("after an engine's accept of the bridge, without DOCKER-USER")
	restoreDockerUser()
}

// jumpAbove reports whether FORWARD jumps to chain base before its first
// rule that names bridge.
func jumpAbove(t *testing.T, base, bridge string) bool {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "-S", "FORWARD").Output()
	if err != nil {
		t.Fatalf("iptables -S FORWARD: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(l, " -j "+base) {
			return true
		}
		if strings.Contains(l, bridge) {
			return false
		}
	}
	return false
}
