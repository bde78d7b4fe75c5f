package kubeegress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/kubeegress"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// dsImage is the hotcell image the test builds and gives the cluster: a
// tag of its own, so no other image is replaced.
const dsImage = "hotcell/hotcell:test-egress-node"

// TestDaemonSetEnforces runs deploy/kubernetes/egress-node.yaml for real
// on the test cluster: the hotcell image built without a registry
// (images.BuildHotcell) and imported into the node, the manifest applied
// in a namespace of the test's with that image, pull policy Never and the
// test's addresses, its pod ready, and sandboxes' egress enforced by it
// alone (no controller runs in the test process): the driver's start
// waits for the DaemonSet's pod to say each policy is applied; a none
// sandbox reaches the allowed daemon endpoint (--allow) and nothing else
// (not another port of the node, not the test internet, no DNS answer);
// an allowlist sandbox resolves its name through the pod's resolver,
// reaches that address and no other, directly or through a Service (the
// node's kube-proxy translates its cluster IP first). Each sandbox's chains go with its
// pod; the node's own chain outlives the DaemonSet (pods stay confined
// while it is replaced) and is removed by hotcell egress-node --teardown
// (egress.TeardownConfig), as an uninstall would, leaving nothing of the
// test in iptables or ipset.
//
// The pods' resolver is a link-local address, as on a cluster whose nodes
// have different gateways: the DaemonSet's pod puts it on the node's
// loopback, the sandboxes' DNS goes there, and the teardown takes it off.
//
// The pod runs with hostNetwork beside other tests' controllers on this
// host: its rule set has a name of its own (--rules), so its chains, sets
// and denial log group are not theirs; its resolver takes the address
// they all take, so it runs under the test internet's host-wide lock,
// as they do.
func TestDaemonSetEnforces(t *testing.T) {
	in := testk8s.NewInternet(t) // the host-wide lock first
	up := testk8s.NewUpstream(t, map[string]netip.Addr{"allowed.test": in.Allowed, "other.test": in.Other})
	resolver := netip.MustParseAddr(dsResolver)
	if err := kubeegress.RemoveResolverAddr(resolver); err != nil { // a killed run's
		t.Fatal(err)
	}
	c := newDriverAt(t, in.Prefix, resolver)
	ns := c.d.Namespace()
	ctx := t.Context()
	image := testenv.HotcellImage(t, dsImage)
	c.env.ImportImage(t, image)
	testk8s.WaitImages(t, c.d, image)

	// A daemon endpoint every sandbox may reach (--allow), and another
	// port of the node that none may.
	allowed := greeter(t, c.env.HostIP, "hello from the daemon")
	other := greeter(t, c.env.HostIP, "hello from the node")

	rules := "kd-" + randHex(3)
	metricsPort := freePort(t, c.env.HostIP)
	objs := renderManifest(t, c.env, image, metricsPort, []string{
		"--resolver=" + dsResolver, "--pod-range=" + podRange, "--bridge=" + bridge,
		"--allow=" + allowed.String(), "--upstream=" + up, "--rules=" + rules,
	})
	ecfg := egress.Config{Network: rules, Subnet: netip.MustParsePrefix(podRange), Node: true}
	t.Cleanup(func() {
		// Whatever the test body did not get to: the DaemonSet and its
		// pod gone (so the resolver's address is free for the next test
		// to take the lock), then its rules.
		deleteDaemonSet(t, c.env, ns)
		if err := egress.TeardownConfig(ecfg); err != nil {
			t.Errorf("egress teardown: %v", err)
		}
		if err := kubeegress.RemoveResolverAddr(resolver); err != nil {
			t.Errorf("take the resolver's address off: %v", err)
		}
	})
	if _, err := c.env.Kubectl(ctx, bytes.NewReader(objs), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.env.Kubectl(ctx, nil, "-n", ns, "rollout", "status", "daemonset/hotcell-egress-node", "--timeout=2m"); err != nil {
		out, _ := c.env.Kubectl(context.Background(), nil, "-n", ns, "describe", "pods", "-l", "app.kubernetes.io/name=hotcell-egress-node")
		logs, _ := c.env.Kubectl(context.Background(), nil, "-n", ns, "logs", "daemonset/hotcell-egress-node")
		t.Fatalf("the DaemonSet's pod is not ready: %v\n%s\n%s", err, out, logs)
	}
	dsPods := nodePods(t, c)
	if len(dsPods) != 1 || dsPods[0].Spec.NodeName != c.env.Node {
		t.Fatalf("the DaemonSet's pods: %d, want one on %s", len(dsPods), c.env.Node)
	}
	// Ready (its probe, /readyz) means the controller is up, and so has
	// put the resolver's address on: a rollout that waits, waits for that.
	if got := ourLoAddrs(t); !strings.Contains(got, " "+dsResolver+"/32 ") {
		t.Errorf("the node's loopback, %s, once the DaemonSet's pod is ready: %q, want %s", kubeegress.ResolverLabel, got, dsResolver)
	}

	none := c.newBox(t, &wire.EgressPolicy{Mode: wire.EgressNone})
	byName := c.newBox(t, &wire.EgressPolicy{Mode: wire.EgressAllowlist, Allow: []string{"allowed.test:80"}})
	t.Cleanup(func() {
		if t.Failed() {
			logs, err := c.env.Kubectl(context.Background(), nil, "-n", ns, "logs", "daemonset/hotcell-egress-node", "--tail=200")
			t.Logf("egress-node's log (%v):\n%s", err, logs)
			pods, err := c.env.Kubectl(context.Background(), nil, "-n", ns, "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.metadata.annotations}{"\n"}{end}`)
			t.Logf("the namespace's pods (%v):\n%s", err, pods)
		}
	})

	// Nothing of the test's asks a registry: every pod of the namespace
	// (the DaemonSet's, the sandboxes') runs imported images with pull
	// policy Never.
	pods, err := c.d.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, ct := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			if ct.ImagePullPolicy != corev1.PullNever {
				t.Errorf("pod %s container %s: pull policy %s, want Never", p.Name, ct.Name, ct.ImagePullPolicy)
			}
		}
	}

	if got, ok := none.greeting(t, allowed); !ok || got != "hello from the daemon" {
		t.Errorf("none: the allowed daemon endpoint %s: got %q, want its greeting", allowed, got)
	}
	if got, ok := none.greeting(t, other); ok {
		t.Errorf("none: another port of the node %s answered %q", other, got)
	}
	if none.reaches(t, in.Allowed, 80) {
		t.Error("none: the test internet is reachable")
	}
	if got := none.lookup(t, "allowed.test", dsResolver); len(got) > 0 {
		t.Errorf("none: a lookup was answered: %v", got)
	}
	if byName.reaches(t, in.Allowed, 80) {
		t.Error("allowlist: allowed.test's address is reachable before it was resolved")
	}
	if got := byName.lookupAnswered(t, "allowed.test", dsResolver); !slices.Contains(got, in.Allowed.String()) {
		t.Errorf("allowlist: allowed.test through the DaemonSet's resolver: got %v, want %s", got, in.Allowed)
	}
	if !byName.reaches(t, in.Allowed, 80) {
		t.Error("allowlist: allowed.test's address is not reachable once resolved")
	}
	if byName.reaches(t, in.Other, 80) {
		t.Error("allowlist: an unlisted address is reachable")
	}
	if got := byName.lookup(t, "other.test", dsResolver); len(got) > 0 {
		t.Errorf("allowlist: an unlisted name was answered: %v", got)
	}

	// A Service is no way around a policy: the node's kube-proxy
	// translates a cluster IP before the sandbox's rules see the packet,
	// so they judge the address it leads to. The listed address through a
	// Service is reached (so the Service works); an unlisted one, and
	// anything from none, is not.
	allowedEnd, otherEnd := netip.AddrPortFrom(in.Allowed, 80), netip.AddrPortFrom(in.Other, 80)
	toAllowed := c.env.NewService(t, ns, "to-allowed", 80, allowedEnd)
	toOther := c.env.NewService(t, ns, "to-other", 80, otherEnd)
	if !byName.reachesThrough(t, toAllowed.Addr(), allowedEnd) {
		out, _ := byName.sh(t, "ip route; nc -w 3 "+toAllowed.ClusterIP.String()+" 80 </dev/null")
		t.Errorf("allowlist: allowed.test's address through Service %s is not reachable:\n%s", toAllowed.Addr(), out)
	}
	if byName.reachesThrough(t, toOther.Addr(), otherEnd) {
		t.Errorf("allowlist: an unlisted address is reachable through Service %s", toOther.Addr())
	}
	if none.reachesThrough(t, toAllowed.Addr(), allowedEnd) {
		t.Errorf("none: the test internet is reachable through Service %s", toAllowed.Addr())
	}

	// The node's metrics: each sandbox's counters under its id, at the
	// address the manifest names (the node's, $(HOST_IP)).
	metricsURL := "http://" + net.JoinHostPort(dsPods[0].Status.HostIP, itoa(metricsPort)) + "/metrics"
	waitMetrics(t, metricsURL, "the refusals counted", func(m map[string]float64) bool {
		return m[`hotcell_egress_dns_refused_total{sandbox="`+byName.id+`"}`] >= 1 &&
			m[`hotcell_egress_dropped_packets_total{sandbox="`+byName.id+`"}`] >= 1 &&
			m[`hotcell_egress_dropped_packets_total{sandbox="`+none.id+`"}`] >= 1 &&
			m[`hotcell_egress_dns_answered_total{sandbox="`+byName.id+`"}`] >= 1 &&
			m["hotcell_egress_node_pods"] == 2
	})
	// Not to the sandboxes: they are refused the node's ports.
	if out, code := byName.sh(t, "wget -q -T 3 -O- "+metricsURL); code == 0 || strings.Contains(out, "hotcell_egress") {
		t.Errorf("a sandbox read the node's metrics (exit %d): %.200s", code, out)
	} else if code == 127 || strings.Contains(out, "not found") {
		t.Fatalf("the sandbox has no wget to try the node's metrics with: %s", out)
	}

	// The rules are the DaemonSet's rule set's: find its chain by the
	// sandboxes' jumps.
	base := ""
	for _, l := range iptablesRules(t) {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "-A" && strings.HasPrefix(f[1], "HCN-") && strings.Contains(l, "HCE-"+key(none.id)+"-") {
			base = f[1]
		}
	}
	if base == "" {
		t.Fatalf("no chain jumps to sandbox %s's rules", none.id)
	}

	// A teardown while sandboxes run on the node is refused: their rules
	// are what confines them.
	hotcell := testenv.GoBuild(t, "./cmd/hotcell")
	early := exec.Command(hotcell, "egress-node", "--node", c.env.Node, "--kubeconfig", c.env.Kubeconfig, "--namespace", ns,
		"--pod-range", podRange, "--rules", rules, "--teardown")
	if out, err := early.CombinedOutput(); err == nil || !strings.Contains(string(out), "2 sandbox pods still run") || !strings.Contains(string(out), "--force") {
		t.Errorf("a teardown under running sandboxes: %v\n%s\nwant it refused, naming them and --force", err, out)
	}
	if got := hotcellObjects(t, base); len(got) == 0 {
		t.Fatalf("a refused teardown removed chain %s", base)
	}
	if none.reaches(t, in.Allowed, 80) {
		t.Error("after a refused teardown: a none sandbox reaches the test internet")
	}

	// A sandbox's rules go with its pod, removed by the DaemonSet's pod.
	for _, b := range []*box{none, byName} {
		if err := c.d.Destroy(ctx, b.id); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, "the sandboxes' chains and sets", func() []string {
		return hotcellObjects(t, "HCE-"+key(none.id), "HCD-"+key(none.id), "HCS-"+key(none.id),
			"HCE-"+key(byName.id), "HCD-"+key(byName.id), "HCS-"+key(byName.id))
	})
	waitMetrics(t, metricsURL, "the destroyed sandboxes' series gone", func(m map[string]float64) bool {
		for k := range m {
			if strings.Contains(k, none.id) || strings.Contains(k, byName.id) {
				return false
			}
		}
		_, ok := m["hotcell_egress_node_pods"]
		return ok && m["hotcell_egress_node_pods"] == 0
	})

	// The node's chain outlives the DaemonSet (a node's pods stay
	// confined while its controller is replaced); an uninstall removes it.
	deleteDaemonSet(t, c.env, ns)
	if got := hotcellObjects(t, base); len(got) == 0 {
		t.Errorf("chain %s went with the DaemonSet; the rules are to outlive it", base)
	}
	// An uninstall's step: deploy/kubernetes/egress-node-teardown.yaml,
	// hotcell egress-node --teardown once on every node.
	down := renderTeardown(t, c.env, image, podRange, rules)
	t.Cleanup(func() { deleteDaemonSet(t, c.env, ns, "hotcell-egress-node-teardown") })
	if _, err := c.env.Kubectl(ctx, bytes.NewReader(down), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.env.Kubectl(ctx, nil, "-n", ns, "rollout", "status", "daemonset/hotcell-egress-node-teardown", "--timeout=2m"); err != nil {
		out, _ := c.env.Kubectl(context.Background(), nil, "-n", ns, "describe", "pods", "-l", "app.kubernetes.io/name=hotcell-egress-node-teardown")
		logs, _ := c.env.Kubectl(context.Background(), nil, "-n", ns, "logs", "daemonset/hotcell-egress-node-teardown", "-c", "teardown")
		t.Fatalf("the teardown DaemonSet's pod is not ready: %v\n%s\n%s", err, out, logs)
	}
	if logs, _ := c.env.Kubectl(ctx, nil, "-n", ns, "logs", "daemonset/hotcell-egress-node-teardown", "-c", "teardown"); !strings.Contains(logs, "removed egress rule set "+rules) {
		t.Errorf("the teardown's log: %q, want it to say it removed %s", logs, rules)
	}
	if got := hotcellObjects(t, base); len(got) > 0 {
		t.Errorf("after the teardown, still there: %v", got)
	}
	if got := ourLoAddrs(t); got != "" {
		t.Errorf("after the teardown, the node's loopback still has %s", got)
	}
	deleteDaemonSet(t, c.env, ns, "hotcell-egress-node-teardown")
}

// apiServer is the test cluster's API server, on this host's loopback:
// the pods on the host's network reach it there (the test cluster has no
// kube-proxy for the kubernetes service's address).
func apiServer(t *testing.T, env *testk8s.Env) *url.URL {
	t.Helper()
	rc, err := kubernetes.RESTConfig(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	api, err := url.Parse(rc.Host)
	if err != nil || api.Hostname() != "127.0.0.1" || api.Port() == "" {
		t.Fatalf("the test cluster's API server is at %q, want 127.0.0.1:PORT", rc.Host)
	}
	return api
}

// renderTeardown is deploy/kubernetes/egress-node-teardown.yaml to apply
// in the test's namespace: image with pull policy Never, the test's pod
// range and rule set, and the API server on this host's loopback.
func renderTeardown(t *testing.T, env *testk8s.Env, image, pods, rules string) []byte {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/egress-node-teardown.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(&ds); err != nil {
		t.Fatal(err)
	}
	spec := &ds.Spec.Template.Spec
	if ds.Kind != "DaemonSet" || len(spec.InitContainers) != 1 || len(spec.Containers) != 1 || !spec.HostNetwork ||
		!slices.Equal(spec.InitContainers[0].Command, []string{"hotcell", "egress-node", "--teardown"}) {
		t.Fatalf("the teardown manifest is to be a DaemonSet on the host's network whose init container runs hotcell egress-node --teardown (update the test with it): %+v", ds)
	}
	api := apiServer(t, env)
	for _, ct := range []*corev1.Container{&spec.InitContainers[0], &spec.Containers[0]} {
		ct.Image, ct.ImagePullPolicy = image, corev1.PullNever
	}
	init := &spec.InitContainers[0]
	var args []string
	for _, a := range init.Args {
		if !strings.HasPrefix(a, "--pod-range=") {
			args = append(args, a)
		}
	}
	init.Args = append(args, "--pod-range="+pods, "--rules="+rules)
	init.Env = append(init.Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
	out, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// renderManifest is deploy/kubernetes/egress-node.yaml as a list to apply
// in the test's namespace: the DaemonSet runs image with pull policy
// Never and args (the manifest's own --namespace and --log-format, then
// args in place of the manifest's addresses), and reaches the API server
// where it listens on the node (the test cluster has no kube-proxy: the
// "kubernetes" service's address, which in-cluster clients dial, leads
// nowhere on this host, so it is never let be dialled). It fails the test
// if the manifest holds an image other than the DaemonSet's one.
func renderManifest(t *testing.T, env *testk8s.Env, image string, metricsPort int, args []string) []byte {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "deploy/kubernetes/egress-node.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	api := apiServer(t, env)
	dec := k8syaml.NewYAMLOrJSONDecoder(f, 4096)
	var items []json.RawMessage
	daemonSets := 0
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if obj == nil {
			continue
		}
		raw, _ := json.Marshal(obj)
		if obj["kind"] != "DaemonSet" {
			if bytes.Contains(raw, []byte(`"image"`)) {
				t.Fatalf("the manifest's %v names an image", obj["kind"])
			}
			items = append(items, raw)
			continue
		}
		daemonSets++
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(raw, &ds); err != nil {
			t.Fatal(err)
		}
		spec := &ds.Spec.Template.Spec
		if len(spec.InitContainers) != 0 || len(spec.EphemeralContainers) != 0 || len(spec.Containers) != 1 {
			t.Fatalf("the DaemonSet has %d init and %d containers, want one container (update the test with the manifest)", len(spec.InitContainers), len(spec.Containers))
		}
		ct := &spec.Containers[0]
		if !strings.HasPrefix(ct.Image, "hotcell/hotcell:") || !slices.Equal(ct.Command, []string{"hotcell", "egress-node"}) {
			t.Fatalf("the DaemonSet runs %s %v, want hotcell egress-node of hotcell/hotcell", ct.Image, ct.Command)
		}
		if !spec.HostNetwork || ct.SecurityContext == nil || ct.SecurityContext.Privileged == nil || !*ct.SecurityContext.Privileged {
			t.Fatal("the DaemonSet's pod is to be privileged with hostNetwork")
		}
		ct.Image, ct.ImagePullPolicy = image, corev1.PullNever
		var keep []string
		metrics := false
		for _, a := range ct.Args {
			if strings.HasPrefix(a, "--namespace=") || strings.HasPrefix(a, "--log-format=") {
				keep = append(keep, a)
			}
			// The manifest's metrics address, on a port free here.
			if host, ok := strings.CutPrefix(a, "--metrics-listen="); ok {
				host, _, err := net.SplitHostPort(host)
				if err != nil || host != "$(HOST_IP)" {
					t.Fatalf("the DaemonSet's %s: want --metrics-listen=$(HOST_IP):PORT", a)
				}
				keep = append(keep, "--metrics-listen="+net.JoinHostPort(host, itoa(metricsPort)))
				metrics = true
			}
		}
		if !metrics || len(ct.Ports) != 1 || ct.Ports[0].Name != "metrics" {
			t.Fatal("the DaemonSet is to serve metrics (--metrics-listen, port \"metrics\")")
		}
		ct.Ports[0].ContainerPort = int32(metricsPort)
		ct.Args = append(keep, args...)
		ct.Env = append(ct.Env,
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: api.Hostname()},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: api.Port()})
		raw, err = json.Marshal(ds)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, raw)
	}
	if daemonSets != 1 {
		t.Fatalf("the manifest has %d DaemonSets, want 1", daemonSets)
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// nodePods are the DaemonSet's pods.
func nodePods(t *testing.T, c *cluster) []corev1.Pod {
	t.Helper()
	pods, err := c.d.Client().CoreV1().Pods(c.d.Namespace()).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=hotcell-egress-node"})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// deleteDaemonSet deletes the DaemonSet and waits until its pods are gone
// (their process, and so its resolver socket, with them).
func deleteDaemonSet(t *testing.T, env *testk8s.Env, ns string, name ...string) {
	t.Helper()
	ds := "hotcell-egress-node"
	if len(name) > 0 {
		ds = name[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := env.Kubectl(ctx, nil, "-n", ns, "delete", "daemonset", ds, "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=100s"); err != nil {
		t.Errorf("delete the DaemonSet %s: %v", ds, err)
	}
	for ctx.Err() == nil {
		out, err := env.Kubectl(ctx, nil, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name="+ds, "-o", "name")
		if err == nil && strings.TrimSpace(out) == "" {
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("the DaemonSet's pods are still there after two minutes")
}

// greeter listens on host:0 and answers every connection with msg; it
// returns its address.
func greeter(t *testing.T, host, msg string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte(msg + "\n"))
			conn.Close()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// greeting connects to ap from the box and returns what it was told.
func (b *box) greeting(t *testing.T, ap netip.AddrPort) (string, bool) {
	t.Helper()
	out, code := b.sh(t, "nc -w 3 "+ap.Addr().String()+" "+itoa(int(ap.Port()))+" </dev/null")
	return strings.TrimSpace(out), code == 0 && strings.TrimSpace(out) != ""
}

// key is a sandbox's name in chain names (egress's sandboxKey for a usual
// id).
func key(id string) string { return strings.TrimPrefix(id, "sb-") }

// iptablesRules are the host's filter rules (iptables -S).
func iptablesRules(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		t.Fatalf("iptables -S: %v", err)
	}
	return strings.Split(string(out), "\n")
}

// hotcellObjects are the rules (iptables and ip6tables) and ipsets that
// name any of names.
func hotcellObjects(t *testing.T, names ...string) []string {
	t.Helper()
	lines := iptablesRules(t)
	if out, err := exec.Command("ip6tables", "-w", "-S").Output(); err == nil {
		lines = append(lines, strings.Split(string(out), "\n")...)
	}
	out, err := exec.Command("ipset", "list", "-n").Output()
	if err != nil {
		t.Fatalf("ipset list -n: %v", err)
	}
	lines = append(lines, strings.Split(string(out), "\n")...)
	var got []string
	for _, l := range lines {
		for _, n := range names {
			if strings.Contains(l, n) {
				got = append(got, l)
				break
			}
		}
	}
	return got
}

// waitGone waits up to 30 s for list to be empty.
func waitGone(t *testing.T, what string, list func() []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := list()
		if len(got) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s still there after 30 s: %v", what, got)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// freePort is a TCP port nothing listens on at host now.
func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitMetrics scrapes url until ok holds of its samples (series with
// their labels as written → value), for up to 30 s.
func waitMetrics(t *testing.T, url, what string, ok func(map[string]float64) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last map[string]float64
	var lastErr error
	for {
		last, lastErr = scrape(url)
		if lastErr == nil && ok(last) {
			return
		}
		if time.Now().After(deadline) {
			var egress []string
			for k, v := range last {
				if strings.HasPrefix(k, "hotcell_egress") {
					egress = append(egress, k+" "+strconv.FormatFloat(v, 'g', -1, 64))
				}
			}
			slices.Sort(egress)
			t.Errorf("%s: not after 30 s of scraping %s (%v): hotcell_egress series:\n%s", what, url, lastErr, strings.Join(egress, "\n"))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// scrape reads a Prometheus text exposition's samples.
func scrape(url string) (map[string]float64, error) {
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			return nil, fmt.Errorf("not a sample: %q", l)
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("sample %q: %w", l, err)
		}
		out[l[:i]] = v
	}
	return out, nil
}
