package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
)

func TestInspect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		addUsage   bool
		maxOut     int64 // with a default of 100
		injected   bool
		ok         bool
	}{
		{"no max", `{"model":"m"}`, true, 100, false, true},
		{"max_tokens", `{"max_tokens":400}`, true, 400, false, true},
		{"max_completion_tokens wins", `{"max_tokens":400,"max_completion_tokens":50}`, true, 50, false, true},
		{"responses api", `{"max_output_tokens":70}`, true, 70, false, true},
		{"n choices", `{"max_tokens":10,"n":5}`, true, 50, false, true},
		{"best_of", `{"max_tokens":10,"n":2,"best_of":3}`, true, 30, false, true},
		{"default times n", `{"n":3}`, true, 300, false, true},
		{"zero or negative is absent", `{"max_tokens":-5}`, true, 100, false, true},
		{"float", `{"max_tokens":12.5}`, true, 12, false, true},
		{"huge", `{"max_tokens":1e300,"n":1e300}`, true, maxTokensCap, false, true},
		{"number in a string", `{"max_tokens":"400"}`, true, 400, false, true},
		{"not a number", `{"max_tokens":"many"}`, true, 0, false, false},
		{"stream gets usage", `{"stream":true,"max_tokens":5}`, true, 5, true, true},
		{"stream already asks", `{"stream":true,"stream_options":{"include_usage":true}}`, true, 100, false, true},
		{"stream asks not", `{"stream":true,"stream_options":{"include_usage":false,"x":1}}`, true, 100, true, true},
		{"stream options null", `{"stream":true,"stream_options":null}`, true, 100, true, true},
		{"stream, no rewrite wanted", `{"stream":true}`, false, 100, false, true},
		{"not an object", `[1,2]`, true, 0, false, false},
		{"two documents", `{"stream":true}{"stream":false}`, true, 0, false, false},
		{"not json", `hello`, true, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, out, injected, ok := inspect([]byte(tc.body), tc.addUsage)
			if ok != tc.ok || injected != tc.injected {
				t.Fatalf("ok %v injected %v, want %v %v", ok, injected, tc.ok, tc.injected)
			}
			if !ok {
				if string(out) != tc.body {
					t.Errorf("a body not understood was changed: %s", out)
				}
				return
			}
			if got := f.maxOutput(100); got != tc.maxOut {
				t.Errorf("maxOutput: got %d, want %d", got, tc.maxOut)
			}
			if !injected {
				if string(out) != tc.body {
					t.Errorf("body changed without injection: %s", out)
				}
				return
			}
			var doc map[string]any
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("rewritten body: %v: %s", err, out)
			}
			so, _ := doc["stream_options"].(map[string]any)
			if so["include_usage"] != true || doc["stream"] != true {
				t.Errorf("rewritten body: got %s", out)
			}
			if strings.Contains(tc.body, `"x":1`) && so["x"] != float64(1) {
				t.Errorf("other stream_options lost: %s", out)
			}
		})
	}
}

func FuzzInspect(f *testing.F) {
	f.Add(`{"stream":true,"max_tokens":5}`, true)
	f.Add(`{"stream":true,"stream_options":{"include_usage":false}}`, true)
	f.Add(`{"n":1e30,"max_tokens":1e30}`, false)
	f.Fuzz(func(t *testing.T, body string, addUsage bool) {
		fields, out, injected, ok := inspect([]byte(body), addUsage)
		if m := fields.maxOutput(4096); m < 0 || m > maxTokensCap {
			t.Fatalf("maxOutput %d out of range", m)
		}
		if !injected {
			if string(out) != body {
				t.Fatalf("body changed without injection")
			}
			return
		}
		if !ok || !addUsage || !fields.Stream {
			t.Fatalf("injected with ok %v addUsage %v stream %v", ok, addUsage, fields.Stream)
		}
		var doc struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(out, &doc); err != nil || !doc.StreamOptions.IncludeUsage {
			t.Fatalf("rewritten body %q: %v", out, err)
		}
	})
}

