package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestUsageAddsAcrossDaemons: two daemons' gateways on one PostgreSQL
// store meter one sandbox's calls. Each adds what it counted to the
// store's totals as each call ends, before any flush (a daemon killed
// the moment after loses nothing), so the store holds the sum (written
// as totals, the later write would keep one daemon's counts only), and
// each learns the other's counts from the totals its next write returns.
func TestUsageAddsAcrossDaemons(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	up := gatewaytest.New(t)
	a := newEnvAt(t, url, up, nil, nil)
	vars := a.grant("sb-1", "openai")
	b := newEnvAt(t, url, up, nil, nil) // loads the token A minted
	callN := func(e *env, n int) {
		t.Helper()
		for range n {
			if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`); resp.StatusCode != http.StatusOK {
				t.Fatalf("call: %s %s", resp.Status, body)
			}
		}
	}
	stored := func() store.GatewayCounters {
		t.Helper()
		us, err := a.st.ListGatewayUsage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(us) != 1 {
			t.Fatalf("store's usage: %+v, want one sandbox's", us)
		}
		return us[0].GatewayCounters
	}
	own := func(e *env) store.GatewayCounters { return e.g.usage[key{"sb-1", "openai"}].snapshot() }

	// No Flush anywhere below: every count is in the store when its call
	// has ended.
	callN(a, 3)
	ca := own(a)
	if got := stored(); ca.Requests != 3 || ca.TotalTokens == 0 || got != ca {
		t.Fatalf("after A's 3 calls: A counted %+v, the store holds %+v; want 3 requests with tokens in both", ca, got)
	}
	callN(b, 2)
	cb := own(b)
	want := store.GatewayCounters{
		Requests: 5, BytesIn: ca.BytesIn * 5 / 3, BytesOut: ca.BytesOut * 5 / 3,
		InputTokens: ca.InputTokens * 5 / 3, OutputTokens: ca.OutputTokens * 5 / 3, TotalTokens: ca.TotalTokens * 5 / 3,
	}
	if got := stored(); got != want || cb != want {
		t.Fatalf("after B's 2 calls: the store holds %+v and B's view is %+v; want both %+v (A's 3 and B's 2 alike)", got, cb, want)
	}
	// A learns B's at its next write; a flush with nothing new adds
	// nothing.
	if got := a.g.Usage("sb-1")[0].Requests; got != 3 {
		t.Errorf("A's view before its next write: %d requests, want its own 3", got)
	}
	callN(a, 1)
	for range 2 {
		if err := a.g.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.g.Usage("sb-1")[0].Requests; got != 6 {
		t.Errorf("A's view after its next write: %d requests, want 6 (3 + B's 2 + 1)", got)
	}
	if got := stored(); got.Requests != 6 {
		t.Errorf("store's usage: got %+v, want 6 requests", got)
	}
}

// TestBudgetHoldsAcrossDaemons: a sandbox whose calls alternate between
// two daemons of a set (as a Service in front of their gateways spreads
// them) gets its request budget, not more: each daemon checks it on the
// store's total, every daemon's calls in it, not on its own view as of
// its last write.
func TestBudgetHoldsAcrossDaemons(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	up := gatewaytest.New(t)
	budget := func(p *config.Provider) { p.BudgetRequests = 3 }
	shared := func(o *Options) { o.Shared = true }
	a := newEnvAt(t, url, up, budget, shared)
	vars := a.grant("sb-1", "openai")
	b := newEnvAt(t, url, up, budget, shared)
	var codes []int
	for i := range 6 {
		e := a
		if i%2 == 1 {
			e = b
		}
		resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(body, "budget_exceeded") {
			t.Errorf("call %d: 429 %s, want budget_exceeded", i, body)
		}
	}
	want := []int{200, 200, 200, 429, 429, 429}
	if !slices.Equal(codes, want) {
		t.Errorf("calls alternating between two daemons under a budget of 3 requests: %v, want %v", codes, want)
	}
	if got := len(up.Requests()); got != 3 {
		t.Errorf("the upstream got %d calls, want 3", got)
	}
	for _, e := range []*env{a, b} {
		if err := e.g.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	us, err := a.st.ListGatewayUsage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Requests != 3 || us[0].Rejected != 3 {
		t.Errorf("the store's usage: %+v, want 3 requests and 3 rejected", us)
	}
}
