package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// syncBuffer is a log sink the proxy's goroutines may write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type env struct {
	t   *testing.T
	up  *gatewaytest.Upstream
	g   *Gateway
	srv *httptest.Server
	log *syncBuffer
	st  *store.Store
	// done is closed per call (by its X-Test-Call number) once the
	// gateway's handler has returned: usage is recorded when the handler
	// ends, which may be after the client has read the whole answer.
	mu    sync.Mutex
	calls int
	done  map[string]chan struct{}
}

func providers(up *gatewaytest.Upstream, mod func(*config.Provider)) []config.Provider {
	// The fake upstream's test paths (errors, a slow answer, one that
	// waits for a cancel) are allowed besides the defaults.
	testPaths := append(config.DefaultPaths("openai"), "error/*", "slow", "GET wait-cancel")
	ps := []config.Provider{
		{Name: "openai", Kind: "openai", BaseURL: up.URL + "/v1", KeyEnv: "TEST_OPENAI_KEY", Paths: testPaths},
		{Name: "anthropic", Kind: "anthropic", BaseURL: up.URL, KeyEnv: "TEST_ANTHROPIC_KEY"},
		{Name: "other", Kind: "generic", BaseURL: up.URL + "/v1", KeyEnv: "TEST_OPENAI_KEY", Header: "Authorization", Format: "Bearer {key}", Paths: testPaths},
	}
	if mod != nil {
		for i := range ps {
			mod(&ps[i])
		}
	}
	return ps
}

func getenv(k string) string {
	return map[string]string{"TEST_OPENAI_KEY": gatewaytest.OpenAIKey, "TEST_ANTHROPIC_KEY": gatewaytest.AnthropicKey}[k]
}

// newEnv runs a gateway with a real store in front of a fake upstream.
func newEnv(t *testing.T, mod func(*config.Provider), opt func(*Options)) *env {
	t.Helper()
	return newEnvAt(t, filepath.Join(t.TempDir(), "db"), gatewaytest.New(t), mod, opt)
}

