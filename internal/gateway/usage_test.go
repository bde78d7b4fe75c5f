package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

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
	a, b, up, token := setOfTwo(t, func(p *config.Provider) { p.BudgetRequests = 3 })
	codes := alternate(t, a, b, token, func(_ *http.Response, body string) bool { return strings.Contains(body, "budget_exceeded") })
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

// TestRateHoldsAcrossDaemons: a rate limit of 3 calls a minute holds for
// a sandbox whose calls alternate between two daemons of a set: the set's
// bucket, kept in the store, lets 3 through, not 3 on each daemon.
func TestRateHoldsAcrossDaemons(t *testing.T) {
	t.Parallel()
	a, b, up, token := setOfTwo(t, func(p *config.Provider) { p.RatePerMinute = 3 })
	codes := alternate(t, a, b, token, func(resp *http.Response, body string) bool {
		return strings.Contains(body, "rate_limited") && resp.Header.Get("Retry-After") != ""
	})
	if want := []int{200, 200, 200, 429, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("calls alternating between two daemons under a rate of 3 a minute: %v, want %v", codes, want)
	}
	if got := len(up.Requests()); got != 3 {
		t.Errorf("the upstream got %d calls, want 3", got)
	}
}

// setOfTwo runs two gateways of a set, daemons d-a and d-b, on one new
// PostgreSQL database in front of one fake upstream, with providers
// changed by mod, and grants sandbox sb-1 openai through A; it returns
// both, the upstream and the sandbox's token.
func setOfTwo(t *testing.T, mod func(*config.Provider)) (a, b *env, up *gatewaytest.Upstream, token string) {
	t.Helper()
	url := testenv.RequirePostgres(t)
	up = gatewaytest.New(t)
	a = newEnvAt(t, url, up, mod, sharedAs("d-a"))
	token = a.grant("sb-1", "openai")["OPENAI_API_KEY"]
	b = newEnvAt(t, url, up, mod, sharedAs("d-b"))
	return a, b, up, token
}

// alternate makes six calls of token, A's first, then B's, and so on, and
// returns their statuses; each 429 must be check's (its body and head).
func alternate(t *testing.T, a, b *env, token string, check func(resp *http.Response, body string) bool) []int {
	t.Helper()
	var codes []int
	for i := range 6 {
		e := a
		if i%2 == 1 {
			e = b
		}
		resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+token, `{}`)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && !check(resp, body) {
			t.Errorf("call %d: 429 %s (Retry-After %q), not the refusal wanted", i, body, resp.Header.Get("Retry-After"))
		}
	}
	return codes
}

// sharedAs makes a gateway one of a set's daemons, id in the registry.
func sharedAs(id string) func(*Options) {
	return func(o *Options) { o.Shared, o.Daemon = true, id }
}

