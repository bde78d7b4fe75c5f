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
