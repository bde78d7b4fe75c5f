package bench

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// storeRows is how many sandboxes each store holds while it is read.
const storeRows = 500

// BenchmarkStore times the sandbox store's calls the API makes most on
// SQLite (the default: a file in the data dir, WAL, synchronous=NORMAL)
// and on PostgreSQL (Debian's 15 on 127.0.0.1, synchronous_commit on),
// in the same run, and on PostgreSQL again with synchronous_commit=off
// (what of a write is the wait for the disk): create (Put of a new sandbox with two labels), get,
// list of all and by label, an event appended, and creates per second
// from 16 goroutines at once. PostgreSQL's numbers are what a store
// shared by several daemons costs against the embedded one.
func BenchmarkStore(b *testing.B) {
	pg := testenv.RequirePostgres(b)
	// The same server without waiting for each commit's WAL flush: how
	// much of a write is the disk's.
	pgAsync := testenv.RequirePostgres(b) + "&synchronous_commit=off"
	backends := []string{"sqlite", "postgres", "postgres, synchronous_commit=off"}
	for range b.N {
		tb := Table{Title: "sandbox store (ms per call)", Head: []string{"call", "store", "n", "p50", "p95", "max", "p50 vs sqlite"}}
		results := map[string]map[string]Summary{}
		rates := map[string]float64{}
		for _, be := range []struct{ name, target string }{
			{"sqlite", filepath.Join(b.TempDir(), "hotcell.db")},
			{"postgres", pg},
			{backends[2], pgAsync},
		} {
			res, rate := benchStore(b, be.target)
			results[be.name] = res
			rates[be.name] = rate
		}
		for _, call := range []string{"create", "get", "list all (500)", "list by label (50 of 500)", "add event"} {
			base := results["sqlite"][call].P50
			for _, name := range backends {
				s := results[name][call]
				tb.Row(call, name, fmt.Sprint(s.N), Ms(s.P50), Ms(s.P95), Ms(s.Max), fmt.Sprintf("%.1fx", Ratio(s.P50, base)))
			}
		}
		tb.Note("creates/s with 16 goroutines: sqlite %.0f, postgres %.0f (%.2fx), postgres without waiting for the WAL flush %.0f",
			rates["sqlite"], rates["postgres"], rates["postgres"]/rates["sqlite"], rates[backends[2]])
		fmt.Println(tb.String())
		for _, name := range []string{"sqlite", "postgres"} {
			b.ReportMetric(float64(results[name]["create"].P50)/1e6, name+"-create-p50-ms")
			b.ReportMetric(float64(results[name]["get"].P50)/1e6, name+"-get-p50-ms")
			b.ReportMetric(float64(results[name]["list all (500)"].P50)/1e6, name+"-list-p50-ms")
			b.ReportMetric(rates[name], name+"-creates/s-16")
		}
	}
}

// benchStore measures one store, new at target, and returns each call's
// latencies and the creates per second of 16 goroutines.
func benchStore(b *testing.B, target string) (map[string]Summary, float64) {
	ctx := b.Context()
	s, err := store.Open(ctx, target)
	if err != nil {
		b.Fatalf("open %s: %v", target, err)
	}
	defer s.Close()
	now := time.Now().UTC()
	sb := func(id string, i int) wire.Sandbox {
		return wire.Sandbox{ID: id, State: wire.StateRunning, Image: "hotcell/base:latest", Runtime: wire.RuntimeRunc,
			Labels: map[string]string{"team": fmt.Sprintf("t%d", i%10), "agent": id},
			Env:    map[string]string{"A": "1"}, Limits: wire.Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 256}, Persist: true,
			CreatedAt: now.Add(time.Duration(i)), UpdatedAt: now}
	}
	timed := func(n int, f func(i int)) Summary {
		out := make([]time.Duration, 0, n)
		for i := range n {
			t := time.Now()
			f(i)
			out = append(out, time.Since(t))
		}
		return Summarize(out)
	}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	res := map[string]Summary{}
	res["create"] = timed(storeRows, func(i int) { must(s.Put(ctx, sb(fmt.Sprintf("sb-%04d", i), i))) })
	res["get"] = timed(1000, func(int) {
		_, err := s.Get(ctx, fmt.Sprintf("sb-%04d", rand.IntN(storeRows)))
		must(err)
	})
	res["list all (500)"] = timed(50, func(int) {
		l, err := s.List(ctx, store.Filter{HidePooled: true})
		must(err)
		if len(l) != storeRows {
			b.Fatalf("listed %d, want %d", len(l), storeRows)
		}
	})
	res["list by label (50 of 500)"] = timed(200, func(i int) {
		l, err := s.List(ctx, store.Filter{Labels: map[string]string{"team": fmt.Sprintf("t%d", i%10)}, HidePooled: true})
		must(err)
		if len(l) != storeRows/10 {
			b.Fatalf("listed %d, want %d", len(l), storeRows/10)
		}
	})
	res["add event"] = timed(500, func(i int) {
		_, err := s.AddEvent(ctx, wire.SandboxEvent{SandboxID: fmt.Sprintf("sb-%04d", i), Type: "started", Time: now})
		must(err)
	})

	const workers, each = 16, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := s.Put(ctx, sb(fmt.Sprintf("c-%02d-%03d", w, i), i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	rate := float64(workers*each) / time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		b.Fatalf("concurrent create: %v", err)
	}
	return res, rate
}
