package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// The Kubernetes driver beside the Docker driver (issue 17, Speed): two
// daemons in the same run, one on each driver, the same busybox image and
// the same limits on both, samples taken in turn.

const (
	kubeExecSamples   = 200
	kubeCreateSamples = 8
	kubeBurst         = 32
	kubeBurstWorkers  = 16
)

// The same limits on both drivers: 128 MiB and no CPU limit (both daemons
// run with default_limits cpus=0). The test cluster's one node has 2 CPUs
// to give and a pod's requests equal its limits, so 32 live boxes of the
// default 1 CPU, or even of 0.1, would not all be scheduled; and a small
// CFS quota would throttle the very starts and execs being measured.
var kubeBoxLimits = hotcell.Limits{MemoryMB: 128}

var kubeDaemonArgs = []string{"--default-limits", "cpus=0"}

// kubeBench is a daemon on the Kubernetes driver in a namespace of its
// own (deleted, with whatever pods are left in it, after the daemon's Close
// has destroyed its sandboxes), and a client of the cluster to watch pods.
type kubeBench struct {
	*testdaemon.Daemon
	env  *testk8s.Env
	ns   string
	pods *kubernetes.Driver
}

// startKubeDaemon starts `hotcell serve --driver kubernetes` on the test
// cluster as test/k8se2e does: the agent image built from this tree and
// the busybox image imported into the cluster (pull policy Never), the
// agent channel over TCP on the host's address on the pods' bridge. It
// skips (fails with CI set) when the cluster is not up.
func startKubeDaemon(b *testing.B) *kubeBench {
	b.Helper()
	env := testk8s.Cluster(b)
	c := testenv.RequireDocker(b)
	if err := images.BuildAgent(b.Context(), c, images.AgentRef, testenv.AgentBinary(b)); err != nil {
		b.Fatal(err)
	}
	image := testenv.BusyboxImage(b)
	env.ImportImage(b, images.AgentRef)
	env.ImportImage(b, image)
	ns := env.Namespace(b)
	drv, err := kubernetes.New(kubernetes.Config{Kubeconfig: env.Kubeconfig, Namespace: ns, PullPolicy: "Never"})
	if err != nil {
		b.Fatal(err)
	}
	testk8s.WaitImages(b, drv, image, images.AgentRef)
	ln, err := net.Listen("tcp", net.JoinHostPort(env.HostIP, "0"))
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	d := testdaemon.StartWith(b, testdaemon.Options{Args: append(slices.Clone(kubeDaemonArgs),
		"--driver", "kubernetes",
		"--kubernetes-kubeconfig", env.Kubeconfig,
		"--kubernetes-namespace", ns,
		// No provisioner on the test cluster, and one node: this host.
		"--kubernetes-workspace-host-dir", b.TempDir(),
		"--kubernetes-pull-policy", "Never",
		"--agent-channel", "tcp",
		"--agent-listen", net.JoinHostPort(env.HostIP, strconv.Itoa(port)),
	)})
	b.Cleanup(d.Close)
	return &kubeBench{Daemon: d, env: env, ns: ns, pods: drv}
}

