package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/agentconn/agentconntest"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// agentManager knows one running sandbox whose agent is a test's handler on
// a real agent channel.
type agentManager struct {
	Manager // unused methods panic
	sb      wire.Sandbox
	conn    *agentconn.Conn
}

func (m *agentManager) Get(_ context.Context, id string) (wire.Sandbox, error) {
	if id != m.sb.ID {
		return wire.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return m.sb, nil
}

func (m *agentManager) Agent(_ context.Context, id string) (*agentconn.Conn, error) {
	if id != m.sb.ID {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return m.conn, nil
}

const hostileID = "sb-hostile0000"

// fakeAgent connects h as the agent of a sandbox over the channel the
// daemon uses (a unix socket agentconn listens on, yamux, HTTP/1.1), so a
// test can answer the daemon as code in the sandbox that replaced the agent
// could. h serves every path but /v1/health.
func fakeAgent(t *testing.T, h http.Handler) *agentconn.Conn {
	t.Helper()
	// Not t.TempDir: a unix socket path must stay short.
	dir, err := os.MkdirTemp("", "hc-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	conn, err := agentconn.Listen(hostileID, sock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	agentconntest.Serve(t, nc, agentconntest.Healthy(wire.AgentHealth{Version: "hostile", PID: 1}, h))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatalf("the fake agent did not connect: %v", err)
	}
	return conn
}

// hostileServer is the API in front of one sandbox whose agent is h.
func hostileServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	m := &agentManager{sb: wire.Sandbox{ID: hostileID, State: wire.StateRunning}, conn: fakeAgent(t, h)}
	s := New(Options{Manager: m, Token: "api-token", PreviewDomain: "preview.localhost", Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// rawAnswer writes a response byte for byte on the hijacked stream, with
// any status line, as net/http's server never would.
func rawAnswer(statusLine, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		defer c.Close()
		fmt.Fprintf(buf, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", statusLine, len(body), body)
		_ = buf.Flush()
	})
}

func apiGet(t *testing.T, srv *httptest.Server, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer api-token")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read the answer: %v", path, err)
	}
	return resp, string(body)
}

// TestHostileAgentStatus: whatever status an agent answers with, the API
// answers with one its error code allows, never 401, and never panics.
func TestHostileAgentStatus(t *testing.T) {
	t.Parallel()
	doc := func(code, msg string) string {
		return fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, msg)
	}
	tests := []struct {
		name, statusLine, body string
		status                 int
		code                   string
	}{
		{"below 100", "099 Odd", doc("not_found", "no such file"), 404, "not_found"},
		{"unauthenticated", "401 Unauthorized", doc("unauthenticated", "your token is wrong"), 502, "internal"},
		{"401 with another code", "401 Unauthorized", doc("conflict", "busy"), 409, "conflict"},
		{"beyond 599", "999 Odd", doc("unavailable", "x"), 503, "unavailable"},
		{"not a document", "401 Unauthorized", "nope", 502, "internal"},
		{"unknown code", "418 Teapot", doc("teapot", "x"), 500, "internal"},
		{"a 5xx its code allows", "502 Bad Gateway", doc("unavailable", "nothing listens"), 502, "unavailable"},
	}
	// Each route reaches the agent a different way: forward, forward's
	// JSON, and the reverse proxy of tunnels and terminals.
	routes := []struct {
		name, path string
		hdr        map[string]string
	}{
		{"file", "/v1/sandboxes/" + hostileID + "/files?path=/workspace/a", nil},
		{"port wait", "/v1/sandboxes/" + hostileID + "/ports/8000/wait", nil},
		{"tunnel", "/v1/sandboxes/" + hostileID + "/ports/8000/tcp", map[string]string{
			"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := hostileServer(t, rawAnswer(tt.statusLine, tt.body))
			for _, rt := range routes {
				resp, body := apiGet(t, srv, rt.path, rt.hdr)
				var b errdefs.Body
				if err := json.Unmarshal([]byte(body), &b); err != nil {
					t.Errorf("%s: not an error document: %d %q", rt.name, resp.StatusCode, body)
					continue
				}
				if resp.StatusCode != tt.status || b.Error.Code != tt.code {
					t.Errorf("%s: got %d %q, want %d %q (%s)", rt.name, resp.StatusCode, b.Error.Code, tt.status, tt.code, body)
				}
			}
		})
	}
}

// TestHostileAgentPreviewStatus: a preview passes the app's status, but
// not one that is none.
func TestHostileAgentPreviewStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		statusLine string
		want       int // 0: any 5xx
	}{
		{"401 Unauthorized", 401}, // the app's own login, on its own page
		{"099 Odd", 503},
		{"1000 Odd", 0}, // not a status line at all: the transport refuses it
	} {
		srv := hostileServer(t, rawAnswer(tt.statusLine, "{}"))
		for _, host := range []string{"", "8000-" + hostileID + ".preview.localhost"} {
			path := "/v1/sandboxes/" + hostileID + "/ports/8000/http/x"
			if host != "" {
				path = "/x"
			}
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer api-token")
			req.Host = host
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("%s (host %q): %v", tt.statusLine, host, err)
			}
			resp.Body.Close()
			if tt.want != 0 && resp.StatusCode != tt.want || tt.want == 0 && resp.StatusCode/100 != 5 {
				t.Errorf("%s (host %q): got %d, want %d (0: any 5xx)", tt.statusLine, host, resp.StatusCode, tt.want)
			}
		}
	}
}

