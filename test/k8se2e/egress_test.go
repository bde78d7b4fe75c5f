package k8se2e

import (
	"bytes"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// TestKubernetesEgressThroughServe: `hotcell serve` on the Kubernetes
// driver with kubernetes_egress_resolver serves every egress mode, each
// enforced by hotcell egress-node (a process on the node, this host, as a
// DaemonSet's pod with hostNetwork would be) with the test cluster's CNI
// enforcing no NetworkPolicy: from inside real pods, through the public
// API, open reaches the test internet, none reaches nothing (but its agent
// channel still works: every exec here goes through it), an allowlist by
// name reaches its name once resolved through the node's resolver and
// nothing else, and a change of policy is in force when the call returns;
// so is the policy of a create that claims a pod of a warm pool.
func TestKubernetesEgressThroughServe(t *testing.T) {
	testenv.RequireRoot(t, "the node's egress controller changes iptables and ipsets")
	env := testk8s.Cluster(t)
	in := testk8s.NewInternet(t)
	up := testk8s.NewUpstream(t, map[string]netip.Addr{"allowed.test": in.Allowed, "other.test": in.Other})
	prepareImages(t, env)
	ns := env.Namespace(t)
	port := freePort(t, env.HostIP)
	agentAddr := netip.MustParseAddrPort(net.JoinHostPort(env.HostIP, strconv.Itoa(port)))

	drv, err := kubernetes.New(kubernetes.Config{Kubeconfig: env.Kubeconfig, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	startEgressNode(t, env, ns, up,
		// The daemon's agent channel: on this node, so a host address
		// otherwise refused.
		agentAddr.String())
	// After the node's cleanup, so the daemon's Close destroys its
	// sandboxes while the node still runs.
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{
		"--driver", "kubernetes",
		"--kubernetes-kubeconfig", env.Kubeconfig,
		"--kubernetes-namespace", ns,
		"--kubernetes-workspace-host-dir", t.TempDir(),
		"--kubernetes-pull-policy", "Never",
		"--kubernetes-egress-resolver", env.HostIP,
		"--kubernetes-network-policies",
		"--agent-channel", "tcp",
		"--agent-listen", agentAddr.String(),
	}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	c := d.C

	create := func(p client.EgressPolicy) string {
		t.Helper()
		// Small: the node's two CPUs are shared with other tests' pods.
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Egress: &p, Limits: client.Limits{CPUs: 0.1, MemoryMB: 128}})
		if err != nil {
			t.Fatalf("create with egress %+v: %v\n%s", p, err, d.Logs())
		}
		pod, err := drv.Client().CoreV1().Pods(ns).Get(ctx, kubernetes.PodName(sb.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		env.RouteInPod(t, pod, in.Prefix, env.HostIP)
		return sb.ID
	}
	run := func(id, script string) (string, int) {
		t.Helper()
		res, err := c.Exec(ctx, id, client.ExecRequest{Command: script, TimeoutMs: 20000})
		if err != nil {
			t.Fatalf("exec in %s: %v", id, err)
		}
		return string(res.Stdout) + string(res.Stderr), res.ExitCode
	}
	reaches := func(id string, a netip.Addr) bool {
		t.Helper()
		out, code := run(id, "nc -w 3 "+a.String()+" 80 </dev/null")
		// Logged either way: when a check fails, nc's own words say
		// whether it timed out, was refused or got another answer.
		t.Logf("nc from %s to %s:80: exit %d, %q", id, a, code, out)
		return code == 0 && strings.Contains(out, "hello from "+a.String()+":80")
	}
	lookup := func(id, name string) string {
		t.Helper()
		out, _ := run(id, "timeout 8 nslookup -type=A "+name+" "+env.HostIP)
		return out
	}

	open := create(client.EgressPolicy{Mode: client.EgressOpen})
	none := create(client.EgressPolicy{Mode: client.EgressNone})
	byName := create(client.EgressPolicy{Mode: client.EgressAllowlist, Allow: []string{"allowed.test:80"}})

	if !reaches(open, in.Other) {
		t.Error("open: the test internet is not reachable")
	}
	if reaches(none, in.Allowed) {
		t.Error("none: the test internet is reachable")
	}
	if out := lookup(none, "allowed.test"); strings.Contains(out, in.Allowed.String()) {
		t.Errorf("none: a lookup was answered: %s", out)
	}
	if out := lookup(byName, "allowed.test"); !strings.Contains(out, in.Allowed.String()) {
		t.Errorf("allowlist: allowed.test through the node's resolver: %s", out)
	}
	if !reaches(byName, in.Allowed) {
		t.Error("allowlist: allowed.test's address is not reachable once resolved")
	}
	if out := lookup(byName, "other.test"); strings.Contains(out, in.Other.String()) {
		t.Errorf("allowlist: other.test was answered: %s", out)
	}
	if reaches(byName, in.Other) {
		t.Error("allowlist: an unlisted address is reachable")
	}
	st, err := c.Egress(ctx, byName)
	if err != nil || !st.Enforced || st.Policy.Mode != client.EgressAllowlist {
		t.Errorf("egress status of the allowlist sandbox: %+v, %v; want its policy, enforced", st, err)
	}
	// The node's counters and denials reach the API (the node publishes
	// them every few seconds).
	deadline := time.Now().Add(time.Minute)
	for {
		st, err = c.Egress(ctx, byName)
		if err != nil {
			t.Fatal(err)
		}
		var refusedName, refusedAddr bool
		for _, d := range st.Denied {
			refusedName = refusedName || d.Kind == "dns" && d.Name == "other.test"
			refusedAddr = refusedAddr || d.Kind == "connect" && d.Address == in.Other.String() && d.Reason == "not-allowed"
		}
		if refusedName && refusedAddr && st.RefusedQueries > 0 && st.DroppedPackets > 0 && len(st.Resolved) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("a minute after the refusals, the sandbox's egress status lacks them: %+v", st)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	if _, err := c.SetEgress(ctx, byName, client.EgressPolicy{Mode: client.EgressOpen}); err != nil {
		t.Fatalf("set egress: %v", err)
	}
	if !reaches(byName, in.Other) {
		t.Error("after the change to open: the other address is refused")
	}
	if _, err := c.SetEgress(ctx, open, client.EgressPolicy{Mode: client.EgressNone}); err != nil {
		t.Fatalf("set egress: %v", err)
	}
	if reaches(open, in.Other) {
		t.Error("after the change to none: the test internet is reachable")
	}

	// Claims from a warm pool: the pooled pods wait under the template's
	// policy (none), and each claim's policy is in force on the node when
	// its create returns, on a pod that existed before it.
	const tplName = "egress-pool"
	if _, err := c.TemplateFromImage(ctx, tplName, testenv.BusyboxImage(t), client.TemplateFromImageOptions{Defaults: &client.TemplateDefaults{
		Limits: client.Limits{CPUs: 0.1, MemoryMB: 128}, Egress: &client.EgressPolicy{Mode: client.EgressNone},
	}}); err != nil {
		t.Fatalf("template from image: %v", err)
	}
	if _, err := c.SetTemplatePool(ctx, tplName, client.PoolConfig{Min: 2}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(3 * time.Minute)
	for {
		ps, err := c.GetTemplatePool(ctx, tplName)
		if err == nil && ps.Ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool: %+v, %v; want 2 ready\n%s", ps, err, d.Logs())
		}
		time.Sleep(300 * time.Millisecond)
	}
	claim := func(p *client.EgressPolicy) string {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tplName, Egress: p})
		if err != nil {
			t.Fatalf("claim with egress %+v: %v\n%s", p, err, d.Logs())
		}
		pod, err := drv.Client().CoreV1().Pods(ns).Get(ctx, kubernetes.PodName(sb.ID), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !pod.CreationTimestamp.Time.Before(sb.CreatedAt) {
			t.Errorf("claimed sandbox %s: its pod was made at %s, not before the claim (%s)", sb.ID, pod.CreationTimestamp, sb.CreatedAt)
		}
		env.RouteInPod(t, pod, in.Prefix, env.HostIP)
		return sb.ID
	}
	allowClaim := claim(&client.EgressPolicy{Mode: client.EgressAllowlist, Allow: []string{"allowed.test:80"}})
	noneClaim := claim(nil)
	if out := lookup(allowClaim, "allowed.test"); !strings.Contains(out, in.Allowed.String()) {
		t.Errorf("claimed allowlist: allowed.test through the node's resolver: %s", out)
	}
	if !reaches(allowClaim, in.Allowed) {
		t.Error("claimed allowlist: allowed.test's address is not reachable once resolved")
	}
	if reaches(allowClaim, in.Other) {
		t.Error("claimed allowlist: an unlisted address is reachable")
	}
	if reaches(noneClaim, in.Allowed) {
		t.Error("claimed with the template's none: the test internet is reachable")
	}
	if ps, err := c.GetTemplatePool(ctx, tplName); err != nil || ps.Claims != 2 || ps.Misses != 0 {
		t.Errorf("pool after the claims: %+v, %v; want 2 claims, no miss", ps, err)
	}
	if err := c.DeleteTemplatePool(ctx, tplName); err != nil {
		t.Error(err)
	}

	// The sandbox's NetworkPolicy is there for a CNI that enforces it, and
	// goes with it.
	nps := drv.Client().NetworkingV1().NetworkPolicies(ns)
	if _, err := nps.Get(ctx, kubernetes.NetworkPolicyName(none), metav1.GetOptions{}); err != nil {
		t.Errorf("the NetworkPolicy of a sandbox: %v", err)
	}
	if err := c.DeleteSandbox(ctx, none); err != nil {
		t.Fatal(err)
	}
	if _, err := nps.Get(ctx, kubernetes.NetworkPolicyName(none), metav1.GetOptions{}); err == nil {
		t.Error("the NetworkPolicy outlived its sandbox")
	}
}

// startEgressNode runs hotcell egress-node for namespace ns as a DaemonSet
// would on this node, with upstream as its DNS upstream and allow as its
// --allow endpoints, until the test's cleanup stops it and removes its
// rules. Start the daemon after it, so that the daemon's Close destroys
// its sandboxes while the node still runs.
func startEgressNode(t *testing.T, env *testk8s.Env, ns, upstream string, allow ...string) {
	t.Helper()
	args := []string{"egress-node",
		"--kubeconfig", env.Kubeconfig, "--namespace", ns, "--node", env.Node,
		"--resolver", env.HostIP, "--bridge", "hck8s0", "--pod-range", "10.244.0.0/16",
		"--upstream", upstream}
	for _, a := range allow {
		args = append(args, "--allow", a)
	}
	var nodeLog bytes.Buffer
	en := exec.Command(testenv.GoBuild(t, "./cmd/hotcell"), args...)
	en.Stdout, en.Stderr = &nodeLog, &nodeLog
	if err := en.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = en.Process.Signal(syscall.SIGTERM)
		if err := en.Wait(); err != nil {
			t.Errorf("hotcell egress-node: %v\n%s", err, nodeLog.String())
		}
		if t.Failed() {
			t.Logf("hotcell egress-node's log:\n%s", nodeLog.String())
		}
		// What a DaemonSet's removal would leave for an uninstall.
		if err := egress.TeardownConfig(egress.Config{Network: "k8s-" + env.Node, Subnet: netip.MustParsePrefix("10.244.0.0/16"), Node: true}); err != nil {
			t.Errorf("egress teardown: %v", err)
		}
	})
}
