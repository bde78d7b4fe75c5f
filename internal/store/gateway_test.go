package store

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestGatewayTokensAndUsage(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		now := time.Now()
		for _, id := range []string{"sb-a", "sb-b"} {
			if err := s.Put(ctx, sandbox(id, wire.StateRunning, now, nil)); err != nil {
				t.Fatal(err)
			}
		}
		put := func(id, prov, hash string) {
			t.Helper()
			if err := s.PutGatewayToken(ctx, GatewayToken{SandboxID: id, Provider: prov, Hash: hash, CreatedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		put("sb-a", "openai", "h1")
		put("sb-a", "anthropic", "h2")
		put("sb-b", "openai", "h3")
		put("sb-a", "openai", "h4") // rotation replaces h1
		if err := s.PutGatewayToken(ctx, GatewayToken{SandboxID: "sb-missing", Provider: "openai", Hash: "h5"}); err == nil {
			t.Error("token of a missing sandbox: got nil error")
		}
		hashes := func() map[string]string {
			toks, err := s.ListGatewayTokens(ctx)
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, tk := range toks {
				m[tk.Hash] = tk.SandboxID + "/" + tk.Provider
			}
			return m
		}
		if diff := cmp.Diff(map[string]string{"h4": "sb-a/openai", "h2": "sb-a/anthropic", "h3": "sb-b/openai"}, hashes()); diff != "" {
			t.Errorf("tokens (-want +got):\n%s", diff)
		}
		if err := s.DeleteGatewayTokens(ctx, "sb-a", "anthropic"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "sb-b"); err != nil { // cascades
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]string{"h4": "sb-a/openai"}, hashes()); diff != "" {
			t.Errorf("tokens after revoke and delete (-want +got):\n%s", diff)
		}

		us := []GatewayUsage{
			{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 3, TotalTokens: 30}},
			{SandboxID: "sb-b", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 1}}, // gone: skipped
		}
		totals, err := s.AddGatewayUsage(ctx, us)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(us[:1], totals); diff != "" {
			t.Errorf("totals after the first counts (-want +got):\n%s", diff)
		}
		// Counts add up: 1 more request and 5 more tokens.
		totals, err = s.AddGatewayUsage(ctx, []GatewayUsage{{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 1, TotalTokens: 5, Errors: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		want := []GatewayUsage{{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 4, Errors: 1, TotalTokens: 35}}}
		if diff := cmp.Diff(want, totals); diff != "" {
			t.Errorf("totals returned (-want +got):\n%s", diff)
		}
		got, err := s.ListGatewayUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		if err := s.DeleteGatewayUsage(ctx, "sb-a"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.ListGatewayUsage(ctx); len(got) != 0 {
			t.Errorf("usage after delete: got %v, want none", got)
		}
	})
}

// Two daemons (two handles) count calls of one sandbox and provider at
// once, each adding what it counted: the total is the sum of both, where
// totals written over each other would keep one daemon's.
func TestGatewayUsageAddsAcrossDaemons(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		hs := openHandles(t, be, 2)
		ctx := t.Context()
		if err := hs[0].Put(ctx, sandbox("sb-a", wire.StateRunning, t0, nil)); err != nil {
			t.Fatal(err)
		}
		const writers, adds = 4, 25
		var wg sync.WaitGroup
		errs := make(chan error, writers*adds)
		for w := range writers {
			s := hs[w%len(hs)]
			wg.Go(func() {
				for range adds {
					_, err := s.AddGatewayUsage(ctx, []GatewayUsage{{SandboxID: "sb-a", Provider: "openai",
						GatewayCounters: GatewayCounters{Requests: 1, Rejected: 2, Errors: 3, BytesIn: 4, BytesOut: 5, InputTokens: 6, OutputTokens: 7, TotalTokens: 13}}})
					if err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		const n = writers * adds
		want := []GatewayUsage{{SandboxID: "sb-a", Provider: "openai",
			GatewayCounters: GatewayCounters{Requests: n, Rejected: 2 * n, Errors: 3 * n, BytesIn: 4 * n, BytesOut: 5 * n, InputTokens: 6 * n, OutputTokens: 7 * n, TotalTokens: 13 * n}}}
		got, err := hs[1].ListGatewayUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("usage after %d adds from two handles (-want +got):\n%s", n, diff)
		}
		// The counts go with the sandbox.
		if err := hs[0].Delete(ctx, "sb-a"); err != nil {
			t.Fatal(err)
		}
		if got, _ := hs[1].ListGatewayUsage(ctx); len(got) != 0 {
			t.Errorf("usage after the sandbox was deleted: got %v, want none", got)
		}
	})
}

// A database of schema 12 keeps the gateway's usage as JSON documents:
// migration 13 carries them into the totals' columns, a sandbox's that
// is gone excepted.
func TestMigrateGatewayUsage(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, target := openTest(t, be)
		ctx := t.Context()
		if err := s.Put(ctx, sandbox("sb-a", wire.StateRunning, t0, nil)); err != nil {
			t.Fatal(err)
		}
		// Back to schema 12, its usage as an older hotcell wrote it.
		for _, q := range []string{
			`DROP TABLE gateway_usage_totals`,
			`DELETE FROM schema_migrations WHERE version >= 13`,
			`INSERT INTO gateway_usage (sandbox_id, provider, doc) VALUES ('sb-a', 'openai', '{"requests":3,"rejected":1,"errors":0,"bytesIn":10,"bytesOut":20,"inputTokens":5,"outputTokens":7,"totalTokens":12}')`,
			`INSERT INTO gateway_usage (sandbox_id, provider, doc) VALUES ('sb-a', 'anthropic', '{"requests":1}')`,
			`INSERT INTO gateway_usage (sandbox_id, provider, doc) VALUES ('sb-gone', 'openai', '{"requests":9}')`,
		} {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s.Close()
		s, err := Open(ctx, target)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer s.Close()
		got, err := s.ListGatewayUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b GatewayUsage) int { return strings.Compare(a.Provider, b.Provider) })
		want := []GatewayUsage{
			{SandboxID: "sb-a", Provider: "anthropic", GatewayCounters: GatewayCounters{Requests: 1}},
			{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 3, Rejected: 1, BytesIn: 10, BytesOut: 20, InputTokens: 5, OutputTokens: 7, TotalTokens: 12}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("usage after the migration (-want +got):\n%s", diff)
		}
		// And it adds from there.
		if totals, err := s.AddGatewayUsage(ctx, []GatewayUsage{{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 1}}}); err != nil || len(totals) != 1 || totals[0].Requests != 4 {
			t.Errorf("add after the migration: got %v, %v; want 4 requests", totals, err)
		}
	})
}

