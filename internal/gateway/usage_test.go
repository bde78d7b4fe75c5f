package gateway

import (
	"net/http"
	"testing"

	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestUsageAddsAcrossDaemons: two daemons' gateways on one PostgreSQL
// store meter one sandbox's calls. Each adds what it counted to the
// store's totals, which hold the sum (written as totals, the later write
// would keep one daemon's counts only), and each learns the other's
// counts from the totals its next write returns.
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
	callN(a, 3)
	callN(b, 2)
	own := func(e *env) store.GatewayCounters { return e.g.usage[key{"sb-1", "openai"}].snapshot() }
	ca, cb := own(a), own(b)
	if ca.Requests != 3 || cb.Requests != 2 || ca.TotalTokens == 0 {
		t.Fatalf("counted: A %+v, B %+v; want 3 and 2 requests with tokens", ca, cb)
	}
	for _, e := range []*env{a, b} {
		if err := e.g.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	want := store.GatewayCounters{
		Requests: 5, BytesIn: ca.BytesIn + cb.BytesIn, BytesOut: ca.BytesOut + cb.BytesOut,
		InputTokens: ca.InputTokens + cb.InputTokens, OutputTokens: ca.OutputTokens + cb.OutputTokens, TotalTokens: ca.TotalTokens + cb.TotalTokens,
	}
	us, err := a.st.ListGatewayUsage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].GatewayCounters != want {
		t.Fatalf("store's usage after both flushed: got %+v, want %+v", us, want)
	}
	// B wrote last: its view has A's counts. A learns B's at its next
	// write, and a flush with nothing new adds nothing.
	if got := b.g.Usage("sb-1")[0].Requests; got != 5 {
		t.Errorf("B's view after its write: %d requests, want 5", got)
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
	if us, _ := b.st.ListGatewayUsage(t.Context()); len(us) != 1 || us[0].Requests != 6 {
		t.Errorf("store's usage: got %+v, want 6 requests", us)
	}
}
