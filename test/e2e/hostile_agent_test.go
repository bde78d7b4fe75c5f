package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestHostileAgent: code in a sandbox, as root, plays a hostile agent on
// the daemon's agent socket (testdata/hostile): thousands of silent
// connections, health checks and API answers that never end, never-ending
// headers, slow-loris, bytes that are not HTTP, bogus statuses, streams
// opened from the sandbox and a ping flood, while the test keeps calling
// the sandbox's API so the daemon reads those answers. The daemon's memory
// stays within 64 MiB of what it was before, its goroutines stay bounded
// during the attack and come back to where they were after it, a neighbour
// sandbox answers every exec throughout, the hostile sandbox's own agent is
// back once the attack ends, and the log lines the sandbox caused are
// rate-limited.
func TestHostileAgent(t *testing.T) {
	d := testdaemon.Start(t) // its own: its memory and goroutines are measured
	t.Cleanup(d.Close)
	ctx := t.Context()
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	hostile := newSandbox(t, d, client.CreateSandboxRequest{})
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/hostile"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, hostile.ID, "/workspace/hostile", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Warm up what the attack's calls use, so the baseline has it.
	for range 10 {
		mustOK(t, run(t, d, neighbour.ID, "true"), "warm-up exec")
		d.C.Stats(ctx, hostile.ID)
		d.C.ListProcesses(ctx, hostile.ID, client.ProcessListOptions{})
	}
	baseRSS := daemonMemKiB(t, d, "VmRSS")
	baseG := daemonGoroutines(t, d)
	t.Logf("before the attack: RSS %d KiB, %d goroutines", baseRSS, baseG)
	const maxGrowthKiB = 64 << 10

	const attack = 30 * time.Second
	mustOK(t, run(t, d, hostile.ID, fmt.Sprintf("/workspace/hostile %d >/tmp/hostile.log 2>&1 </dev/null &", int(attack.Seconds()))), "start the hostile agent")
	end := time.Now().Add(attack)

	// Calls to the hostile sandbox, whose answers come from whoever holds
	// its session: they fail in many ways, and that is fine.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	calls := []func(ctx context.Context){
		func(ctx context.Context) { d.C.Stats(ctx, hostile.ID) },
		func(ctx context.Context) { d.C.ListProcesses(ctx, hostile.ID, client.ProcessListOptions{}) },
		func(ctx context.Context) { d.C.Exec(ctx, hostile.ID, client.ExecRequest{Command: "true"}) },
		func(ctx context.Context) { d.C.ReadFile(ctx, hostile.ID, "/etc/hostname", nil) },
	}
	for _, call := range calls {
		wg.Go(func() {
			// Also ends with the test, if it stops before close(stop).
			for ctx.Err() == nil {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				call(cctx)
				cancel()
			}
		})
	}

	maxRSS, maxG, execs := baseRSS, baseG, 0
	for time.Now().Before(end) {
		rss := daemonMemKiB(t, d, "VmRSS")
		maxRSS = max(maxRSS, rss)
		if rss > baseRSS+maxGrowthKiB {
			t.Errorf("daemon RSS %d KiB during the attack, want at most %d + %d KiB", rss, baseRSS, maxGrowthKiB)
			break // the daemon is losing: stop before it takes the host
		}
		maxG = max(maxG, daemonGoroutines(t, d))
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := d.C.Exec(ectx, neighbour.ID, client.ExecRequest{Command: "echo ok"})
		cancel()
		if err != nil || res.ExitCode != 0 || res.Stdout != "ok\n" {
			t.Fatalf("exec in the neighbour during the attack: %+v %v", res, err)
		}
		execs++
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	peak := daemonMemKiB(t, d, "VmHWM")
	t.Logf("during the attack: RSS at most %d KiB (peak %d), %d goroutines at most, %d execs in the neighbour", maxRSS, peak, maxG, execs)
	if peak > baseRSS+maxGrowthKiB {
		t.Errorf("daemon peak RSS %d KiB, want at most %d + %d KiB", peak, baseRSS, maxGrowthKiB)
	}
	// One handshake and one session for the sandbox, a few calls in flight:
	// without the limits, every silent connection holds a session's
	// goroutines until its health check times out.
	if maxG > baseG+500 {
		t.Errorf("goroutines during the attack: got %d, want at most %d + 500", maxG, baseG)
	}
	if t.Failed() {
		// Stop the attack now rather than after its time; what follows
		// needs the attack to have been survived.
		d.C.DeleteSandbox(context.Background(), hostile.ID)
		return
	}

	// After the attack: the goroutines come back, the hostile sandbox's
	// own agent takes its session back, the neighbour still answers.
	time.Sleep(time.Until(end))
	var g int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if g = daemonGoroutines(t, d); g <= baseG+30 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines after the attack: got %d, want about %d", g, baseG)
			break
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := d.C.Exec(ectx, hostile.ID, client.ExecRequest{Command: "echo back"})
		cancel()
		if err == nil && res.Stdout == "back\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the hostile sandbox's agent never came back: %+v %v", res, err)
			break
		}
	}
	mustOK(t, run(t, d, neighbour.ID, "true"), "exec in the neighbour after the attack")
	if _, err := d.C.Host(ctx); err != nil {
		t.Errorf("the daemon after the attack: %v", err)
	}

	// The log: what the sandbox's connections caused is a few lines, and a
	// line says how many were dropped (at the latest when the sandbox goes).
	if err := d.C.DeleteSandbox(ctx, hostile.ID); err != nil {
		t.Fatal(err)
	}
	var lines, dropped int
	sc := bufio.NewScanner(strings.NewReader(d.LogsSince(0)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, hostile.ID) || !strings.Contains(l, "agent") {
			continue
		}
		if strings.Contains(l, "agent connection") || strings.Contains(l, "agent session") || strings.Contains(l, "agent connected") {
			lines++
		}
		if strings.Contains(l, "droppedLines") {
			dropped++
		}
	}
	t.Logf("log: %d lines about the hostile sandbox's agent connections, %d saying how many were dropped", lines, dropped)
	if lines > 40 || dropped == 0 {
		t.Errorf("log lines about the hostile sandbox's agent connections: got %d (%d with droppedLines), want at most 40 and one saying how many were dropped", lines, dropped)
	}
}

// daemonMemKiB reads a field of the daemon process's /proc status, in KiB.
func daemonMemKiB(t *testing.T, d *testdaemon.Daemon, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in the daemon's status", field)
	return 0
}

// daemonGoroutines reads go_goroutines from the daemon's /metrics.
func daemonGoroutines(t *testing.T, d *testdaemon.Daemon) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m, err := d.C.Metrics(ctx)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for l := range strings.Lines(m) {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("go_goroutines: %v", err)
			}
			return int(f)
		}
	}
	t.Fatal("no go_goroutines on /metrics")
	return 0
}