func TestCharge(t *testing.T) {
	t.Parallel()
	model := callInfo{metered: true, inEst: 10, maxOut: 400}
	for _, tc := range []struct {
		name string
		s    settlement
		want usage
	}{
		{"reported", settlement{call: model, status: 200, inBytes: 40, reported: true, u: usage{11, 7, 18}}, usage{11, 7, 18}},
		{"unreported: the reservation", settlement{call: model, status: 200, inBytes: 40, outBytes: 400}, usage{10, 400, 410}},
		{"unreported JSON answer bigger than max_tokens", settlement{call: model, status: 200, inBytes: 40, outBytes: 4000}, usage{10, 1000, 1010}},
		{"unreported stream: its events' bytes are not tokens", settlement{call: model, status: 200, sse: true, inBytes: 40, outBytes: 4000}, usage{10, 400, 410}},
		{"unreported stream of a body too big to read", settlement{call: callInfo{metered: true, unread: true, inEst: 10, maxOut: 400}, status: 200, sse: true, inBytes: 40, outBytes: 4000}, usage{10, 1000, 1010}},
		{"cut: what was sent", settlement{call: model, status: 200, cut: true, inBytes: 40, outBytes: 80}, usage{10, 20, 30}},
		{"cut with a partial report", settlement{call: model, status: 200, cut: true, inBytes: 40, outBytes: 8, reported: true, u: usage{25, 1, 26}}, usage{25, 2, 27}},
		{"canceled before an answer", settlement{call: model, cut: true, inBytes: 40}, usage{10, 0, 10}},
		{"upstream refused", settlement{call: model, status: 429, inBytes: 40, outBytes: 100}, usage{}},
		{"never answered (502)", settlement{call: model, inBytes: 40}, usage{}},
		{"not a model call", settlement{call: callInfo{}, status: 200, outBytes: 5000}, usage{}},
	} {
		if got := tc.s.charge(); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestAdmitReserves: the token budget counts what calls in flight hold,
// and a call's reservation must fit what is left plus one default.
func TestAdmitReserves(t *testing.T) {
	t.Parallel()
	p := &provider{name: "p", budgetTokens: 1000, defaultMax: 300}
	var c counters
	now := time.Now()
	if rej := c.admit(p, now, 600); rej != nil {
		t.Fatalf("first: %s", rej.message)
	}
	if rej := c.admit(p, now, 600); rej != nil { // 400 left + 300 ≥ 600
		t.Fatalf("second: %s", rej.message)
	}
	if rej := c.admit(p, now, 1); rej == nil || rej.budget != "tokens" {
		t.Fatalf("third with 1200 reserved of 1000: got %+v, want a tokens refusal", rej)
	}
	c.settle(600, 0, 0, usage{total: 100}, false) // the first used 100
	c.settle(600, 0, 0, usage{total: 100}, false)
	if c.reserved != 0 || c.c.TotalTokens != 200 {
		t.Fatalf("after settling: reserved %d used %d", c.reserved, c.c.TotalTokens)
	}
	if rej := c.admit(p, now, 1200); rej == nil || !strings.Contains(rej.message, "lower max_tokens") {
		t.Errorf("a call bigger than what is left plus a default: got %+v, want a refusal", rej)
	}
	if rej := c.admit(p, now, 1100); rej != nil { // 800 left + 300
		t.Errorf("a call that fits with the default's slack: %s", rej.message)
	}
	if c.c.Requests != 3 || c.c.Rejected != 2 {
		t.Errorf("counts: got %+v", c.c)
	}
}

// streamCall sends one streamed chat call and returns its status, with
// the body read to the end.
func (e *env) streamCall(ctx context.Context, token, body string) (int, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/openai/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		sb.WriteString(sc.Text() + "\n")
	}
	return resp.StatusCode, sb.String()
}

// streamBurst sends n streamed calls at once, call i through through(i),
// with up holding every stream before its last event: it waits for the
// admitted ones to reach up and the refusals to come, lets the streams
// end, and returns how many were answered 200 and 429 (any other status
// fails t).
func streamBurst(t *testing.T, up *gatewaytest.Upstream, n int, through func(i int) *env, token, body string) (ok, refused int) {
	t.Helper()
	held, release := up.Hold()
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := range n {
		e := through(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _ := e.streamCall(t.Context(), token, body)
			statuses <- st
		}()
	}
	// Let the admitted streams reach the upstream, then every refusal come.
	admitted := 0
	deadline := time.After(20 * time.Second)
wait:
	for {
		select {
		case <-held:
			admitted++
		case <-deadline:
			break wait
		case <-time.After(time.Second):
			if admitted > 0 {
				break wait
			}
		}
	}
	release()
	wg.Wait()
	close(statuses)
	for st := range statuses {
		switch st {
		case 200:
			ok++
		case 429:
			refused++
		default:
			t.Errorf("status %d", st)
		}
	}
	return ok, refused
}

// TestProxyTokenBudgetHolds is the reproduced attack: streamed calls that
// do not ask for their usage, many at once, against a 1,500-token budget.
// What the upstream bills stays within the budget and one reservation.
func TestProxyTokenBudgetHolds(t *testing.T) {
	t.Parallel()
	const budget, maxTokens = 1500, 400
	e := newEnv(t, func(p *config.Provider) { p.BudgetTokens = budget }, nil)
	vars := e.grant("sb-1", "openai")
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d}`, maxTokens)
	ok, refused := streamBurst(t, e.up, 8, func(int) *env { return e }, vars["OPENAI_API_KEY"], body)
	reservation := int64(inputEstimate(int64(len(body))) + maxTokens)
	if billed := e.up.Billed(); billed > budget+reservation {
		t.Errorf("upstream billed %d tokens, over the budget %d + one reservation %d", billed, budget, reservation)
	}
	if ok == 0 || refused == 0 {
		t.Errorf("ok %d, refused %d: want some of each", ok, refused)
	}
	// The gateway asked for the usage, so every stream reported it.
	for _, r := range e.up.Requests() {
		if !strings.Contains(string(r.Body), `"include_usage":true`) {
			t.Errorf("upstream body without include_usage: %s", r.Body)
		}
	}
	u := e.usage("sb-1", "openai")
	if u.TotalTokens != e.up.Billed() {
		t.Errorf("counted %d tokens, the upstream billed %d", u.TotalTokens, e.up.Billed())
	}
	// Sequential calls go on until the budget is used, then stop.
	for range 5 {
		e.streamCall(t.Context(), vars["OPENAI_API_KEY"], body)
	}
	if billed := e.up.Billed(); billed > budget+reservation {
		t.Errorf("after more calls the upstream billed %d tokens, over %d + %d", billed, budget, reservation)
	}
}

// TestProxyUnreportedUsage: answers that report no usage (an upstream
// that ignores stream_options) are charged their reservation; refusals
// by the upstream and calls that are not model calls cost nothing.
func TestProxyUnreportedUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *config.Provider) { p.BudgetTokens = 1000; p.DefaultMaxTokens = 300 }, nil)
	vars := e.grant("sb-1", "openai")
	auth := "Bearer " + vars["OPENAI_API_KEY"]
	for _, body := range []string{`{"model":"no-usage"}`, `{"model":"no-usage","stream":true,"max_tokens":100}`} {
		if resp, b := e.call("/openai/chat/completions", "Authorization", auth, body); resp.StatusCode != 200 {
			t.Fatalf("%s: got %d %s", body, resp.StatusCode, b)
		}
	}
	// The streamed body was rewritten (include_usage added) before it
	// was measured: 300 + 100 of output, and the two bodies' bytes / 4;
	// the JSON answer's bytes / 4 are below its 300.
	reqs := e.up.Requests()
	want := inputEstimate(int64(len(reqs[0].Body))) + 300 + inputEstimate(int64(len(reqs[1].Body))) + 100
	if u := e.usage("sb-1", "openai"); u.TotalTokens != want {
		t.Errorf("unreported usage: charged %+v, want %d", u, want)
	}
	if resp, _ := e.call("/openai/error/500", "Authorization", auth, `{}`); resp.StatusCode != 500 {
		t.Fatalf("got %d, want the upstream's 500", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+"/openai/models", nil)
	req.Header.Set("Authorization", auth)
	req.Header.Set("X-Test-Call", "models")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	<-e.callDone("models")
	if u := e.usage("sb-1", "openai"); u.TotalTokens != want {
		t.Errorf("after an upstream error and a model list: charged %d, want still %d", u.TotalTokens, want)
	}
	c := e.g.counter(key{"sb-1", "openai"})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reserved != 0 {
		t.Errorf("reservations left after the calls ended: %d", c.reserved)
	}
}

// TestProxyCanceledStream: a stream the sandbox cancels half-way is
// charged at least for its input and what it received, and its
// reservation is released.
func TestProxyCanceledStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *config.Provider) { p.BudgetTokens = 100000 }, nil)
	vars := e.grant("sb-1", "openai")
	held, release := e.up.Hold()
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/openai/chat/completions", strings.NewReader(`{"stream":true,"max_tokens":3000}`))
	req.Header.Set("Authorization", "Bearer "+vars["OPENAI_API_KEY"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-held
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	// The proxy ends a cut answer with a panic (http.ErrAbortHandler), so
	// the test server's done signal never comes: wait for the settlement.
	c := e.g.counter(key{"sb-1", "openai"})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		settled := c.reserved == 0
		c.mu.Unlock()
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the canceled call was not settled in 30s")
		}
	}
	u := e.usage("sb-1", "openai")
	if u.TotalTokens < inputEstimate(int64(len(`{"stream":true,"max_tokens":3000}`))) || u.TotalTokens >= 3000 {
		t.Errorf("canceled stream charged %d tokens: want its input and what it got, not the reservation", u.TotalTokens)
	}
}

// TestProxyConcurrencyCap: a sandbox's calls in flight are capped; its
// neighbour is not affected.
func TestProxyConcurrencyCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, func(o *Options) { o.MaxConcurrent = 2 })
	a := e.grant("sb-a", "openai")
	b := e.grant("sb-b", "openai")
	held, release := e.up.Hold()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.streamCall(t.Context(), a["OPENAI_API_KEY"], `{"stream":true}`)
		}()
	}
	<-held
	<-held
	// Each of the two streams in flight holds its input and the default
	// max_tokens.
	if got, want := e.usage("sb-a", "openai").ReservedTokens, 2*(inputEstimate(int64(len(`{"stream":true}`)))+config.DefaultMaxTokens); got < want {
		t.Errorf("reservedTokens with two streams in flight: got %d, want at least %d", got, want)
	}
	resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+a["OPENAI_API_KEY"], `{}`)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"concurrency"`) {
		t.Errorf("third call in flight: got %d %s, want 429 naming concurrency", resp.StatusCode, body)
	}
	if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+b["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
		t.Errorf("neighbour: got %d %s", resp.StatusCode, body)
	}
	release()
	wg.Wait()
	if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+a["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
		t.Errorf("after the streams ended: got %d %s", resp.StatusCode, body)
	}
	if got := e.usage("sb-a", "openai").ReservedTokens; got != 0 {
		t.Errorf("reservedTokens after the calls ended: got %d, want 0", got)
	}
}

