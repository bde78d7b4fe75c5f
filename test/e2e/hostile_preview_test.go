package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestHostilePreviewServiceWorker: an app in a sandbox answers its service
// worker script with Service-Worker-Allowed: /, which on a preview by path
// would let the worker control the whole API origin. By path the header is
// dropped, the answer gets an opaque origin (CSP sandbox) and a browser's
// service worker fetch is refused; by host name, an origin of its own,
// the app's answer passes as it is.
func TestHostilePreviewServiceWorker(t *testing.T) {
	d := sharedDaemon(t)
	// The base image, as the ports tests use for their background servers.
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	ctx := t.Context()
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/portsrv"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/workspace/portsrv", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	startBackground(t, d, sb.ID, "/workspace/portsrv http 8002")
	if _, err := d.C.WaitPort(ctx, sb.ID, 8002, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pv, err := d.C.PreviewURL(ctx, sb.ID, 8002)
	if err != nil {
		t.Fatal(err)
	}
	hc := loopbackClient(d)
	tok := map[string]string{"X-Hotcell-Preview-Token": pv.Token}
	byPath := "http://" + d.Addr + "/v1/sandboxes/" + sb.ID + "/ports/8002/http/sw.js"
	_, port, _ := net.SplitHostPort(d.Addr)
	byHost := "http://8002-" + sb.ID + ".preview.localhost:" + port + "/sw.js"

	// The premise: the app does send the header (seen by host name).
	code, body, resp := get(t, hc, byHost, map[string]string{"X-Hotcell-Preview-Token": pv.Token, "Service-Worker": "script"})
	if code != http.StatusOK || resp.Header.Get("Service-Worker-Allowed") != "/" || !strings.Contains(body, "addEventListener") {
		t.Fatalf("by host: got %d %q with Service-Worker-Allowed %q; want the app's script and header", code, body, resp.Header.Get("Service-Worker-Allowed"))
	}

	code, body, resp = get(t, hc, byPath, tok)
	if code != http.StatusOK || !strings.Contains(body, "addEventListener") {
		t.Fatalf("by path: got %d %q, want the app's answer", code, body)
	}
	if v := resp.Header.Values("Service-Worker-Allowed"); len(v) != 0 {
		t.Errorf("by path: Service-Worker-Allowed %q passed through", v)
	}
	if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || csp[0] != api.PreviewPathCSP {
		t.Errorf("by path: Content-Security-Policy %q, want %q", csp, api.PreviewPathCSP)
	}

	withSW := map[string]string{"X-Hotcell-Preview-Token": pv.Token, "Service-Worker": "script"}
	code, body, _ = get(t, hc, byPath, withSW)
	if code != http.StatusForbidden || !strings.Contains(body, "service worker") {
		t.Errorf("by path, service worker fetch: got %d %s, want 403 saying why", code, body)
	}
	// The sandbox and its preview still work after the refusals.
	if code, _, _ := get(t, hc, byPath, tok); code != http.StatusOK {
		t.Errorf("by path after the refusal: got %d, want 200", code)
	}
}

// startPortsrv uploads portsrv into sandbox id and serves HTTP on ports.
func startPortsrv(t *testing.T, d *testdaemon.Daemon, id string, ports ...int) {
	t.Helper()
	ctx := t.Context()
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/portsrv"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, id, "/workspace/portsrv", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		startBackground(t, d, id, fmt.Sprintf("/workspace/portsrv http %d", p))
		if _, err := d.C.WaitPort(ctx, id, p, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// do sends a request with the given headers and returns the status and body.
func do(t *testing.T, hc *http.Client, method, u, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return resp.StatusCode, readAll(resp)
}

// TestHostilePreviewCrossOrigin: every preview host name is the same site,
// so a page on one preview can make the browser send requests, with their
// cookies, to another. A preview token handed out for one port must not
// open another port of the same sandbox; a request let in by the preview
// cookie that changes state (POST) or opens a WebSocket must come from the
// preview's own origin, not from a neighbour sandbox's preview page. The
// same requests from the preview's own origin work, and so does the
// neighbour afterwards.
func TestHostilePreviewCrossOrigin(t *testing.T) {
	d := sharedDaemon(t)
	ctx := t.Context()
	image := testenv.BaseImage(t)
	victim := newSandbox(t, d, client.CreateSandboxRequest{Image: image})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{Image: image})
	startPortsrv(t, d, victim.ID, 8003, 8004)
	startPortsrv(t, d, neighbour.ID, 8003)
	hc := loopbackClient(d)
	_, daemonPort, _ := net.SplitHostPort(d.Addr)
	host := func(id string, port int) string {
		return fmt.Sprintf("%d-%s.preview.localhost:%s", port, id, daemonPort)
	}
	byPath := func(id string, port int) string {
		return fmt.Sprintf("http://%s/v1/sandboxes/%s/ports/%d/http/", d.Addr, id, port)
	}
	pv3, err := d.C.PreviewURL(ctx, victim.ID, 8003)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a token for one port does not open another", func(t *testing.T) {
		tok := map[string]string{"X-Hotcell-Preview-Token": pv3.Token}
		// The premise: the token opens its own port, by host and by path.
		for _, u := range []string{"http://" + host(victim.ID, 8003) + "/", byPath(victim.ID, 8003)} {
			if code, body := do(t, hc, "GET", u, "", tok); code != http.StatusOK || body != "portsrv 8003\n" {
				t.Fatalf("%s with its own token: got %d %q, want 200 from port 8003", u, code, body)
			}
		}
		other := "http://" + host(victim.ID, 8004) + "/"
		for name, c := range map[string]struct {
			u   string
			hdr map[string]string
		}{
			"header by host": {other, tok},
			"header by path": {byPath(victim.ID, 8004), tok},
			"query by host":  {other + "?hotcell_preview_token=" + url.QueryEscape(pv3.Token), nil},
			"query by path":  {byPath(victim.ID, 8004) + "?hotcell_preview_token=" + url.QueryEscape(pv3.Token), nil},
			"cookie by host": {other, map[string]string{"Cookie": "hotcell_preview_token=" + pv3.Token}},
		} {
			if code, body := do(t, hc, "GET", c.u, "", c.hdr); code != http.StatusUnauthorized {
				t.Errorf("port 8004 with port 8003's token (%s): got %d %q, want 401", name, code, body)
			}
		}
		// Port 8004 serves, with a token of its own.
		pv4, err := d.C.PreviewURL(ctx, victim.ID, 8004)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := do(t, hc, "GET", other, "", map[string]string{"X-Hotcell-Preview-Token": pv4.Token}); code != http.StatusOK || body != "portsrv 8004\n" {
			t.Errorf("port 8004 with its own token: got %d %q, want 200", code, body)
		}
	})

	// The browser's cookie for the victim's preview, as its first visit
	// with the token in the query sets it.
	victimURL := "http://" + host(victim.ID, 8003)
	code, _, resp := get(t, hc, victimURL+"/?hotcell_preview_token="+url.QueryEscape(pv3.Token), nil)
	var cookie string
	for _, c := range resp.Cookies() {
		if c.Name == "hotcell_preview_token" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if code != http.StatusOK || cookie == "" {
		t.Fatalf("first visit with the query token: got %d, cookies %v; want 200 and the preview cookie", code, resp.Cookies())
	}
	neighbourOrigin := "http://" + host(neighbour.ID, 8003)

	t.Run("cookie POST needs the preview's own origin", func(t *testing.T) {
		for name, origin := range map[string]string{
			"neighbour's preview": neighbourOrigin,
			"other port":          "http://" + host(victim.ID, 8004),
			"no Origin":           "",
			"opaque origin":       "null",
		} {
			hdr := map[string]string{"Cookie": cookie}
			if origin != "" {
				hdr["Origin"] = origin
			}
			code, body := do(t, hc, "POST", victimURL+"/post", "forged "+name, hdr)
			if code != http.StatusForbidden || !strings.Contains(body, "Origin") {
				t.Errorf("POST with the cookie from %s: got %d %q, want 403 naming Origin", name, code, body)
			}
		}
		code, body := do(t, hc, "POST", victimURL+"/post", "same origin", map[string]string{"Cookie": cookie, "Origin": victimURL})
		if code != http.StatusOK || body != "ok" {
			t.Fatalf("POST with the cookie from the preview's own origin: got %d %q, want 200 ok", code, body)
		}
		// Only the same-origin POST reached the app.
		out := mustOK(t, run(t, d, victim.ID, "cat /tmp/portsrv-posts"), "read the posts")
		if out != "same origin\n" {
			t.Errorf("the app received %q, want only the same-origin POST", out)
		}
	})

	t.Run("cookie WebSocket needs the preview's own origin", func(t *testing.T) {
		for _, origin := range []string{neighbourOrigin, ""} {
			hdr := http.Header{"Cookie": {cookie}}
			if origin != "" {
				hdr.Set("Origin", origin)
			}
			ws, resp, err := websocket.Dial(ctx, "ws://"+host(victim.ID, 8003)+"/ws", &websocket.DialOptions{HTTPClient: hc, HTTPHeader: hdr})
			if err == nil {
				ws.CloseNow()
			}
			if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Errorf("WebSocket with the cookie from origin %q: got %v, %v; want 403", origin, resp, err)
			}
		}
		ws, _, err := websocket.Dial(ctx, "ws://"+host(victim.ID, 8003)+"/ws", &websocket.DialOptions{
			HTTPClient: hc, HTTPHeader: http.Header{"Cookie": {cookie}, "Origin": {victimURL}},
		})
		if err != nil {
			t.Fatalf("WebSocket with the cookie from the preview's own origin: %v", err)
		}
		defer ws.CloseNow()
		if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, data, err := ws.Read(ctx); err != nil || string(data) != "echo:hi" {
			t.Fatalf("echo: got %q, %v", data, err)
		}
		ws.Close(websocket.StatusNormalClosure, "")
	})

	// The neighbour's preview and the daemon still work.
	pvn, err := d.C.PreviewURL(ctx, neighbour.ID, 8003)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, hc, "GET", neighbourOrigin+"/", "", map[string]string{"X-Hotcell-Preview-Token": pvn.Token}); code != http.StatusOK || body != "portsrv 8003\n" {
		t.Errorf("the neighbour's preview afterwards: got %d %q, want 200", code, body)
	}
	mustOK(t, run(t, d, neighbour.ID, "true"), "exec in the neighbour")
}

