package bench

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// BenchmarkGatewayLatency: what the LLM gateway adds to a call, measured
// from the host against a fake upstream on loopback: the same request
// sent to the upstream directly (with the real key) and through the
// gateway on the egress gateway address (with a sandbox's token), in
// turns, on kept-alive connections. For a streamed answer it compares the
// time to the first body byte. Target: at most 1 ms added at p50.
func BenchmarkGatewayLatency(b *testing.B) { gatewayLatency(b, "", "") }

// BenchmarkGatewayLatencySet: the same on a set's store (PostgreSQL) with
// a request budget, so that each call is admitted in a store transaction
// (gateway.admitShared): it adds the daemon's unwritten counts, locking
// the sandbox's total, and writes the call's count.
func BenchmarkGatewayLatencySet(b *testing.B) {
	gatewayLatency(b, testenv.RequirePostgres(b), "budget_requests = 1000000000\n")
}

// BenchmarkGatewayLatencySetTokens: the same with a token budget, whose
// transaction also sums the other daemons' reservations and writes this
// daemon's: two statements more.
func BenchmarkGatewayLatencySetTokens(b *testing.B) {
	gatewayLatency(b, testenv.RequirePostgres(b), "budget_tokens = 1000000000000\n")
}

// gatewayLatency measures the gateway of a daemon on store (its default
// when empty) whose provider's table has extra lines.
func gatewayLatency(b *testing.B, store, extra string) {
	testenv.RequireDocker(b)
	up := gatewaytest.New(b)
	dir := b.TempDir()
	key := filepath.Join(dir, "openai.key")
	providers := filepath.Join(dir, "providers.toml")
	if err := os.WriteFile(key, []byte(gatewaytest.OpenAIKey), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(providers, []byte(fmt.Sprintf("[[provider]]\nname = \"openai\"\nkind = \"openai\"\nbase_url = \"%s/v1\"\nkey_file = %q\n%s", up.URL, key, extra)), 0o600); err != nil {
		b.Fatal(err)
	}
	d := testdaemon.StartWith(b, testdaemon.Options{Store: store, Args: []string{"--providers-file", providers, "--log-level", "info"}})
	b.Cleanup(d.Close)
	sb, err := d.C.CreateSandbox(b.Context(), client.CreateSandboxRequest{Gateway: []string{"openai"}, Labels: map[string]string{"bench": "gateway"}})
	if err != nil {
		b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
	res, err := d.C.Exec(b.Context(), sb.ID, client.ExecRequest{Command: `printf %s "$OPENAI_API_KEY"`})
	if err != nil || !strings.HasPrefix(res.Stdout, "hcgw_") {
		b.Fatalf("read the sandbox's token: %v %q", err, res.Stdout)
	}
	token := res.Stdout
	gw := "http://" + d.EgressSubnet.Masked().Addr().Next().String() + ":8090/openai"
	direct := up.URL + "/v1"

	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	}
	dc, gc := newClient(), newClient()
	// call sends one request and returns the time to the first body byte
	// and to the end of the answer.
	call := func(hc *http.Client, base, auth, body string) (first, total time.Duration) {
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, base+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var one [1]byte
		if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
			b.Fatal(err)
		}
		first = time.Since(start)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		total = time.Since(start)
		if resp.StatusCode != 200 {
			b.Fatalf("%s: status %d", base, resp.StatusCode)
		}
		return first, total
	}
	const jsonBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	const streamBody = `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`
	// Warm both connection pools.
	for range 20 {
		call(dc, direct, gatewaytest.OpenAIKey, jsonBody)
		call(gc, gw, token, jsonBody)
	}

	const samples = 500
	var dJSON, gJSON, dTTFB, gTTFB []time.Duration
	b.ResetTimer()
	for range b.N {
		for range samples {
			_, t := call(dc, direct, gatewaytest.OpenAIKey, jsonBody)
			dJSON = append(dJSON, t)
			_, t = call(gc, gw, token, jsonBody)
			gJSON = append(gJSON, t)
			f, _ := call(dc, direct, gatewaytest.OpenAIKey, streamBody)
			dTTFB = append(dTTFB, f)
			f, _ = call(gc, gw, token, streamBody)
			gTTFB = append(gTTFB, f)
		}
	}
	b.StopTimer()
	dj, gj, ds, gs := Summarize(dJSON), Summarize(gJSON), Summarize(dTTFB), Summarize(gTTFB)
	tb := Table{Title: "LLM gateway vs the upstream directly, from the host (ms)", Head: []string{"request", "path", "n", "p50", "p95", "min", "max", "p50 added"}}
	tb.Row("chat completion (JSON)", "direct", itoa(dj.N), Ms(dj.P50), Ms(dj.P95), Ms(dj.Min), Ms(dj.Max), "")
	tb.Row("", "gateway", itoa(gj.N), Ms(gj.P50), Ms(gj.P95), Ms(gj.Min), Ms(gj.Max), Ms(gj.P50-dj.P50))
	tb.Row("stream: first byte", "direct", itoa(ds.N), Ms(ds.P50), Ms(ds.P95), Ms(ds.Min), Ms(ds.Max), "")
	tb.Row("", "gateway", itoa(gs.N), Ms(gs.P50), Ms(gs.P95), Ms(gs.Min), Ms(gs.Max), Ms(gs.P50-ds.P50))
	added := gj.P50 - dj.P50
	tb.Note("added at p50: %s ms (JSON), %s ms (time to first streamed byte); p95 added %s ms; target <= 1 ms at p50: %s",
		Ms(added), Ms(gs.P50-ds.P50), Ms(gj.P95-dj.P95), verdict(added <= time.Millisecond))
	tb.Note("the gateway's part: token check, budget check, header swap, a second loopback hop, usage parsing as the bytes pass, one audit log line")
	if store != "" {
		tb.Note("on PostgreSQL with %s: each call is admitted in a store transaction (the set's count locked, read and added to; with a token budget, the other daemons' reservations read and this one's written)", strings.TrimSpace(extra))
	}
	report(b, tb)
}
