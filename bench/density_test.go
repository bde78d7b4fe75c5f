package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	// densityDefault keeps the default bench run short; issue 14's figure
	// is HOTCELL_BENCH_DENSITY=1000.
	densityDefault = 20
	densityWorkers = 8
	// pidHeadroom is how many pids the run leaves free on the host.
	pidHeadroom = 4096
)

// densityCount is HOTCELL_BENCH_DENSITY, or densityDefault.
func densityCount(b *testing.B) int {
	v := os.Getenv("HOTCELL_BENCH_DENSITY")
	if v == "" {
		return densityDefault
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("HOTCELL_BENCH_DENSITY=%q: want a positive number of sandboxes", v)
	}
	return n
}

// BenchmarkDensity creates N idle busybox sandboxes on one daemon (N =
// HOTCELL_BENCH_DENSITY, default 20; the figure is 1000), 8 at a
// time, stopping at the first failure and reporting it (that is what
// limits density). It then measures what each idle sandbox costs the host
// (the box's memory cgroup, its containerd-shim, the daemon's and the
// engine's growth, and the host's MemAvailable as a cross-check), what the
// daemon holds per sandbox (fds, goroutines), and the kernel objects
// (iptables rules, ipsets, loop devices); checks that every sandbox still
// answers an exec; and destroys them all, timed. Printed, not asserted.
func BenchmarkDensity(b *testing.B) {
	n := densityCount(b)
	mc := testenv.RequireDocker(b)
	// The default test subnet is a /24: ~250 addresses. A /21 holds 2,000.
	d := testdaemon.StartWith(b, testdaemon.Options{EgressSubnetBits: 21})
	b.Cleanup(d.Close)
	ctx := b.Context()

	host0 := memAvailable(b)
	daemon0 := settledRSS(b, d.PID())
	engine0 := engineRSS()
	fds0 := countFDs(d.PID())
	gor0 := goroutines(b, d.C)
	rules0, sets0, loops0 := countRules(), countSets(), countLoops()
	tasks0 := hostTasks()

	ids := make([]string, n)
	var mu sync.Mutex
	var createErr error
	var failedAt atomic.Int64
	failedAt.Store(-1)
	// Whatever happens below, every sandbox made here is destroyed.
	b.Cleanup(func() {
		parallel(n, densityWorkers, func(i int) {
			if ids[i] != "" {
				deleteSandbox(b, d, ids[i])
			}
		})
	})
	var createT []time.Duration
	t0 := time.Now()
	b.ResetTimer()
	pidMax := int(readInt("/proc/sys/kernel/pid_max"))
	parallel(n, densityWorkers, func(i int) {
		if failedAt.Load() >= 0 {
			return
		}
		// Every task on the host takes a pid: the run stops short of
		// kernel.pid_max, so that the rest of the host can still fork.
		if t := hostTasks(); pidMax > 0 && t > pidMax-pidHeadroom {
			mu.Lock()
			if createErr == nil {
				createErr = fmt.Errorf("the host runs %d tasks, within %d of kernel.pid_max %d: stopped so the host can still fork", t, pidHeadroom, pidMax)
				failedAt.Store(int64(i))
			}
			mu.Unlock()
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		s0 := time.Now()
		sb, err := d.C.CreateSandbox(cctx, hotcell.CreateSandboxRequest{Image: d.Image, Labels: map[string]string{"bench": "density"}})
		el := time.Since(s0)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if createErr == nil {
				createErr = err
				failedAt.Store(int64(i))
			}
			return
		}
		ids[i] = sb.ID
		createT = append(createT, el)
		if len(createT)%100 == 0 {
			fmt.Printf("density: %d sandboxes after %.0fs\n", len(createT), time.Since(t0).Seconds())
		}
	})
	created := time.Since(t0)
	var live []string
	for _, id := range ids {
		if id != "" {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		b.Fatalf("no sandbox created: %v\n%s", createErr, d.Logs())
	}
	k := int64(len(live))

	host1 := memAvailable(b)
	daemon1 := settledRSS(b, d.PID())
	engine1 := engineRSS()
	fds1 := countFDs(d.PID())
	gor1 := goroutines(b, d.C)
	rules1, sets1, loops1 := countRules(), countSets(), countLoops()
	tasks1 := hostTasks()
	var cgroup, agentRSS, shimRSS, shimAnon []int64
	for _, id := range live {
		cg, rss := boxMemory(b, mc, id)
		cgroup = append(cgroup, cg)
		agentRSS = append(agentRSS, rss)
		if m, ok := shimMemory(ctx, mc, id); ok {
			shimRSS = append(shimRSS, m.RSS)
			shimAnon = append(shimAnon, m.RSSAnon)
		}
	}

	// Every one still answers.
	var execFail atomic.Int64
	var firstExecErr atomic.Value
	t1 := time.Now()
	parallel(len(live), densityWorkers, func(i int) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := d.C.Exec(cctx, live[i], hotcell.ExecRequest{Argv: []string{"/bin/true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit code %d", res.ExitCode)
		}
		if err != nil {
			execFail.Add(1)
			firstExecErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v", live[i], err))
		}
	})
	execd := time.Since(t1)

	t2 := time.Now()
	parallel(n, densityWorkers, func(i int) {
		if ids[i] != "" {
			deleteSandbox(b, d, ids[i])
			ids[i] = ""
		}
	})
	deleted := time.Since(t2)
	// The boxes go in the background after each destroy answered: the
	// counts after are taken once every one is removed.
	for _, id := range live {
		waitRemoved(b, d, id, t2)
	}
	removed := time.Since(t2)
	b.StopTimer()
	rules2, sets2, loops2 := countRules(), countSets(), countLoops()

	perBox := medianInt(cgroup) + medianInt(shimAnon) + (daemon1.RSS-daemon0.RSS)/k + (engine1-engine0)/k
	cs := Summarize(createT)
	tb := Table{Title: fmt.Sprintf("density: %d idle busybox sandboxes (%d asked)", k, n), Head: []string{"what", "value"}}
	tb.Row("created in (s), 8 at a time", fmt.Sprintf("%.1f (%.1f/s)", created.Seconds(), float64(k)/created.Seconds()))
	tb.Row("create p50 / p95 / max (ms) under that load", Ms(cs.P50)+" / "+Ms(cs.P95)+" / "+Ms(cs.Max))
	tb.Row("box memory cgroup, median (MiB)", MiB(medianInt(cgroup)))
	tb.Row("agent VmRSS, median (MiB)", MiB(medianInt(agentRSS)))
	tb.Row("containerd-shim VmRSS / RssAnon, median (MiB)", MiB(medianInt(shimRSS))+" / "+MiB(medianInt(shimAnon)))
	tb.Row("daemon RSS before / after (MiB)", MiB(daemon0.RSS)+" / "+MiB(daemon1.RSS))
	tb.Row("daemon RSS per sandbox (KiB)", fmt.Sprint((daemon1.RSS-daemon0.RSS)/k>>10))
	tb.Row("dockerd + containerd RSS per sandbox (KiB)", fmt.Sprint((engine1-engine0)/k>>10))
	tb.Row("per idle sandbox: cgroup + shim anon + daemon + engine (MiB)", MiB(perBox))
	tb.Row("host MemAvailable drop per sandbox (MiB, noisy: shared host)", MiB((host0-host1)/k))
	tb.Row("daemon fds before / after / per sandbox", fmt.Sprintf("%d / %d / %.1f", fds0, fds1, float64(fds1-fds0)/float64(k)))
	tb.Row("daemon goroutines before / after / per sandbox", fmt.Sprintf("%d / %d / %.1f", gor0, gor1, float64(gor1-gor0)/float64(k)))
	tb.Row("host tasks (threads, against kernel.pid_max) before / with / per sandbox", fmt.Sprintf("%d / %d / %.1f (pid_max %d)", tasks0, tasks1, float64(tasks1-tasks0)/float64(k), readInt("/proc/sys/kernel/pid_max")))
	tb.Row("iptables rules (filter, host-wide) before / with / after", fmt.Sprintf("%d / %d / %d", rules0, rules1, rules2))
	tb.Row("ipsets (host-wide) before / with / after", fmt.Sprintf("%d / %d / %d", sets0, sets1, sets2))
	tb.Row("loop devices (host-wide) before / with / after", fmt.Sprintf("%d / %d / %d", loops0, loops1, loops2))
	tb.Row("exec /bin/true in each (s), failures", fmt.Sprintf("%.1f, %d", execd.Seconds(), execFail.Load()))
	tb.Row("destroyed all in (s), 8 at a time: answered / all removed", fmt.Sprintf("%.1f (%.1f/s) / %.1f", deleted.Seconds(), float64(k)/deleted.Seconds(), removed.Seconds()))
	if createErr != nil {
		tb.Note("create stopped at sandbox %d of %d: %v", failedAt.Load()+1, n, createErr)
	}
	if e := firstExecErr.Load(); e != nil {
		tb.Note("first exec failure: %s", e)
	}
	tb.Note("%d of %d idle sandboxes, each answering an exec: %s", k-execFail.Load(), n, verdict(createErr == nil && execFail.Load() == 0))
	report(b, tb)
	if left := leftovers(live, d.DataDir); len(left) > 0 {
		b.Errorf("destroying every sandbox left %d kernel objects of theirs, e.g. %q", len(left), left[:min(len(left), 5)])
	}

	b.ReportMetric(float64(k), "sandboxes")
	b.ReportMetric(float64(perBox)/(1<<20), "MiB/sandbox")
	b.ReportMetric(deleted.Seconds(), "destroy-all-s")
}

// memAvailable is the host's MemAvailable in bytes.
func memAvailable(b *testing.B) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}