// headerAgent records the headers of every request it gets and answers
// with cookies and a redirect, as an app or a hostile agent might.
type headerAgent struct {
	mu   sync.Mutex
	seen []http.Header
}

func (a *headerAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Header.Clone())
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: "agent", Value: "planted", Path: "/"})
	w.Header().Set("Location", "https://elsewhere.invalid/")
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

func (a *headerAgent) last(t *testing.T) http.Header {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		t.Fatal("the agent got no request")
	}
	return a.seen[len(a.seen)-1]
}

// TestProxyHeaders: the API's credentials (bearer token, cookies, preview
// token) never reach the sandbox, and the sandbox cannot set cookies or
// redirect on the API's origin. Only the preview by host name, which is the
// app's own origin, passes the app's cookies both ways.
func TestProxyHeaders(t *testing.T) {
	t.Parallel()
	a := &headerAgent{}
	srv := hostileServer(t, a)
	in := map[string]string{
		"Cookie":                  "session=client-secret; " + wire.PreviewTokenCookie + "=tok",
		wire.PreviewTokenHeader:   "tok",
		"X-Something-Else-Passes": "yes",
	}
	tests := []struct {
		name, path, host string
		cookieIn         string // the Cookie the agent should see
		setCookieOut     bool
		passesOther      bool // X-Something-Else-Passes reaches the agent
	}{
		{"file", "/v1/sandboxes/" + hostileID + "/files?path=/workspace/a", "", "", false, false},
		{"preview by path", "/v1/sandboxes/" + hostileID + "/ports/8000/http/x", "", "", false, true},
		{"preview by host", "/x", "8000-" + hostileID + ".preview.localhost", "session=client-secret", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+tt.path, nil)
			req.Header.Set("Authorization", "Bearer api-token")
			for k, v := range in {
				req.Header.Set(k, v)
			}
			req.Host = tt.host
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, body)
			}
			got := a.last(t)
			if v := got.Get("Authorization"); v != "" {
				t.Errorf("the agent got Authorization %q", v)
			}
			if v := got.Get(wire.PreviewTokenHeader); v != "" {
				t.Errorf("the agent got %s %q", wire.PreviewTokenHeader, v)
			}
			if v := strings.Join(got.Values("Cookie"), "; "); v != tt.cookieIn {
				t.Errorf("the agent got Cookie %q, want %q", v, tt.cookieIn)
			}
			if v := got.Get("X-Something-Else-Passes"); (v != "") != tt.passesOther {
				t.Errorf("the agent got X-Something-Else-Passes %q, want it passed: %v", v, tt.passesOther)
			}
			if v := resp.Header.Values("Set-Cookie"); (len(v) > 0) != tt.setCookieOut {
				t.Errorf("the client got Set-Cookie %q, want passed: %v", v, tt.setCookieOut)
			}
			if v := resp.Header.Get("Location"); v != "" && tt.name == "file" {
				t.Errorf("the client got Location %q from a file read", v)
			}
		})
	}
}

// TestHostileAgentPageOnAPIOrigin: an agent that answers a file read (or a
// process log) as an HTML page with a script must not get that script run
// on the API's origin, which is also the web console's, whose session
// cookie the browser sends there. Every API answer says "sandbox" in its
// Content-Security-Policy, so a browser that opens it gives it an opaque
// origin and no scripts; the preview by path keeps its own policy, which
// lets the app's scripts run (without the API's origin).
func TestHostileAgentPageOnAPIOrigin(t *testing.T) {
	t.Parallel()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<script>fetch("/v1/session").then(r=>r.json()).then(s=>fetch("/v1/sandboxes",{method:"POST",headers:{"X-Hotcell-CSRF":s.csrf}}))</script>`)
	})
	srv := hostileServer(t, page)
	for _, path := range []string{
		"/v1/sandboxes/" + hostileID + "/files?path=/workspace/index.html",
		"/v1/sandboxes/" + hostileID + "/processes/p1/logs",
		"/v1/sandboxes/no-such/files?path=<script>",
	} {
		resp, _ := apiGet(t, srv, path, nil)
		csp := resp.Header.Values("Content-Security-Policy")
		if len(csp) != 1 || csp[0] != apiCSP {
			t.Errorf("GET %s (%d): Content-Security-Policy %q, want only %q", path, resp.StatusCode, csp, apiCSP)
		}
		if v := resp.Header.Get("X-Content-Type-Options"); v != "nosniff" {
			t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", path, v)
		}
	}
	resp, _ := apiGet(t, srv, "/v1/sandboxes/"+hostileID+"/ports/8000/http/", nil)
	if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || csp[0] != PreviewPathCSP {
		t.Errorf("preview by path: Content-Security-Policy %q, want only %q (its scripts run, in an opaque origin)", csp, PreviewPathCSP)
	}
}