// newEnvAt runs a gateway on the store at target in front of up: two of
// them on one PostgreSQL database are two daemons of a set.
func newEnvAt(t *testing.T, target string, up *gatewaytest.Upstream, mod func(*config.Provider), opt func(*Options)) *env {
	t.Helper()
	e := &env{t: t, up: up, log: &syncBuffer{}}
	st, err := store.Open(t.Context(), target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	opts := Options{
		Providers: providers(e.up, mod), Getenv: getenv, Store: st,
		SandboxURL: "http://gw.test:8090",
		Log:        slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if opt != nil {
		opt(&opts)
	}
	e.g, err = New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	e.done = map[string]chan struct{}{}
	h := e.g.Handler()
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Header.Get("X-Test-Call")
		h.ServeHTTP(w, r)
		if n != "" {
			close(e.callDone(n))
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) callDone(n string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.done[n]
	if !ok {
		ch = make(chan struct{})
		e.done[n] = ch
	}
	return ch
}

// grant records a sandbox and grants it providers; it returns its env.
func (e *env) grant(id string, names ...string) map[string]string {
	e.t.Helper()
	if err := e.st.Put(e.t.Context(), wire.Sandbox{ID: id, State: wire.StateRunning, CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
		e.t.Fatal(err)
	}
	vars, err := e.g.Grant(e.t.Context(), id, names)
	if err != nil {
		e.t.Fatal(err)
	}
	return vars
}

// call sends a request to the gateway as a sandbox would: the path under
// the provider's gateway URL and the token in the given header.
func (e *env) call(path, header, value, body string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set(header, value)
	}
	e.mu.Lock()
	e.calls++
	n := strconv.Itoa(e.calls)
	e.mu.Unlock()
	req.Header.Set("X-Test-Call", n)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	select {
	case <-e.callDone(n):
	case <-time.After(30 * time.Second):
		e.t.Fatalf("the gateway's handler for %s did not return in 30s after its answer was read", path)
	}
	return resp, string(b)
}

func (e *env) usage(id, provider string) wire.GatewayUsage {
	for _, u := range e.g.Usage(id) {
		if u.Provider == provider {
			return u
		}
	}
	return wire.GatewayUsage{}
}

func TestGrantEnv(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	vars := e.grant("sb-1", "openai", "anthropic", "other")
	want := map[string]string{
		"OPENAI_BASE_URL":            "http://gw.test:8090/openai",
		"ANTHROPIC_BASE_URL":         "http://gw.test:8090/anthropic",
		"HOTCELL_OPENAI_BASE_URL":    "http://gw.test:8090/openai",
		"HOTCELL_ANTHROPIC_BASE_URL": "http://gw.test:8090/anthropic",
		"HOTCELL_OTHER_BASE_URL":     "http://gw.test:8090/other",
	}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s: got %q, want %q", k, vars[k], v)
		}
	}
	for _, k := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HOTCELL_OTHER_TOKEN"} {
		if !strings.HasPrefix(vars[k], tokenPrefix) {
			t.Errorf("%s: got %q, want a gateway token", k, vars[k])
		}
	}
	if vars["OPENAI_API_KEY"] != vars["HOTCELL_OPENAI_TOKEN"] {
		t.Error("OPENAI_API_KEY and HOTCELL_OPENAI_TOKEN differ")
	}
	for k, v := range vars {
		if strings.Contains(v, gatewaytest.OpenAIKey) || strings.Contains(v, gatewaytest.AnthropicKey) {
			t.Errorf("%s holds a real key", k)
		}
	}
	if err := e.g.Validate("gateway", []string{"openai", "nope"}); err == nil || !strings.Contains(err.Error(), "gateway[1]") {
		t.Errorf("Validate of an unknown provider: got %v, want an error naming gateway[1]", err)
	}
	if err := e.g.Validate("gateway", []string{"openai", "openai"}); err == nil {
		t.Error("Validate of a duplicate: got nil error")
	}
}

func TestProxyJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	vars := e.grant("sb-1", "openai", "anthropic")

	resp, body := e.call("/openai/chat/completions?x=1", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{"model":"m","messages":[]}`)
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from the fake upstream") {
		t.Fatalf("openai: got %d %s", resp.StatusCode, body)
	}
	got, _ := e.up.Last()
	if got.Path != "/v1/chat/completions" || got.RawQuery != "x=1" {
		t.Errorf("upstream path: got %s?%s, want /v1/chat/completions?x=1", got.Path, got.RawQuery)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer "+gatewaytest.OpenAIKey {
		t.Errorf("upstream Authorization: got %q, want the real key", a)
	}
	if u := e.usage("sb-1", "openai"); u.Requests != 1 || u.InputTokens != 11 || u.OutputTokens != 7 || u.TotalTokens != 18 || u.BytesIn != 27 || u.BytesOut != int64(len(body)) {
		t.Errorf("openai usage: got %+v", u)
	}

	// Anthropic's SDK sends x-api-key; the gateway swaps it and drops any
	// Authorization the sandbox sent along.
	resp, body = e.call("/anthropic/v1/messages", "X-Api-Key", vars["ANTHROPIC_API_KEY"], `{"model":"m"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("anthropic: got %d %s", resp.StatusCode, body)
	}
	got, _ = e.up.Last()
	if got.Header.Get("X-Api-Key") != gatewaytest.AnthropicKey || got.Header.Get("Authorization") != "" {
		t.Errorf("anthropic upstream headers: got %v", got.Header)
	}
	if u := e.usage("sb-1", "anthropic"); u.InputTokens != 25 || u.OutputTokens != 15 || u.TotalTokens != 40 {
		t.Errorf("anthropic usage: got %+v", u)
	}
	for _, r := range e.up.Requests() {
		for h, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, tokenPrefix) {
					t.Errorf("upstream got a sandbox token in %s", h)
				}
			}
		}
	}
	// The upstream's own errors pass through as they are.
	resp, body = e.call("/openai/error/500", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`)
	if resp.StatusCode != 500 || !strings.Contains(body, "fake upstream error") {
		t.Errorf("upstream 500: got %d %s", resp.StatusCode, body)
	}
}

// TestProxyStreams reads the first events of a streamed answer while the
// upstream still holds back its last one: nothing is buffered.
func TestProxyStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	vars := e.grant("sb-1", "openai", "anthropic")
	for _, tc := range []struct {
		path, header, value, body string
		in, out, total            int64
	}{
		{"/openai/chat/completions", "Authorization", "Bearer " + vars["OPENAI_API_KEY"], `{"stream":true,"stream_options":{"include_usage":true}}`, 11, 7, 18},
		{"/anthropic/v1/messages", "X-Api-Key", vars["ANTHROPIC_API_KEY"], `{"stream":true}`, 25, 15, 40},
	} {
		held, release := e.up.Hold()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set(tc.header, tc.value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("%s: content type %q", tc.path, ct)
		}
		<-held
		br := bufio.NewReader(resp.Body)
		var events int
		for events < gatewaytest.StreamChunks {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: read before release: %v", tc.path, err)
			}
			if strings.HasPrefix(line, "data: ") {
				events++
			}
		}
		release()
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if !strings.Contains(string(rest), "last") && !strings.Contains(string(rest), "message_stop") {
			t.Errorf("%s: end of stream missing: %q", tc.path, rest)
		}
		u := e.usage("sb-1", strings.Split(tc.path, "/")[1])
		if u.InputTokens != tc.in || u.OutputTokens != tc.out || u.TotalTokens != tc.total {
			t.Errorf("%s: usage got %+v, want %d/%d/%d", tc.path, u, tc.in, tc.out, tc.total)
		}
	}
}

func TestProxyRefusesBadTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	a := e.grant("sb-a", "openai", "anthropic")
	b := e.grant("sb-b", "openai")
	gone := e.grant("sb-gone", "openai")
	revoked := e.grant("sb-rev", "openai")
	if err := e.g.Forget(t.Context(), "sb-gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.g.Revoke(t.Context(), "sb-rev", "openai"); err != nil {
		t.Fatal(err)
	}
	rotated := a["OPENAI_API_KEY"]
	cred, err := e.g.Rotate(t.Context(), "sb-a", "openai")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, header, value string }{
		{"no token", "/openai/chat/completions", "", ""},
		{"wrong token", "/openai/chat/completions", "Authorization", "Bearer hcgw_wrong"},
		{"real key", "/openai/chat/completions", "Authorization", "Bearer " + gatewaytest.OpenAIKey},
		{"not bearer", "/openai/chat/completions", "Authorization", b["OPENAI_API_KEY"]},
		{"destroyed sandbox", "/openai/chat/completions", "Authorization", "Bearer " + gone["OPENAI_API_KEY"]},
		{"revoked provider", "/openai/chat/completions", "Authorization", "Bearer " + revoked["OPENAI_API_KEY"]},
		{"rotated away", "/openai/chat/completions", "Authorization", "Bearer " + rotated},
		{"other provider's token", "/openai/chat/completions", "Authorization", "Bearer " + a["ANTHROPIC_API_KEY"]},
		{"token for a provider not granted", "/anthropic/v1/messages", "X-Api-Key", b["OPENAI_API_KEY"]},
	} {
		resp, body := e.call(tc.path, tc.header, tc.value, `{}`)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"unauthenticated"`) {
			t.Errorf("%s: got %d %s, want 401", tc.name, resp.StatusCode, body)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
	resp, body := e.call("/nope/x", "Authorization", "Bearer "+b["OPENAI_API_KEY"], `{}`)
	if resp.StatusCode != 404 {
		t.Errorf("unknown provider: got %d %s", resp.StatusCode, body)
	}
	if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+cred.Token, `{}`); resp.StatusCode != 200 {
		t.Errorf("rotated token: got %d %s", resp.StatusCode, body)
	}
}

