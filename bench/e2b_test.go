package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	e2bSamples = 200
	e2bWarmup  = 5
)

// BenchmarkE2BRunTrue is the round trip of E2B's commands.run('true')
// through hotcell's E2B API (process.Process/Start, a Connect server
// stream, to the agent's process stream and back), by the real e2b SDK from
// Node and by a Go Connect client that sends what the SDK sends and reads
// the stream to its end, beside hotcell's own exec round trip (SDK Exec)
// of the same argv (/bin/bash -l -c true: the SDK runs every command in a
// login bash) and of /bin/true, in one run on one sandbox of the base
// image, and E2B's Start of /bin/true itself (what the protocol adds,
// without the login shell) beside exec of /bin/true. Target: p50(E2B, SDK) <= 2 x p50(hotcell exec of the same argv).
func BenchmarkE2BRunTrue(b *testing.B) {
	d := startDaemon(b)
	ctx := b.Context()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	sb, err := d.C.CreateSandbox(cctx, hotcell.CreateSandboxRequest{Image: testenv.BaseImage(b), Labels: map[string]string{"bench": "e2b"}})
	cancel()
	if err != nil {
		b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
	secret, _, err := config.EnsureToken(filepath.Join(d.DataDir, "e2b-secret"))
	if err != nil {
		b.Fatal(err)
	}
	token := e2b.New(e2b.Options{Secret: []byte(secret)}).EnvdToken(sb.ID)
	base := "http://" + d.Addr + "/e2b"

	execArgv := func(argv []string) func() error {
		return func() error {
			res, err := d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Argv: argv})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit code %d, stderr %q", res.ExitCode, res.Stderr)
			}
			return err
		}
	}
	hc := &http.Client{}
	startBody := []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","true"],"envs":{}},"stdin":false}`)
	connectRun := func() error { return connectRunTrue(ctx, hc, base, sb.ID, token, startBody) }
	trueBody := []byte(`{"process":{"cmd":"/bin/true","envs":{}},"stdin":false}`)
	connectTrue := func() error { return connectRunTrue(ctx, hc, base, sb.ID, token, trueBody) }

	kinds := []struct {
		name string
		run  func() error
		got  []time.Duration
	}{
		{"hotcell exec /bin/bash -l -c true", execArgv([]string{"/bin/bash", "-l", "-c", "true"}), nil},
		{"hotcell exec /bin/true", execArgv([]string{"/bin/true"}), nil},
		{"E2B Start, Go Connect client", connectRun, nil},
		{"E2B Start of /bin/true, Go Connect client", connectTrue, nil},
	}
	b.ResetTimer()
	for i := range kinds {
		k := &kinds[i]
		for range e2bWarmup {
			if err := k.run(); err != nil {
				b.Fatalf("%s: %v\n%s", k.name, err, d.Logs())
			}
		}
		for range e2bSamples {
			t0 := time.Now()
			if err := k.run(); err != nil {
				b.Fatalf("%s: %v", k.name, err)
			}
			k.got = append(k.got, time.Since(t0))
		}
	}
	sdk := nodeRunTrue(b, d.Addr, sb.ID, token)
	b.StopTimer()

	same := Summarize(kinds[0].got)
	tb := Table{Title: "E2B commands.run('true') round trip (ms)", Head: []string{"path", "n", "p50", "p95", "min", "max", "p50 vs hotcell exec (same argv)"}}
	for _, k := range kinds {
		s := Summarize(k.got)
		tb.Row(k.name, itoa(s.N), Ms(s.P50), Ms(s.P95), Ms(s.Min), Ms(s.Max), fx(Ratio(s.P50, same.P50)))
	}
	var sdkSum Summary
	if sdk != nil {
		sdkSum = Summarize(sdk)
		tb.Row("E2B commands.run, e2b SDK (Node)", itoa(sdkSum.N), Ms(sdkSum.P50), Ms(sdkSum.P95), Ms(sdkSum.Min), Ms(sdkSum.Max), fx(Ratio(sdkSum.P50, same.P50)))
		ratio := Ratio(sdkSum.P50, same.P50)
		tb.Note("ratio p50(E2B SDK commands.run)/p50(hotcell exec, same argv) = %.2fx (target <= 2x): %s", ratio, verdict(ratio <= 2))
		b.ReportMetric(float64(sdkSum.P50)/1e6, "e2b-sdk-p50-ms")
		b.ReportMetric(ratio, "e2b/exec-x")
	}
	gc := Summarize(kinds[2].got)
	tb.Note("ratio p50(E2B Go Connect client)/p50(hotcell exec, same argv) = %.2fx", Ratio(gc.P50, same.P50))
	tb.Note("ratio p50(E2B Start of /bin/true)/p50(hotcell exec /bin/true) = %.2fx (the protocol's own cost, without the login shell)",
		Ratio(Summarize(kinds[3].got).P50, Summarize(kinds[1].got).P50))
	report(b, tb)
	b.ReportMetric(float64(same.P50)/1e6, "exec-p50-ms")
	b.ReportMetric(float64(gc.P50)/1e6, "e2b-go-p50-ms")
}

// connectRunTrue is one Process.Start as the SDK sends it, read to the
// end of the stream: the start and end events and the end-stream envelope.
func connectRunTrue(ctx context.Context, hc *http.Client, base, id, token string, msg []byte) error {
	body := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/process.Process/Start", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("X-Access-Token", token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var last []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return fmt.Errorf("stream ended without end-stream: %w", err)
		}
		m := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(br, m); err != nil {
			return err
		}
		if hdr[0] == 2 {
			if string(m) != "{}" {
				return fmt.Errorf("end-stream %s", m)
			}
			if !bytes.Contains(last, []byte(`"end":{"exited":true`)) {
				return fmt.Errorf("last message %s, want a clean end", last)
			}
			_, _ = io.Copy(io.Discard, br)
			return nil
		}
		last = m
	}
}

// nodeRunTrue runs test/e2e/e2b/bench_run_true.mjs with the e2b SDK and
// returns its samples, or nil (with the reason logged) when Node or the
// SDK is missing.
func nodeRunTrue(b *testing.B, addr, id, token string) []time.Duration {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Logf("no node: the e2b SDK row is left out: %v", err)
		return nil
	}
	dir := filepath.Join("..", "test", "e2e", "e2b")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b")); err != nil {
		b.Logf("no e2b SDK in %s (npm ci there): the SDK row is left out", dir)
		return nil
	}
	cmd := exec.CommandContext(b.Context(), node, "bench_run_true.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL=http://"+addr+"/e2b", "E2B_SANDBOX_URL=http://"+addr+"/e2b", "E2B_API_KEY=unused",
		"E2B_TEST_SANDBOX_ID="+id, "E2B_TEST_ENVD_TOKEN="+token,
		fmt.Sprintf("BENCH_N=%d", e2bSamples), fmt.Sprintf("BENCH_WARMUP=%d", e2bWarmup))
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("node bench_run_true.mjs: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var ms []float64
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ms); err != nil {
		b.Fatalf("node output: %v\n%s", err, out)
	}
	got := make([]time.Duration, len(ms))
	for i, v := range ms {
		got[i] = time.Duration(v * float64(time.Millisecond))
	}
	return got
}
