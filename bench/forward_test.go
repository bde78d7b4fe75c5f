package bench

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/daemon"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

const forwardSamples = 300

// BenchmarkForwardedExec is what forwarding adds to a call (docs/
// kubernetes.md, "Several daemons on one store"): the round trip of an
// exec of /bin/true sent to daemon A, which holds the sandbox's agent
// session, against the same exec sent to daemon B's forwarding handler,
// which reads the holder from the PostgreSQL registry and passes the call
// to A. A is a real `hotcell serve` on PostgreSQL; B is
// daemon.Forwarding in this process, on the same store, in front of
// nothing else (a real second serve needs item 5). The two are
// interleaved, one of each in turn, so both see the same load.
func BenchmarkForwardedExec(b *testing.B) {
	testenv.RequireDocker(b)
	pg := testenv.RequirePostgres(b)
	d := testdaemon.StartWith(b, testdaemon.Options{Store: pg})
	b.Cleanup(d.Close)
	sb := newSandbox(b, d)
	ctx := b.Context()

	st, err := store.Open(ctx, pg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if h, ok, err := st.SessionHolder(ctx, sb.ID); err != nil || !ok {
		b.Fatalf("the registry names no holder of %s's session: %v", sb.ID, err)
	} else if !strings.HasSuffix(h.URL, d.Addr) {
		b.Fatalf("holder %s at %s, want the daemon at %s", h.ID, h.URL, d.Addr)
	}
	fwd := daemon.Forwarding{
		Self:       "bench-forwarder",
		SandboxOf:  api.New(api.Options{}).SandboxOf,
		HasSession: func(string) bool { return false },
		Holders:    st,
		Log:        slog.New(slog.DiscardHandler),
	}
	srv := httptest.NewServer(fwd.Handler(http.NotFoundHandler()))
	b.Cleanup(srv.Close)
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		b.Fatal(err)
	}
	viaB, err := hotcell.New(srv.URL, strings.TrimSpace(string(tok)))
	if err != nil {
		b.Fatal(err)
	}

	run := func(c *hotcell.Client) time.Duration {
		t0 := time.Now()
		res, err := c.Exec(ctx, sb.ID, hotcell.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec /bin/true: %v (exit code %d)\n%s", err, res.ExitCode, d.Logs())
		}
		return time.Since(t0)
	}
	// The registry read alone, as the forwarder makes it per call.
	lookup := func() time.Duration {
		t0 := time.Now()
		if _, _, err := st.SessionHolder(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for range b.N {
		for range execWarmup {
			run(d.C)
			run(viaB)
		}
		var local, forwarded, reads []time.Duration
		for range forwardSamples {
			local = append(local, run(d.C))
			forwarded = append(forwarded, run(viaB))
			reads = append(reads, lookup())
		}
		l, f, r := Summarize(local), Summarize(forwarded), Summarize(reads)
		tb := Table{Title: "exec round trip of /bin/true, direct and forwarded (ms)", Head: []string{"path", "n", "p50", "p95", "min", "max", "p50 vs direct"}}
		tb.Row("to A, which holds the session", itoa(l.N), Ms(l.P50), Ms(l.P95), Ms(l.Min), Ms(l.Max), fx2(1))
		tb.Row("to B, forwarded to A", itoa(f.N), Ms(f.P50), Ms(f.P95), Ms(f.Min), Ms(f.Max), fx2(Ratio(f.P50, l.P50)))
		tb.Row("the registry read (SessionHolder)", itoa(r.N), Ms(r.P50), Ms(r.P95), Ms(r.Min), Ms(r.Max), fx2(Ratio(r.P50, l.P50)))
		tb.Note("forwarded/direct p50 = %.2fx; the hop adds %s ms at p50, of which the registry read is %s",
			Ratio(f.P50, l.P50), Ms(f.P50-l.P50), Ms(r.P50))
		report(b, tb)
		b.ReportMetric(float64(l.P50)/1e6, "direct-p50-ms")
		b.ReportMetric(float64(f.P50)/1e6, "forwarded-p50-ms")
		b.ReportMetric(Ratio(f.P50, l.P50), "forwarded/direct-x")
	}
}