// TestProxyAllowedPaths: the default paths are the model calls; files,
// batches and the rest of the API are refused before anything is sent.
func TestProxyAllowedPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *config.Provider) { p.Paths = nil }, nil)
	vars := e.grant("sb-1", "openai", "anthropic")
	oa := "Bearer " + vars["OPENAI_API_KEY"]
	for _, tc := range []struct {
		method, path, header, value string
		want                        int
	}{
		{"POST", "/openai/files", "Authorization", oa, 403},
		{"GET", "/openai/files", "Authorization", oa, 403},
		{"POST", "/openai/batches", "Authorization", oa, 403},
		{"POST", "/openai/vector_stores", "Authorization", oa, 403},
		{"GET", "/openai/chat/completions", "Authorization", oa, 403}, // stored completions
		{"POST", "/openai/chat/completions/", "Authorization", oa, 403},
		{"POST", "/openai/responses/resp_1/cancel", "Authorization", oa, 403},
		{"POST", "/anthropic/v1/messages/batches", "X-Api-Key", vars["ANTHROPIC_API_KEY"], 403},
		{"POST", "/anthropic/v1/files", "X-Api-Key", vars["ANTHROPIC_API_KEY"], 403},
		{"POST", "/openai/chat/completions", "Authorization", oa, 200},
		{"GET", "/openai/models", "Authorization", oa, 200},
		{"POST", "/anthropic/v1/messages", "X-Api-Key", vars["ANTHROPIC_API_KEY"], 200},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, e.srv.URL+tc.path, strings.NewReader(`{}`))
		req.Header.Set(tc.header, tc.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: got %d %s, want %d", tc.method, tc.path, resp.StatusCode, doc.Error.Message, tc.want)
		}
		if tc.want == 403 && (doc.Error.Code != "permission_denied" || !strings.Contains(doc.Error.Message, "paths")) {
			t.Errorf("%s %s: error %+v, want permission_denied naming paths", tc.method, tc.path, doc.Error)
		}
	}
	for _, r := range e.up.Requests() {
		if strings.Contains(r.Path, "files") || strings.Contains(r.Path, "batches") || strings.Contains(r.Path, "vector") || r.Method == "GET" && strings.Contains(r.Path, "chat") {
			t.Errorf("a refused path reached the upstream: %s %s", r.Method, r.Path)
		}
	}
}

