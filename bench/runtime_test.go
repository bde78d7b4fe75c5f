package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mobyclient "github.com/moby/moby/client"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	rtExecSamples   = 100
	rtCreateSamples = 6
	rtIdleSandboxes = 3
)

// BenchmarkRuntimes runs the same measurements on a runc sandbox and a
// gVisor sandbox of one daemon, in the same run, and prints gVisor's cost
// as a ratio: the exec round trip of /bin/true, create to ready
// (alternating runtimes), a 100 MiB upload and download, and the host
// memory an idle sandbox takes (its cgroup's memory without the page
// cache, and the summed VmRSS of the host processes in it: the agent under
// runc; gVisor's Sentry, gofer and stubs under gVisor). Targets: exec p50
// under gVisor within 5 ms, create p50 within 2x of runc's.
func BenchmarkRuntimes(b *testing.B) {
	mc := testenv.RequireDocker(b)
	info, err := mc.Info(b.Context(), mobyclient.InfoOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, ok := info.Info.Runtimes[docker.DefaultEngineRuntimes[client.RuntimeGVisor]]; !ok {
		testenv.SkipOrFail(b, "the engine has no runsc runtime; scripts/serve registers it")
	}
	d := startDaemon(b)
	ctx := b.Context()
	runtimes := []string{client.RuntimeRunc, client.RuntimeGVisor}
	create := func(rt string) (client.Sandbox, time.Duration) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		t0 := time.Now()
		sb, err := d.C.CreateSandbox(cctx, client.CreateSandboxRequest{Image: d.Image, Runtime: rt, Labels: map[string]string{"bench": b.Name()}})
		if err != nil {
			b.Fatalf("create %s sandbox: %v\n%s", rt, err, d.Logs())
		}
		return sb, time.Since(t0)
	}

	b.ResetTimer()
	// Create to ready, alternating which runtime goes first; one untimed
	// create of each warms the image and the runtime's binaries.
	creates := map[string][]time.Duration{}
	for i := -1; i < rtCreateSamples; i++ {
		order := runtimes
		if i%2 == 1 {
			order = []string{runtimes[1], runtimes[0]}
		}
		for _, rt := range order {
			sb, dur := create(rt)
			deleteSandbox(b, d, sb.ID)
			if i >= 0 {
				creates[rt] = append(creates[rt], dur)
			}
		}
	}

	// One sandbox of each for exec and transfer.
	boxes := map[string]client.Sandbox{}
	for _, rt := range runtimes {
		sb, _ := create(rt)
		b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
		boxes[rt] = sb
	}
	execs := map[string][]time.Duration{}
	for _, rt := range runtimes {
		id := boxes[rt].ID
		for i := range execWarmup + rtExecSamples {
			t0 := time.Now()
			res, err := d.C.Exec(ctx, id, client.ExecRequest{Argv: []string{"/bin/true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%s exec: %+v, %v", rt, res, err)
			}
			if i >= execWarmup {
				execs[rt] = append(execs[rt], time.Since(t0))
			}
		}
	}
	// A round trip that starts no process (a stat by the agent): what the
	// channel and the agent cost, apart from fork and exec.
	stats := map[string][]time.Duration{}
	for _, rt := range runtimes {
		id := boxes[rt].ID
		for i := range execWarmup + rtExecSamples {
			t0 := time.Now()
			if _, err := d.C.Stat(ctx, id, "/workspace"); err != nil {
				b.Fatalf("%s stat: %v", rt, err)
			}
			if i >= execWarmup {
				stats[rt] = append(stats[rt], time.Since(t0))
			}
		}
	}
	type transfer struct{ up, down time.Duration }
	transfers := map[string]transfer{}
	for _, rt := range runtimes {
		up, down := rtTransfer(b, d, boxes[rt].ID)
		transfers[rt] = transfer{up, down}
	}
	b.StopTimer()

	// Idle memory: a few fresh sandboxes of each, settled.
	type mem struct{ cgroup, rss []int64 }
	mems := map[string]*mem{}
	for _, rt := range runtimes {
		m := &mem{}
		mems[rt] = m
		for range rtIdleSandboxes {
			sb, _ := create(rt)
			b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
		}
	}
	time.Sleep(3 * time.Second)
	all, err := d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, sb := range all {
		if sb.ID == boxes[client.RuntimeRunc].ID || sb.ID == boxes[client.RuntimeGVisor].ID {
			continue // these moved 100 MiB: their page cache is not idle
		}
		cg, rss := boxMemory(b, mc, sb.ID)
		mems[sb.Runtime].cgroup = append(mems[sb.Runtime].cgroup, cg)
		mems[sb.Runtime].rss = append(mems[sb.Runtime].rss, rss)
	}

	ms := func(d time.Duration) string { return Ms(d) }
	rc, gv := client.RuntimeRunc, client.RuntimeGVisor
	tb := Table{Title: "runc and gVisor side by side (ms unless named)", Head: []string{"measure", "runc", "gvisor", "gvisor/runc"}}
	ec, eg := Summarize(execs[rc]), Summarize(execs[gv])
	tb.Row(fmt.Sprintf("exec /bin/true p50 (n=%d)", rtExecSamples), ms(ec.P50), ms(eg.P50), fx(Ratio(eg.P50, ec.P50)))
	tb.Row("exec /bin/true p95", ms(ec.P95), ms(eg.P95), fx(Ratio(eg.P95, ec.P95)))
	sc, sg := Summarize(stats[rc]), Summarize(stats[gv])
	tb.Row("stat /workspace p50 (no process started)", ms(sc.P50), ms(sg.P50), fx(Ratio(sg.P50, sc.P50)))
	cc, cg := Summarize(creates[rc]), Summarize(creates[gv])
	tb.Row(fmt.Sprintf("create to ready p50 (n=%d)", rtCreateSamples), ms(cc.P50), ms(cg.P50), fx(Ratio(cg.P50, cc.P50)))
	tb.Row("create to ready max", ms(cc.Max), ms(cg.Max), fx(Ratio(cg.Max, cc.Max)))
	mbps := func(d time.Duration) float64 { return float64(transferSize) / 1e6 / d.Seconds() }
	tb.Row("upload 100 MiB, MB/s", fmt.Sprintf("%.0f", mbps(transfers[rc].up)), fmt.Sprintf("%.0f", mbps(transfers[gv].up)), fx(mbps(transfers[gv].up)/mbps(transfers[rc].up)))
	tb.Row("download 100 MiB, MB/s", fmt.Sprintf("%.0f", mbps(transfers[rc].down)), fmt.Sprintf("%.0f", mbps(transfers[gv].down)), fx(mbps(transfers[gv].down)/mbps(transfers[rc].down)))
	mc1, mg1 := medianInt(mems[rc].cgroup), medianInt(mems[gv].cgroup)
	mr1, mr2 := medianInt(mems[rc].rss), medianInt(mems[gv].rss)
	tb.Row(fmt.Sprintf("idle sandbox: cgroup memory MiB (median of %d)", rtIdleSandboxes), MiB(mc1), MiB(mg1), fx(float64(mg1)/float64(max(mc1, 1))))
	tb.Row("idle sandbox: host processes' VmRSS MiB", MiB(mr1), MiB(mr2), fx(float64(mr2)/float64(max(mr1, 1))))
	tb.Note("exec p50 under gVisor %s ms (target within 5 ms): %s", ms(eg.P50), verdict(eg.P50 <= 5*time.Millisecond))
	tb.Note("create p50 under gVisor %s of runc's (target within 2x): %s", fx(Ratio(cg.P50, cc.P50)), verdict(Ratio(cg.P50, cc.P50) <= 2))
	report(b, tb)
	b.ReportMetric(float64(eg.P50.Microseconds())/1000, "gvisor-exec-p50-ms")
	b.ReportMetric(float64(ec.P50.Microseconds())/1000, "runc-exec-p50-ms")
	b.ReportMetric(Ratio(cg.P50, cc.P50), "gvisor/runc-create")
}

// rtTransfer uploads and downloads 100 MiB through the API and checks the
// bytes.
func rtTransfer(b *testing.B, d *testdaemon.Daemon, id string) (up, down time.Duration) {
	ctx := b.Context()
	const path = "/workspace/bench-100m.bin"
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{'g', 'v'}), transferSize), h)
	t0 := time.Now()
	if _, err := d.C.WriteFile(ctx, id, path, src, 0o644); err != nil {
		b.Fatalf("upload: %v", err)
	}
	up = time.Since(t0)
	sent := hex.EncodeToString(h.Sum(nil))
	t0 = time.Now()
	rc, err := d.C.ReadFile(ctx, id, path, nil)
	if err != nil {
		b.Fatalf("download: %v", err)
	}
	h2 := sha256.New()
	n, err := io.Copy(h2, rc)
	rc.Close()
	down = time.Since(t0)
	if err != nil || n != transferSize || hex.EncodeToString(h2.Sum(nil)) != sent {
		b.Fatalf("download: %d bytes, %v, or a different sha256", n, err)
	}
	return up, down
}