// TestHostilePreviewTokenExpiry: a preview token leaked once (a shared
// link, a browser history, a proxy log) stops working when its
// preview_token_ttl has passed, in the header, the query or the cookie.
func TestHostilePreviewTokenExpiry(t *testing.T) {
	const ttl = 3 * time.Second
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--preview-token-ttl", ttl.String()}})
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	ctx := t.Context()
	hc := loopbackClient(d)
	_, daemonPort, _ := net.SplitHostPort(d.Addr)
	// Nothing listens on the port: a request the token lets in gets 502
	// from the proxy, one it does not gets 401.
	hostURL := fmt.Sprintf("http://8005-%s.preview.localhost:%s/", sb.ID, daemonPort)
	pathURL := fmt.Sprintf("http://%s/v1/sandboxes/%s/ports/8005/http/", d.Addr, sb.ID)

	// The premise: a fresh token works. A host too loaded to use it within
	// the TTL gets another try, but only when the TTL has really passed.
	var tok string
	var issued time.Time
	for try := 0; tok == ""; try++ {
		issued = time.Now()
		pv, err := d.C.PreviewURL(ctx, sb.ID, 8005)
		if err != nil {
			t.Fatal(err)
		}
		code, body := do(t, hc, "GET", hostURL, "", map[string]string{"X-Hotcell-Preview-Token": pv.Token})
		switch {
		case code == http.StatusBadGateway:
			tok = pv.Token
		case code == http.StatusUnauthorized && time.Since(issued) >= ttl && try < 5:
		default:
			t.Fatalf("a fresh token: got %d %q, want 502 (let in, nothing listening)", code, body)
		}
	}

	time.Sleep(time.Until(issued.Add(ttl + time.Second)))
	for name, c := range map[string]struct {
		u   string
		hdr map[string]string
	}{
		"header by host": {hostURL, map[string]string{"X-Hotcell-Preview-Token": tok}},
		"header by path": {pathURL, map[string]string{"X-Hotcell-Preview-Token": tok}},
		"query by host":  {hostURL + "?hotcell_preview_token=" + url.QueryEscape(tok), nil},
		"cookie by host": {hostURL, map[string]string{"Cookie": "hotcell_preview_token=" + tok}},
	} {
		if code, body := do(t, hc, "GET", c.u, "", c.hdr); code != http.StatusUnauthorized {
			t.Errorf("expired token (%s): got %d %q, want 401", name, code, body)
		}
	}
	mustOK(t, run(t, d, sb.ID, "true"), "exec after the refusals")
}