// TestAdmitGatewayCall: an admission adds what the daemon had pending,
// shows Decide the total and the reservations of the other live daemons
// only, and writes Decide's count and reservation; a missing sandbox
// writes nothing.
func TestAdmitGatewayCall(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, _ := openTest(t, be)
		ctx := t.Context()
		now := time.Now()
		if err := s.Put(ctx, sandbox("sb-a", wire.StateRunning, now, nil)); err != nil {
			t.Fatal(err)
		}
		for id, at := range map[string]time.Time{"d-live": now, "d-dead": now.Add(-time.Hour), "d-me": now} {
			if err := s.Heartbeat(ctx, id, "http://127.0.0.1:1", at); err != nil {
				t.Fatal(err)
			}
		}
		for d, n := range map[string]int64{"d-live": 100, "d-dead": 1000, "d-me": 10000} {
			if err := s.SetGatewayReservation(ctx, "sb-a", "openai", d, n); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AddGatewayUsage(ctx, []GatewayUsage{{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 2, TotalTokens: 50}}}); err != nil {
			t.Fatal(err)
		}
		var seen GatewayCounters
		var seenOthers int64
		var seenRate GatewayRate
		calls := 0
		filled := now.Add(-3 * time.Second).Round(0)
		admit := func(pending GatewayCounters, leave GatewayRate) (GatewayCounters, bool, error) {
			return s.AdmitGatewayCall(ctx, GatewayAdmission{
				SandboxID: "sb-a", Provider: "openai", Daemon: "d-me",
				Pending:      pending,
				Reservations: true,
				Rate:         true,
				LiveAfter:    now.Add(-time.Minute),
				Decide: func(total GatewayCounters, others int64, rate GatewayRate) (GatewayCounters, int64, GatewayRate) {
					calls++
					seen, seenOthers, seenRate = total, others, rate
					return GatewayCounters{Requests: 1}, 40, leave
				},
			})
		}
		total, ok, err := admit(GatewayCounters{Requests: 1, TotalTokens: 7}, GatewayRate{Bucket: 2.25, Filled: filled})
		if err != nil || !ok {
			t.Fatalf("AdmitGatewayCall: ok %v, %v", ok, err)
		}
		if calls != 1 {
			t.Errorf("Decide called %d times in one admission, want 1", calls)
		}
		if want := (GatewayCounters{Requests: 3, TotalTokens: 57}); seen != want {
			t.Errorf("Decide saw total %+v, want %+v (the pending counts added)", seen, want)
		}
		if seenOthers != 100 {
			t.Errorf("Decide saw others' reservations %d, want 100 (d-live's; d-dead's heartbeat is too old, d-me's own)", seenOthers)
		}
		if want := (GatewayCounters{Requests: 4, TotalTokens: 57}); total != want {
			t.Errorf("total after: %+v, want %+v", total, want)
		}
		if !seenRate.Filled.IsZero() {
			t.Errorf("the first admission saw a rate bucket %+v, want a never-filled one", seenRate)
		}
		// The next admission sees the bucket the last one left.
		if _, _, err := admit(GatewayCounters{}, GatewayRate{}); err != nil {
			t.Fatal(err)
		}
		if seenRate.Bucket != 2.25 || !seenRate.Filled.Equal(filled) {
			t.Errorf("the second admission saw the rate bucket %+v, want 2.25 filled at %v", seenRate, filled)
		}
		if total, _, _ = admit(GatewayCounters{}, GatewayRate{}); total.Requests != 6 || !seenRate.Filled.IsZero() {
			t.Errorf("after a third admission: %+v, bucket seen %+v; want 6 requests and the bucket left unfilled", total, seenRate)
		}
		if err := s.SetGatewayReservation(ctx, "sb-a", "openai", "d-me", 40); err != nil {
			t.Fatal(err)
		}
		rs, err := s.GatewayReservations(ctx, "sb-a", "openai")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[string]int64{"d-live": 100, "d-dead": 1000, "d-me": 40}, rs); diff != "" {
			t.Errorf("reservations (-want +got):\n%s", diff)
		}
		// Released to none, the row goes; Unregister takes a daemon's.
		if err := s.SetGatewayReservation(ctx, "sb-a", "openai", "d-me", 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Unregister(ctx, "d-live"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteGatewayReservations(ctx, "d-dead"); err != nil {
			t.Fatal(err)
		}
		if rs, err = s.GatewayReservations(ctx, "sb-a", "openai"); err != nil || len(rs) != 0 {
			t.Errorf("reservations after release, unregister and delete: %v, %v; want none", rs, err)
		}

		// A sandbox that is gone: nothing decided, nothing written.
		_, ok, err = s.AdmitGatewayCall(ctx, GatewayAdmission{SandboxID: "sb-gone", Provider: "openai", Daemon: "d-me",
			Decide: func(GatewayCounters, int64, GatewayRate) (GatewayCounters, int64, GatewayRate) {
				t.Error("Decide called for a missing sandbox")
				return GatewayCounters{}, 1, GatewayRate{}
			}})
		if err != nil || ok {
			t.Errorf("admission for a missing sandbox: ok %v, %v; want false, nil", ok, err)
		}
		if err := s.SetGatewayReservation(ctx, "sb-gone", "openai", "d-me", 5); err != nil {
			t.Errorf("reservation of a missing sandbox: %v, want nil", err)
		}
		if rs, _ := s.GatewayReservations(ctx, "sb-gone", "openai"); len(rs) != 0 {
			t.Errorf("reservation of a missing sandbox written: %v", rs)
		}

		// Deleting the sandbox takes its reservations.
		if err := s.SetGatewayReservation(ctx, "sb-a", "openai", "d-me", 5); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "sb-a"); err != nil {
			t.Fatal(err)
		}
		if rs, _ := s.GatewayReservations(ctx, "sb-a", "openai"); len(rs) != 0 {
			t.Errorf("reservations of a deleted sandbox: %v", rs)
		}
	})
}