// engineRSS is the VmRSS of dockerd and containerd together.
func engineRSS() int64 {
	var total int64
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if c := strings.TrimSpace(string(comm)); c == "dockerd" || c == "containerd" {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if m, err := ReadProcMemory(pid); err == nil {
				total += m.RSS
			}
		}
	}
	return total
}

// shimMemory reads the memory of the containerd-shim of sandbox id's box:
// the parent of its PID 1.
func shimMemory(ctx context.Context, mc *client.Client, id string) (ProcMemory, bool) {
	res, err := mc.ContainerInspect(ctx, docker.ContainerName(id), client.ContainerInspectOptions{})
	if err != nil || res.Container.State == nil || res.Container.State.Pid == 0 {
		return ProcMemory{}, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", res.Container.State.Pid))
	if err != nil {
		return ProcMemory{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 2 {
		return ProcMemory{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	m, err := ReadProcMemory(ppid)
	return m, err == nil
}

func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// goroutines reads go_goroutines from the daemon's /metrics.
func goroutines(b *testing.B, d interface {
	Metrics(context.Context) (string, error)
}) int {
	text, err := d.Metrics(b.Context())
	if err != nil {
		return -1
	}
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(n)
		}
	}
	return -1
}

func countLines(name string, args ...string) int {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "\n")
}

func countRules() int { return countLines("iptables", "-w", "-S") }
func countSets() int  { return countLines("ipset", "list", "-n") }

// countLoops counts the loop devices that have a backing file.
func countLoops() int {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	return len(files)
}

// leftovers lists what the sandboxes ids still hold in the kernel after
// their destroy: iptables lines and ipsets that name them, loop devices
// backed by an image under the daemon's data dir. Only theirs: other
// daemons on the host make their own.
func leftovers(ids []string, dataDir string) []string {
	var left []string
	rules, _ := exec.Command("iptables", "-w", "-S").Output()
	sets, _ := exec.Command("ipset", "list", "-n").Output()
	for _, id := range ids {
		key := strings.TrimPrefix(id, "sb-")
		for line := range strings.Lines(string(rules) + string(sets)) {
			if strings.Contains(line, key) {
				left = append(left, strings.TrimSpace(line))
			}
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if bf, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(bf), dataDir+"/") {
			left = append(left, f+": "+strings.TrimSpace(string(bf)))
		}
	}
	return left
}

// hostTasks is the number of tasks (threads) on the host, from
// /proc/loadavg's "running/total" field: each takes a pid.
func hostTasks() int {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return -1
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}
