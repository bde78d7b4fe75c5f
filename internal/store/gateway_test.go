package store

import (
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
		if err := s.PutGatewayUsage(ctx, us); err != nil {
			t.Fatal(err)
		}
		us[0].Requests = 4
		if err := s.PutGatewayUsage(ctx, us[:1]); err != nil {
			t.Fatal(err)
		}
		got, err := s.ListGatewayUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]GatewayUsage{{SandboxID: "sb-a", Provider: "openai", GatewayCounters: GatewayCounters{Requests: 4, TotalTokens: 30}}}, got); diff != "" {
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