// boxMemory reads, from the host, the memory an idle box takes: its memory
// cgroup's usage without the inactive page cache (as docker stats shows
// it), and the VmRSS summed over every host process in that cgroup.
func boxMemory(b *testing.B, mc *mobyclient.Client, id string) (cgroup, rss int64) {
	b.Helper()
	ci, err := mc.ContainerInspect(b.Context(), docker.ContainerName(id), mobyclient.ContainerInspectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	self, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ci.Container.State.Pid))
	if err != nil {
		b.Fatal(err)
	}
	var dir string
	for line := range strings.SplitSeq(string(self), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
			dir = filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
	}
	if dir == "" {
		testenv.SkipOrFail(b, "no cgroup v1 memory controller for the box; this benchmark reads v1 files")
	}
	usage := readInt(filepath.Join(dir, "memory.usage_in_bytes"))
	if f, err := os.Open(filepath.Join(dir, "memory.stat")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "total_inactive_file "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				usage -= n
			}
		}
		f.Close()
	}
	procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for p := range strings.FieldsSeq(string(procs)) {
		pid, _ := strconv.Atoi(p)
		if m, err := ReadProcMemory(pid); err == nil {
			rss += m.RSS
		}
	}
	return usage, rss
}

func readInt(p string) int64 {
	b, _ := os.ReadFile(p)
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func medianInt(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