// TestRefusalLogLimited: refused requests cost a sandbox nothing, so their
// audit lines are rate-limited per sandbox (and per address when no token
// matched); every refusal is still answered.
func TestRefusalLogLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	vars := e.grant("sb-1", "openai")
	for range 3 * refusedLinesPerMinute {
		e.call("/openai/files", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`)
		e.call("/openai/chat/completions", "Authorization", "Bearer hcgw_wrong", `{}`)
	}
	logs := e.log.String()
	if n := strings.Count(logs, "gateway request refused"); n != 2*refusedLinesPerMinute {
		t.Errorf("%d refusal lines for %d refusals, want %d (%d per sandbox and per address)", n, 6*refusedLinesPerMinute, 2*refusedLinesPerMinute, refusedLinesPerMinute)
	}
	if !strings.Contains(logs, "code=permission_denied") || !strings.Contains(logs, "code=unauthenticated") {
		t.Error("the first refusals were not logged")
	}
	// Another sandbox's refusals have lines of their own.
	other := e.grant("sb-2", "openai")
	e.call("/openai/files", "Authorization", "Bearer "+other["OPENAI_API_KEY"], `{}`)
	if !strings.Contains(e.log.String(), "sandbox=sb-2") {
		t.Error("a neighbour's refusal was not logged")
	}
}