// TestAdmitGatewayCallOrdered: admissions from several daemons at once,
// each letting a call through while the requests and tokens held are
// under a budget, let through exactly the budget: each sees the ones
// before it.
func TestAdmitGatewayCallOrdered(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, be backend) {
		s, target := openTest(t, be)
		ctx := t.Context()
		now := time.Now()
		if err := s.Put(ctx, sandbox("sb-a", wire.StateRunning, now, nil)); err != nil {
			t.Fatal(err)
		}
		const daemons, each, budget = 4, 6, 9
		var (
			mu       sync.Mutex
			admitted int
		)
		var wg sync.WaitGroup
		for d := range daemons {
			id := "d-" + string(rune('a'+d))
			if err := s.Heartbeat(ctx, id, "http://127.0.0.1:1", now); err != nil {
				t.Fatal(err)
			}
			// A Store of its own, as a daemon has.
			ds, err := Open(ctx, target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ds.Close() })
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine int64
				for range each {
					_, _, err := ds.AdmitGatewayCall(ctx, GatewayAdmission{SandboxID: "sb-a", Provider: "openai", Daemon: id, Reservations: true, LiveAfter: now.Add(-time.Minute),
						Decide: func(total GatewayCounters, others int64, rate GatewayRate) (GatewayCounters, int64, GatewayRate) {
							// Requests and held tokens (10 a call) both count.
							if total.Requests >= budget || others+mine+10 > budget*10 {
								return GatewayCounters{Rejected: 1}, mine, rate
							}
							mine += 10
							mu.Lock()
							admitted++
							mu.Unlock()
							return GatewayCounters{Requests: 1}, mine, rate
						}})
					if err != nil {
						t.Errorf("daemon %s: %v", id, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if admitted != budget {
			t.Errorf("%d daemons admitting %d calls each at once let %d through, want the budget of %d", daemons, each, admitted, budget)
		}
		us, err := s.ListGatewayUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(us) != 1 || us[0].Requests != budget || us[0].Rejected != daemons*each-budget {
			t.Errorf("usage %+v, want %d requests and %d rejected", us, budget, daemons*each-budget)
		}
		rs, err := s.GatewayReservations(ctx, "sb-a", "openai")
		if err != nil {
			t.Fatal(err)
		}
		var held int64
		for _, n := range rs {
			held += n
		}
		if held != budget*10 {
			t.Errorf("reservations held %d tokens (%v), want %d", held, rs, budget*10)
		}
	})
}