// waitPodsGone waits until the sandbox's pods are gone from the API (the
// kubelet has stopped the containers and the pod's deletion completed), so
// that the next sample does not share the node with a terminating pod.
func (k *kubeBench) waitPodsGone(b *testing.B, id string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		l, err := k.pods.Client().CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: driver.LabelID + "=" + id})
		if err == nil && len(l.Items) == 0 {
			return
		}
		if ctx.Err() != nil {
			b.Fatalf("the pod of %s is still there after 2 minutes (%v)", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kubeSide is one of the two daemons under measurement.
type kubeSide struct {
	name string
	d    *testdaemon.Daemon
	k    *kubeBench // nil on Docker
	// gone waits until everything of a destroyed sandbox is removed.
	gone func(id string)
}

func kubeSides(b *testing.B) [2]*kubeSide {
	requireDockerCLI(b)
	k := startKubeDaemon(b)
	testenv.RequireDocker(b)
	dk := testdaemon.StartWith(b, testdaemon.Options{Args: kubeDaemonArgs})
	b.Cleanup(dk.Close)
	return [2]*kubeSide{
		{name: "docker", d: dk, gone: func(id string) { waitRemoved(b, dk, id, time.Now()) }},
		{name: "kubernetes", d: k.Daemon, k: k, gone: func(id string) { k.waitPodsGone(b, id) }},
	}
}

func (s *kubeSide) create(ctx context.Context, l hotcell.Limits) (hotcell.Sandbox, error) {
	sb, err := s.d.C.CreateSandbox(ctx, hotcell.CreateSandboxRequest{Image: s.d.Image, Limits: l, Labels: map[string]string{"bench": "kubernetes"}})
	if err == nil && sb.State != hotcell.StateRunning {
		err = fmt.Errorf("created sandbox %s is %s, want running", sb.ID, sb.State)
	}
	return sb, err
}

func (s *kubeSide) execTrue(ctx context.Context, id string) error {
	res, err := s.d.C.Exec(ctx, id, hotcell.ExecRequest{Argv: []string{"/bin/true"}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("/bin/true exited %d", res.ExitCode)
	}
	return err
}

// kubeRow is a row of p50/p95/p99 and the ratio to the Docker driver's p50.
func kubeRow(tb *Table, name string, got []time.Duration, base time.Duration) Summary {
	s := Summarize(got)
	tb.Row(name, itoa(s.N), Ms(s.P50), Ms(s.P95), Ms(Percentile(got, 99)), Ms(s.Min), Ms(s.Max), fx2(Ratio(s.P50, base)))
	return s
}

func fx2(r float64) string { return strconv.FormatFloat(r, 'f', 2, 64) + "x" }

var kubeHead = []string{"driver", "n", "p50", "p95", "p99", "min", "max", "p50 vs docker"}

// BenchmarkKubernetesExec is the round trip of /bin/true by SDK Exec on
// the Kubernetes driver (the agent in a pod, its session over the
// cross-host TCP+TLS channel to the daemon's listener on the pods' bridge)
// against the Docker driver (its default channel: the run dir's unix
// socket), N=200 each, in turn. Target: p50(kubernetes) <= 1.5 x
// p50(docker).
func BenchmarkKubernetesExec(b *testing.B) {
	sides := kubeSides(b)
	ctx := b.Context()
	ids := [2]string{}
	for i, s := range sides {
		sb, err := s.create(ctx, kubeBoxLimits)
		if err != nil {
			b.Fatalf("%s: create: %v\n%s", s.name, err, s.d.Logs())
		}
		ids[i] = sb.ID
		b.Cleanup(func() { deleteSandbox(b, s.d, sb.ID) })
	}
	got := [2][]time.Duration{}
	one := func(i int) time.Duration {
		t0 := time.Now()
		if err := sides[i].execTrue(ctx, ids[i]); err != nil {
			b.Fatalf("%s: exec: %v", sides[i].name, err)
		}
		return time.Since(t0)
	}
	for range execWarmup {
		one(0)
		one(1)
	}
	b.ResetTimer()
	for n := range 2 * kubeExecSamples {
		i := n % 2
		got[i] = append(got[i], one(i))
	}
	b.StopTimer()

	base := Summarize(got[0]).P50
	tb := Table{Title: "exec round trip of /bin/true by driver (ms)", Head: kubeHead}
	kubeRow(&tb, "docker (unix socket)", got[0], base)
	k := kubeRow(&tb, "kubernetes (pod, TCP + TLS channel)", got[1], base)
	ratio := Ratio(k.P50, base)
	tb.Note("ratio p50(kubernetes)/p50(docker) = %.2fx (target <= 1.5x): %s", ratio, verdict(ratio <= 1.5))
	report(b, tb)
	b.ReportMetric(float64(base)/1e6, "docker-p50-ms")
	b.ReportMetric(float64(k.P50)/1e6, "kubernetes-p50-ms")
	b.ReportMetric(ratio, "kubernetes/docker-x")
}

// BenchmarkKubernetesCreateReady is create to ready of a cold sandbox:
// SDK CreateSandbox, then an exec of /bin/true that must succeed, on the
// Kubernetes driver (a new pod: scheduled, its init container copying the
// agent, the box container started, the agent dialing back) and on the
// Docker driver, N=8 each, alternating which goes first; each sandbox is
// destroyed untimed and its pod or container waited out before the next
// sample. Also prints the create's answer alone and where the daemon's
// time went on each driver. No target in the issue beyond the ratio.
func BenchmarkKubernetesCreateReady(b *testing.B) {
	sides := kubeSides(b)
	ctx := b.Context()
	before := [2]string{}
	ready, answer := [2][]time.Duration{}, [2][]time.Duration{}
	one := func(i int) {
		s := sides[i]
		t0 := time.Now()
		sb, err := s.create(ctx, kubeBoxLimits)
		created := time.Since(t0)
		if err != nil {
			b.Fatalf("%s: create: %v\n%s", s.name, err, s.d.Logs())
		}
		if err := s.execTrue(ctx, sb.ID); err != nil {
			b.Fatalf("%s: exec after create: %v", s.name, err)
		}
		ready[i] = append(ready[i], time.Since(t0))
		answer[i] = append(answer[i], created)
		deleteSandbox(b, s.d, sb.ID)
		s.gone(sb.ID)
	}
	// One untimed round first: the first create of a daemon sets up what
	// later ones reuse (and the node's first pod of the image warms it).
	one(0)
	one(1)
	ready, answer = [2][]time.Duration{}, [2][]time.Duration{}
	for i, s := range sides {
		before[i] = metricsText(b, s.d)
	}
	kubeletBefore := kubeletMetrics(b, sides[1].k)
	b.ResetTimer()
	for n := range kubeCreateSamples {
		first := n % 2
		one(first)
		one(1 - first)
	}
	b.StopTimer()

	base := Summarize(ready[0]).P50
	tb := Table{Title: "create to ready (create, then /bin/true) of a cold sandbox by driver (ms)", Head: kubeHead}
	kubeRow(&tb, "docker", ready[0], base)
	k := kubeRow(&tb, "kubernetes (new pod)", ready[1], base)
	baseA := Summarize(answer[0]).P50
	kubeRow(&tb, "docker: create's answer alone", answer[0], baseA)
	kubeRow(&tb, "kubernetes: create's answer alone", answer[1], baseA)
	ratio := Ratio(k.P50, base)
	tb.Note("ratio p50(kubernetes)/p50(docker) = %.2fx (create to ready, cold; no target)", ratio)
	tb.Note("from a warm pool: BenchmarkKubernetesPoolCreate")
	report(b, tb)
	for i, s := range sides {
		st := stepTable("create", before[i], metricsText(b, s.d))
		st.Title = s.name + ": " + st.Title
		report(b, st)
	}
	report(b, kubeletTable(kubeletBefore, kubeletMetrics(b, sides[1].k)))
	b.ReportMetric(float64(base)/1e6, "docker-p50-ms")
	b.ReportMetric(float64(k.P50)/1e6, "kubernetes-p50-ms")
	b.ReportMetric(ratio, "kubernetes/docker-x")
}

// BenchmarkKubernetesCreateThroughput is creates per second with 16
// concurrent: 32 creates of a cold sandbox (until each returns, ready to
// exec) from 16 goroutines, creates/s = 32 over the wall time, on each
// driver in turn (Docker first, then Kubernetes, each burst's sandboxes
// destroyed and waited out before the next), with each create's latency.
func BenchmarkKubernetesCreateThroughput(b *testing.B) {
	sides := kubeSides(b)
	ctx := b.Context()
	type result struct {
		total  time.Duration
		lat    []time.Duration
		failed int64
	}
	var res [2]result
	burst := func(s *kubeSide) result {
		ids := make([]string, kubeBurst)
		lat := make([]time.Duration, 0, kubeBurst)
		var mu sync.Mutex
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for range kubeBurstWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= kubeBurst {
						return
					}
					st := time.Now()
					sb, err := s.create(ctx, kubeBoxLimits)
					el := time.Since(st)
					if err != nil {
						failed.Add(1)
						b.Errorf("%s: create %d: %v", s.name, i, err)
						continue
					}
					ids[i] = sb.ID
					mu.Lock()
					lat = append(lat, el)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		r := result{total: time.Since(t0), lat: lat, failed: failed.Load()}
		deleteAll(b, s.d, ids)
		for _, id := range ids {
			if id != "" {
				s.gone(id)
			}
		}
		return r
	}
	// Warm each daemon with one create first.
	for _, s := range sides {
		sb, err := s.create(ctx, kubeBoxLimits)
		if err != nil {
			b.Fatalf("%s: create: %v\n%s", s.name, err, s.d.Logs())
		}
		deleteSandbox(b, s.d, sb.ID)
		s.gone(sb.ID)
	}
	b.ResetTimer()
	for i, s := range sides {
		res[i] = burst(s)
	}
	b.StopTimer()

	rate := func(r result) float64 { return float64(kubeBurst-int(r.failed)) / r.total.Seconds() }
	tb := Table{Title: fmt.Sprintf("creates per second, %d cold creates at %d concurrent, by driver (ms)", kubeBurst, kubeBurstWorkers),
		Head: []string{"driver", "creates", "failed", "total", "per second", "p50", "p95", "p99", "max", "per second vs docker"}}
	for i, s := range sides {
		r := res[i]
		sum := Summarize(r.lat)
		tb.Row(s.name, itoa(kubeBurst), fmt.Sprint(r.failed), Ms(r.total), fmt.Sprintf("%.2f", rate(r)),
			Ms(sum.P50), Ms(sum.P95), Ms(Percentile(r.lat, 99)), Ms(sum.Max), fx2(rate(r)/rate(res[0])))
	}
	ratio := rate(res[1]) / rate(res[0])
	tb.Note("creates/s kubernetes/docker = %.2fx (no target)", ratio)
	report(b, tb)
	b.ReportMetric(rate(res[0]), "docker-creates/s")
	b.ReportMetric(rate(res[1]), "kubernetes-creates/s")
	b.ReportMetric(ratio, "kubernetes/docker-x")
}

// kubeletMetrics is the node's kubelet's metrics, through the API server.
func kubeletMetrics(b *testing.B, k *kubeBench) string {
	b.Helper()
	out, err := k.env.Kubectl(b.Context(), nil, "get", "--raw", "/api/v1/nodes/"+k.env.Node+"/proxy/metrics")
	if err != nil {
		b.Fatalf("the kubelet's metrics: %v", err)
	}
	return out
}

// kubeletSums reads the _sum and _count of the kubelet's histograms of
// runtime operations (by operation_type) and of pod start.
func kubeletSums(text string) map[string]StepTotals {
	m := map[string]StepTotals{}
	for _, line := range strings.Split(text, "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		key, count := "", false
		switch {
		case strings.HasPrefix(name, `kubelet_runtime_operations_duration_seconds_sum{operation_type="`):
			key = strings.TrimSuffix(strings.TrimPrefix(name, `kubelet_runtime_operations_duration_seconds_sum{operation_type="`), `"}`)
		case strings.HasPrefix(name, `kubelet_runtime_operations_duration_seconds_count{operation_type="`):
			key, count = strings.TrimSuffix(strings.TrimPrefix(name, `kubelet_runtime_operations_duration_seconds_count{operation_type="`), `"}`), true
		case name == "kubelet_pod_start_duration_seconds_sum", name == "kubelet_pod_start_sli_duration_seconds_sum":
			key = strings.TrimSuffix(name, "_sum")
		case name == "kubelet_pod_start_duration_seconds_count", name == "kubelet_pod_start_sli_duration_seconds_count":
			key, count = strings.TrimSuffix(name, "_count"), true
		default:
			continue
		}
		t := m[key]
		if count {
			t.Count = v
		} else {
			t.Sum = v
		}
		m[key] = t
	}
	return m
}

// kubeletTable is where a pod's start went on the node, between two
// scrapes of the kubelet: the mean of each CRI operation a start makes,
// and the kubelet's own pod start figures. The node is shared: another
// test's pods in between would count too.
func kubeletTable(before, after string) Table {
	was, now := kubeletSums(before), kubeletSums(after)
	tb := Table{Title: "kubernetes: where a pod's start goes on the node (kubelet, mean ms)", Head: []string{"operation", "n", "mean"}}
	for _, op := range []string{"run_podsandbox", "create_container", "start_container", "pull_image", "kubelet_pod_start_duration_seconds", "kubelet_pod_start_sli_duration_seconds"} {
		n := now[op].Count - was[op].Count
		if n <= 0 {
			continue
		}
		tb.Row(op, fmt.Sprint(int(n)), fmt.Sprintf("%.3f", (now[op].Sum-was[op].Sum)/n*1000))
	}
	tb.Note("run_podsandbox: the pause container and the CNI's network; create_ and start_container: the init container copying the agent, then the box; kubelet_pod_start_duration_seconds: from the kubelet's first sight of the pod to its running")
	return tb
}

// BenchmarkKubernetesPoolCreate is create to ready from a warm pool: SDK
// CreateSandbox from a template (made from the busybox image, 128 MiB)
// whose pool (min 2) has a ready box, then an exec of /bin/true that must
// succeed, on each driver, N=8 each, alternating which goes first; before
// each sample an untimed wait for a ready box (every one a hit), after it
// the claimed sandbox is destroyed and waited out.
func BenchmarkKubernetesPoolCreate(b *testing.B) {
	sides := kubeSides(b)
	ctx := b.Context()
	names := [2]string{}
	for i, s := range sides {
		name := "kbench-" + s.name
		if _, err := s.d.C.TemplateFromImage(ctx, name, s.d.Image, hotcell.TemplateFromImageOptions{
			Defaults: &hotcell.TemplateDefaults{Limits: kubeBoxLimits},
		}); err != nil {
			b.Fatalf("%s: template from image: %v\n%s", s.name, err, s.d.Logs())
		}
		b.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_ = s.d.C.DeleteTemplatePool(cctx, name)
			for cctx.Err() == nil {
				if st, err := s.d.C.GetTemplatePool(cctx, name); err != nil || st.Ready+st.Creating == 0 {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			_ = s.d.C.DeleteTemplate(cctx, name, true)
		})
		if _, err := s.d.C.SetTemplatePool(ctx, name, hotcell.PoolConfig{Min: 2}); err != nil {
			b.Fatalf("%s: set pool: %v", s.name, err)
		}
		names[i] = name
	}
	ready, answer := [2][]time.Duration{}, [2][]time.Duration{}
	var misses [2]int
	one := func(i int) {
		s := sides[i]
		before := waitReady(b, s.d, names[i], 1)
		t0 := time.Now()
		sb, err := s.d.C.CreateSandbox(ctx, hotcell.CreateSandboxRequest{Template: names[i], Labels: map[string]string{"bench": "kubernetes"}})
		created := time.Since(t0)
		if err != nil {
			b.Fatalf("%s: create from the pool: %v\n%s", s.name, err, s.d.Logs())
		}
		if err := s.execTrue(ctx, sb.ID); err != nil {
			b.Fatalf("%s: exec after the claim: %v", s.name, err)
		}
		ready[i] = append(ready[i], time.Since(t0))
		answer[i] = append(answer[i], created)
		if after, err := s.d.C.GetTemplatePool(ctx, names[i]); err == nil && after.Misses > before.Misses {
			misses[i]++
		}
		deleteSandbox(b, s.d, sb.ID)
		// A claimed Docker box keeps the pooled box's disk name, which
		// waitRemoved does not know; the pod of a claim is looked up by
		// its label as any other.
		if s.k != nil {
			s.gone(sb.ID)
		}
	}
	one(0)
	one(1)
	ready, answer = [2][]time.Duration{}, [2][]time.Duration{}
	b.ResetTimer()
	for n := range kubeCreateSamples {
		first := n % 2
		one(first)
		one(1 - first)
	}
	b.StopTimer()

	base := Summarize(ready[0]).P50
	tb := Table{Title: "create to ready (create from a warm pool, then /bin/true) by driver (ms)", Head: kubeHead}
	kubeRow(&tb, "docker", ready[0], base)
	k := kubeRow(&tb, "kubernetes (pooled pod)", ready[1], base)
	baseA := Summarize(answer[0]).P50
	kubeRow(&tb, "docker: create's answer alone", answer[0], baseA)
	kubeRow(&tb, "kubernetes: create's answer alone", answer[1], baseA)
	ratio := Ratio(k.P50, base)
	tb.Note("ratio p50(kubernetes)/p50(docker) = %.2fx (create from a pool; no target); misses: docker %d, kubernetes %d", ratio, misses[0], misses[1])
	report(b, tb)
	b.ReportMetric(float64(base)/1e6, "docker-p50-ms")
	b.ReportMetric(float64(k.P50)/1e6, "kubernetes-p50-ms")
	b.ReportMetric(ratio, "kubernetes/docker-x")
}