// beat records daemons alive at at in the registry of e's store.
func (e *env) beat(at time.Time, ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		if err := e.st.Heartbeat(e.t.Context(), id, "http://127.0.0.1:1", at); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestTokenBudgetHoldsAcrossDaemons is TestProxyTokenBudgetHolds's attack
// spread over two daemons of a set: streamed calls held in flight, many
// at once, half through each daemon, against a 1,500-token budget. Each
// daemon counts the tokens the other's calls in flight hold, so what the
// upstream bills stays within the budget and one reservation; a daemon
// checking its own calls only let twice as many through.
func TestTokenBudgetHoldsAcrossDaemons(t *testing.T) {
	t.Parallel()
	const budget, maxTokens = 1500, 400
	a, b, up, token := setOfTwo(t, func(p *config.Provider) { p.BudgetTokens = budget })
	a.beat(time.Now(), "d-a", "d-b")
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d}`, maxTokens)
	ok, refused := streamBurst(t, up, 8, func(i int) *env {
		if i%2 == 1 {
			return b
		}
		return a
	}, token, body)
	reservation := int64(inputEstimate(int64(len(body))) + maxTokens)
	if billed := up.Billed(); billed > budget+reservation {
		t.Errorf("the set's upstream billed %d tokens (%d calls let through), over the budget %d + one reservation %d", billed, ok, budget, reservation)
	}
	if ok == 0 || refused == 0 {
		t.Errorf("ok %d, refused %d: want some of each", ok, refused)
	}
	// Every call ended: neither daemon holds anything in the store.
	rs, err := a.st.GatewayReservations(t.Context(), "sb-1", "openai")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 0 {
		t.Errorf("reservations left in the store after every call ended: %v", rs)
	}
}

// TestReservationOfDeadDaemon: a call in flight on daemon A holds the
// whole token budget, so daemon B refuses the sandbox's next call, naming
// the tokens held; once A's heartbeat is too old (A killed), what it held
// no longer counts and B lets the call through. A restarted under the
// same id drops what it held before.
func TestReservationOfDeadDaemon(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	up := gatewaytest.New(t)
	limit := func(p *config.Provider) { p.BudgetTokens = 1000 }
	a := newEnvAt(t, url, up, limit, sharedAs("d-a"))
	vars := a.grant("sb-1", "openai")
	b := newEnvAt(t, url, up, limit, sharedAs("d-b"))
	a.beat(time.Now(), "d-a", "d-b")
	held, release := up.Hold()
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go a.streamCall(ctx, vars["OPENAI_API_KEY"], `{"stream":true,"max_tokens":1000}`)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not reach the upstream")
	}
	rs, err := a.st.GatewayReservations(t.Context(), "sb-1", "openai")
	if err != nil {
		t.Fatal(err)
	}
	if rs["d-a"] < 1000 {
		t.Fatalf("daemon A's reservation in the store: %v, want at least the call's 1000 tokens", rs)
	}
	resp, body := b.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{"max_tokens":10}`)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "held by requests in flight") {
		t.Fatalf("daemon B, while A's call holds the budget: %d %s; want 429 naming the tokens held", resp.StatusCode, body)
	}
	// A's heartbeat ages past LiveFor: what it holds is let go.
	a.beat(time.Now().Add(-time.Hour), "d-a")
	resp, body = b.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{"max_tokens":10}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("daemon B, A dead: %d %s; want 200", resp.StatusCode, body)
	}
	// A restarted under its id: it has no call in flight.
	newEnvAt(t, url, up, limit, sharedAs("d-a"))
	if rs, err = a.st.GatewayReservations(t.Context(), "sb-1", "openai"); err != nil || rs["d-a"] != 0 {
		t.Errorf("reservations after A restarted: %v, %v; want none of A's", rs, err)
	}
}

// TestFlushWritesReservation: a call admitted without writing its
// reservation (its provider has a request budget only) gets it written
// by the next flush while it is in flight, and released as it ends.
func TestFlushWritesReservation(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	up := gatewaytest.New(t)
	a := newEnvAt(t, url, up, func(p *config.Provider) { p.BudgetRequests = 100 }, sharedAs("d-a"))
	vars := a.grant("sb-1", "openai")
	a.beat(time.Now(), "d-a")
	held, release := up.Hold()
	defer release()
	done := make(chan int, 1)
	go func() {
		st, _ := a.streamCall(t.Context(), vars["OPENAI_API_KEY"], `{"stream":true,"max_tokens":500}`)
		done <- st
	}()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not reach the upstream")
	}
	reservations := func() map[string]int64 {
		t.Helper()
		rs, err := a.st.GatewayReservations(t.Context(), "sb-1", "openai")
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	if rs := reservations(); len(rs) != 0 {
		t.Errorf("a request-budget call's admission wrote a reservation: %v", rs)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- a.g.Flush(t.Context()) }()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flush did not return in 10 s with a call in flight")
	}
	if rs := reservations(); rs["d-a"] < 500 {
		t.Errorf("reservations after a flush with the call in flight: %v, want d-a's of at least 500", rs)
	}
	release()
	if st := <-done; st != http.StatusOK {
		t.Fatalf("the stream ended with %d", st)
	}
	if rs := reservations(); len(rs) != 0 {
		t.Errorf("reservations after the call ended: %v, want none", rs)
	}
}