// TestProxyPaths sends raw request lines, which no client would clean up.
func TestProxyPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	vars := e.grant("sb-1", "openai")
	raw := func(target string) int {
		c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+vars["OPENAI_API_KEY"]+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{
		"/openai/../secret", "/openai/v1/../../secret", "/openai/%2e%2e/secret", "/openai/%2E%2e/x",
		"/openai/a%2fb", "/openai/a%5cb", "/openai/./models", "/openai/%252e%252e/x", "/openai/a%00b",
	} {
		if got := raw(p); got != http.StatusBadRequest {
			t.Errorf("%s: got %d, want 400", p, got)
		}
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
	// An absolute-form request target names another host: the gateway
	// still only talks to the provider's upstream.
	if got := raw("http://169.254.169.254/openai/models"); got != http.StatusOK {
		t.Errorf("absolute-form target: got %d, want 200 from the upstream", got)
	}
	if got := raw("/openai/models"); got != 200 {
		t.Errorf("/openai/models: got %d", got)
	}
	if r, _ := e.up.Last(); r.Path != "/v1/models" {
		t.Errorf("upstream path: got %s", r.Path)
	}
}

func TestProxyBudgets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mod    func(*config.Provider)
		budget string
		ok     int
	}{
		{"requests", func(p *config.Provider) { p.BudgetRequests = 2 }, "requests", 2},
		{"tokens", func(p *config.Provider) { p.BudgetTokens = 20 }, "tokens", 2}, // 18 per answer: the 2nd starts under 20
		{"rate", func(p *config.Provider) { p.RatePerMinute = 3 }, "rate", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.mod, nil)
			vars := e.grant("sb-1", "openai")
			other := e.grant("sb-2", "openai")
			for i := range tc.ok {
				if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
					t.Fatalf("request %d: got %d %s", i, resp.StatusCode, body)
				}
			}
			resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`)
			var doc struct {
				Error struct{ Code, Budget string } `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &doc)
			if resp.StatusCode != http.StatusTooManyRequests || doc.Error.Budget != tc.budget {
				t.Fatalf("over budget: got %d %s, want 429 naming %s", resp.StatusCode, body, tc.budget)
			}
			if tc.budget == "rate" && resp.Header.Get("Retry-After") == "" {
				t.Error("rate limited without Retry-After")
			}
			if n := len(e.up.Requests()); n != tc.ok {
				t.Errorf("upstream got %d requests, want %d", n, tc.ok)
			}
			if u := e.usage("sb-1", "openai"); u.Requests != int64(tc.ok) || u.Rejected != 1 {
				t.Errorf("usage: got %+v", u)
			}
			// Budgets are per sandbox.
			if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+other["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
				t.Errorf("another sandbox: got %d %s", resp.StatusCode, body)
			}
		})
	}
}

func TestProxyUpstreamFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *config.Provider) { p.Timeout = "300ms" }, nil)
	vars := e.grant("sb-1", "openai")
	auth := "Bearer " + vars["OPENAI_API_KEY"]
	resp, body := e.call("/openai/slow", "Authorization", auth, `{}`)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, "did not answer within 300ms") {
		t.Errorf("slow upstream: got %d %s, want 504", resp.StatusCode, body)
	}

	// A client that hangs up cancels the upstream request.
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/openai/wait-cancel", nil)
	req.Header.Set("Authorization", auth)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	r2.Body.Close()
	select {
	case <-e.up.Canceled():
	case <-time.After(10 * time.Second):
		t.Error("the upstream request was not canceled when the client hung up")
	}

	e.up.Close()
	resp, body = e.call("/openai/chat/completions", "Authorization", auth, `{}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "cannot be reached") {
		t.Errorf("upstream down: got %d %s, want 502", resp.StatusCode, body)
	}
	if u := e.usage("sb-1", "openai"); u.Errors != 2 {
		t.Errorf("errors: got %+v, want 2 (timeout, down)", u)
	}
	logs := e.log.String()
	for _, secret := range []string{gatewaytest.OpenAIKey, gatewaytest.AnthropicKey, vars["OPENAI_API_KEY"], tokenPrefix} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds a secret (%.8s...)", secret)
		}
	}
	if !strings.Contains(logs, "gateway request") || !strings.Contains(logs, "sandbox=sb-1") {
		t.Errorf("no audit line in the log:\n%s", logs)
	}
}

func TestProxySourceAddress(t *testing.T) {
	t.Parallel()
	owner := "sb-b"
	e := newEnv(t, nil, func(o *Options) {
		o.Subnet = netip.MustParsePrefix("127.0.0.0/8")
		o.SandboxAt = func(a netip.Addr) (string, bool) { return owner, true }
	})
	a := e.grant("sb-a", "openai")
	if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+a["OPENAI_API_KEY"], `{}`); resp.StatusCode != 401 || !strings.Contains(body, "another sandbox") {
		t.Errorf("token from another sandbox's address: got %d %s", resp.StatusCode, body)
	}
	owner = "sb-a" // no request is in flight: the test server is idle
	if resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+a["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
		t.Errorf("token from its own sandbox: got %d %s", resp.StatusCode, body)
	}

	// From outside the sandbox network only the host's own addresses may
	// call: here the test client's 127.0.0.1 is outside 10.0.0.0/8 and
	// counts as another machine.
	host := netip.MustParseAddr("10.0.0.1")
	e2 := newEnv(t, nil, func(o *Options) {
		o.Subnet = netip.MustParsePrefix("10.0.0.0/8")
		o.HostAddr = host
		o.SandboxAt = func(a netip.Addr) (string, bool) { return "sb-a", true }
		o.IsHostAddr = func(a netip.Addr) bool { return a == host }
	})
	a2 := e2.grant("sb-a", "openai")
	if resp, body := e2.call("/openai/chat/completions", "Authorization", "Bearer "+a2["OPENAI_API_KEY"], `{}`); resp.StatusCode != 401 {
		t.Errorf("token from outside the sandbox network: got %d %s, want 401", resp.StatusCode, body)
	}
	if !e2.g.hostAddr(netip.MustParseAddr("10.0.0.1")) || e2.g.hostAddr(netip.MustParseAddr("192.0.2.77")) {
		t.Error("IsHostAddr not consulted")
	}
	e4 := newEnv(t, nil, func(o *Options) {
		o.Subnet = netip.MustParsePrefix("10.0.0.0/8")
		o.SandboxAt = func(a netip.Addr) (string, bool) { return "sb-a", true }
	})
	a4 := e4.grant("sb-a", "openai")
	if resp, body := e4.call("/openai/chat/completions", "Authorization", "Bearer "+a4["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
		t.Errorf("token from the host's loopback, outside the sandbox network: got %d %s, want 200", resp.StatusCode, body)
	}
	e3 := newEnv(t, nil, func(o *Options) {
		o.Subnet = netip.MustParsePrefix("127.0.0.0/8")
		o.HostAddr = netip.MustParseAddr("127.0.0.1")
		o.SandboxAt = func(a netip.Addr) (string, bool) { return "", false }
	})
	a3 := e3.grant("sb-a", "openai")
	if resp, body := e3.call("/openai/chat/completions", "Authorization", "Bearer "+a3["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
		t.Errorf("token from the host's own address: got %d %s, want 200", resp.StatusCode, body)
	}
}

// TestProxyPodAddress: with SandboxAddr (the Kubernetes driver's pods) a
// token is taken only from its own sandbox's address or the host's: a
// neighbour holding it, a sandbox with no running box, a failed look-up
// and any other address are refused.
func TestProxyPodAddress(t *testing.T) {
	t.Parallel()
	client := netip.MustParseAddr("127.0.0.1") // the test client's address
	pods := map[string]netip.Addr{"sb-a": netip.MustParseAddr("10.244.0.7"), "sb-b": client}
	var mu sync.Mutex // the handler's goroutine against the test's
	var lookups []string
	hostIsClient := false
	e := newEnv(t, nil, func(o *Options) {
		o.SandboxAddr = func(_ context.Context, id string) (netip.Addr, error) {
			mu.Lock()
			defer mu.Unlock()
			lookups = append(lookups, id)
			if id == "sb-err" {
				return netip.Addr{}, errors.New("the API server is away")
			}
			return pods[id], nil
		}
		o.IsHostAddr = func(a netip.Addr) bool { mu.Lock(); defer mu.Unlock(); return hostIsClient && a == client }
	})
	a := e.grant("sb-a", "openai")
	b := e.grant("sb-b", "openai")
	gone := e.grant("sb-gone", "openai")
	bad := e.grant("sb-err", "openai")
	post := func(tok string) (int, string) {
		resp, body := e.call("/openai/chat/completions", "Authorization", "Bearer "+tok, `{}`)
		return resp.StatusCode, body
	}
	// No request is in flight between the calls: the test server is idle.
	if st, body := post(a["OPENAI_API_KEY"]); st != 401 || !strings.Contains(body, "another sandbox") {
		t.Errorf("sb-a's token from sb-b's pod: got %d %s, want 401", st, body)
	}
	if st, body := post(b["OPENAI_API_KEY"]); st != 200 {
		t.Errorf("sb-b's token from its own pod: got %d %s, want 200", st, body)
	}
	if st, body := post(gone["OPENAI_API_KEY"]); st != 401 {
		t.Errorf("token of a sandbox with no running pod: got %d %s, want 401", st, body)
	}
	if st, body := post(bad["OPENAI_API_KEY"]); st != 401 {
		t.Errorf("token whose sandbox's address cannot be looked up: got %d %s, want 401", st, body)
	}
	mu.Lock()
	pods["sb-b"] = netip.MustParseAddr("10.244.0.8") // sb-b's pod was made anew
	mu.Unlock()
	if st, body := post(b["OPENAI_API_KEY"]); st != 401 {
		t.Errorf("sb-b's token from its old pod's address: got %d %s, want 401", st, body)
	}
	mu.Lock()
	if want := []string{"sb-a", "sb-b", "sb-gone", "sb-err", "sb-b"}; !slices.Equal(lookups, want) {
		t.Errorf("look-ups: got %v, want %v", lookups, want)
	}
	hostIsClient = true
	mu.Unlock()
	if st, body := post(a["OPENAI_API_KEY"]); st != 200 {
		t.Errorf("sb-a's token from the host's own address: got %d %s, want 200", st, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lookups) != 5 {
		t.Errorf("a call from the host looked up its sandbox: %v", lookups)
	}
}

// TestRestart: tokens and usage survive a new Gateway on the same store,
// and the tokens of a provider dropped from the config are revoked.
func TestRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *config.Provider) { p.BudgetRequests = 1 }, nil)
	vars := e.grant("sb-1", "openai", "anthropic")
	if resp, _ := e.call("/openai/chat/completions", "Authorization", "Bearer "+vars["OPENAI_API_KEY"], `{}`); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if err := e.g.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	ps := providers(e.up, func(p *config.Provider) { p.BudgetRequests = 1 })[:1] // anthropic removed
	g2, err := New(t.Context(), Options{Providers: ps, Getenv: getenv, Store: e.st, SandboxURL: "http://x", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g2.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/openai/chat/completions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+vars["OPENAI_API_KEY"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after restart: got %d, want 429 (the budget was used before)", resp.StatusCode)
	}
	toks, _ := e.st.ListGatewayTokens(t.Context())
	if len(toks) != 1 || toks[0].Provider != "openai" {
		t.Errorf("tokens after the provider was removed: got %+v", toks)
	}
}

func TestConfigKeyMissing(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Options{Providers: []config.Provider{{Name: "x", Kind: "openai", BaseURL: "http://127.0.0.1:1", KeyEnv: "HOTCELL_TEST_UNSET_KEY"}}, Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "HOTCELL_TEST_UNSET_KEY") {
		t.Errorf("got %v, want an error naming the variable", err)
	}
	f := filepath.Join(t.TempDir(), "key")
	os.WriteFile(f, []byte("  sk-file-key\n"), 0o600)
	g, err := New(t.Context(), Options{Providers: []config.Provider{{Name: "x", Kind: "openai", BaseURL: "http://127.0.0.1:1", KeyFile: f}}})
	if err != nil {
		t.Fatal(err)
	}
	if v := *g.providers["x"].keyValue.Load(); v != "Bearer sk-file-key" {
		t.Errorf("key from file: got %q", v)
	}
}

// TestReloadKeys: a reload swaps in the key its file now holds; one that
// cannot be read changes nothing; other changes are only reported.
func TestReloadKeys(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "openai.key")
	if err := os.WriteFile(f, []byte(gatewaytest.OpenAIKey), 0o600); err != nil {
		t.Fatal(err)
	}
	fileKey := func(p *config.Provider) {
		if p.Name == "openai" {
			p.KeyEnv, p.KeyFile = "", f
		}
	}
	e := newEnv(t, fileKey, nil)
	vars := e.grant("sb-1", "openai")
	auth := "Bearer " + vars["OPENAI_API_KEY"]
	const rotated = "sk-fake-openai-ROTATED-1b2c"
	os.WriteFile(f, []byte(rotated+"\n"), 0o600)
	if resp, _ := e.call("/openai/chat/completions", "Authorization", auth, `{}`); resp.StatusCode != 200 {
		t.Fatalf("before the reload: got %d, want 200 with the key read at start", resp.StatusCode)
	}
	e.up.SetOpenAIKey(rotated)
	res, err := e.g.Reload(providers(e.up, fileKey))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Changed, []string{"openai"}) || len(res.NeedsRestart) != 0 {
		t.Errorf("reload: got %+v, want openai changed and nothing else", res)
	}
	if resp, body := e.call("/openai/chat/completions", "Authorization", auth, `{}`); resp.StatusCode != 200 {
		t.Errorf("after the reload: got %d %s", resp.StatusCode, body)
	}
	if last, _ := e.up.Last(); last.Header.Get("Authorization") != "Bearer "+rotated {
		t.Errorf("upstream got %q, want the new key", last.Header.Get("Authorization"))
	}
	// A key file gone: an error naming the provider, the keys in use stay.
	os.Remove(f)
	changed := providers(e.up, func(p *config.Provider) { fileKey(p); p.BudgetTokens = 5 })
	if _, err := e.g.Reload(changed); err == nil || !strings.Contains(err.Error(), `"openai"`) {
		t.Errorf("reload with the key file gone: got %v, want an error naming openai", err)
	}
	if resp, _ := e.call("/openai/chat/completions", "Authorization", auth, `{}`); resp.StatusCode != 200 {
		t.Errorf("after a failed reload: got %d, want 200 with the key in use", resp.StatusCode)
	}
	os.WriteFile(f, []byte(rotated), 0o600)
	res, err = e.g.Reload(changed[:2])
	if err != nil {
		t.Fatal(err)
	}
	// The budget changed for openai and anthropic; other was removed.
	if len(res.Changed) != 0 || len(res.NeedsRestart) != 3 || !strings.Contains(strings.Join(res.NeedsRestart, ";"), "other was removed") {
		t.Errorf("reload with budgets changed and a provider removed: got %+v, want all three listed as needing a restart", res)
	}
	if logs := e.log.String(); strings.Contains(logs, rotated) {
		t.Error("the log holds the new key")
	}
}
