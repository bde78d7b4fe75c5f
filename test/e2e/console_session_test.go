package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/wire"
)

// consoleCall is one request as a browser of the console would make it:
// the session cookie, and the Origin and CSRF headers if given.
type consoleCall struct {
	method, path string
	body         string
	cookie       *http.Cookie
	origin       string
	csrf         string
}

func (c consoleCall) do(t *testing.T, d *testdaemon.Daemon) (*http.Response, string) {
	t.Helper()
	var body *bytes.Reader
	if c.body != "" {
		body = bytes.NewReader([]byte(c.body))
	} else {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(t.Context(), c.method, "http://"+d.Addr+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	if c.csrf != "" {
		req.Header.Set(wire.ConsoleCSRFHeader, c.csrf)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	return resp, readAll(resp)
}

// consoleSignIn signs in with key and returns the session cookie and the
// answer.
func consoleSignIn(t *testing.T, d *testdaemon.Daemon, key string) (*http.Cookie, wire.Session) {
	t.Helper()
	b, _ := json.Marshal(wire.SignInRequest{Key: key})
	resp, body := consoleCall{method: "POST", path: "/v1/session", body: string(b), origin: "http://" + d.Addr}.do(t, d)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("sign in: %d %s", resp.StatusCode, body)
	}
	var sess wire.Session
	if err := json.Unmarshal([]byte(body), &sess); err != nil {
		t.Fatalf("sign in answer %q: %v", body, err)
	}
	for _, c := range resp.Cookies() {
		if c.Name == wire.ConsoleSessionCookie {
			return c, sess
		}
	}
	t.Fatalf("sign in set no %s cookie: %v", wire.ConsoleSessionCookie, resp.Header["Set-Cookie"])
	return nil, sess
}

// TestConsoleSession is the web console's sign-in against a real daemon,
// with the attacks a page of another origin can make on a signed-in
// browser: the cookie is HttpOnly and SameSite=Strict, a wrong key gets
// none, and a request the cookie authenticates is refused when it names
// another origin, or changes state without the CSRF token or without an
// Origin; WebSockets too. Revoking the key and signing out end the session.
func TestConsoleSession(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	self := "http://" + d.Addr
	const evil = "http://evil.example"

	name := keyName(t, "console")
	created, err := d.C.CreateAPIKey(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.C.DeleteAPIKey(t.Context(), name) })

	t.Run("wrong key", func(t *testing.T) {
		resp, body := consoleCall{method: "POST", path: "/v1/session", body: `{"key":"e2b_0000000000000000000000000000000000000000"}`, origin: self}.do(t, d)
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("sign in with a wrong key: %d, cookies %v, %s; want 401 and no cookie", resp.StatusCode, resp.Cookies(), body)
		}
		resp, body = consoleCall{method: "POST", path: "/v1/session", body: `{"key":""}`, origin: self}.do(t, d)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "key") {
			t.Errorf("sign in with no key: %d %s; want 400 naming key", resp.StatusCode, body)
		}
	})
	t.Run("sign in from another origin", func(t *testing.T) {
		b, _ := json.Marshal(wire.SignInRequest{Key: created.Key})
		resp, body := consoleCall{method: "POST", path: "/v1/session", body: string(b), origin: evil}.do(t, d)
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Errorf("sign in from %s: %d, cookies %v, %s; want 403 and no cookie", evil, resp.StatusCode, resp.Cookies(), body)
		}
	})

	ck, sess := consoleSignIn(t, d, created.Key)
	t.Run("cookie", func(t *testing.T) {
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" || ck.Secure {
			t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure over plain http", ck)
		}
		if ck.Value == created.Key || strings.Contains(ck.Value, created.Key) || len(ck.Value) < 32 {
			t.Errorf("cookie value %q: want a random session id, not the key", ck.Value)
		}
		if sess.CSRFToken == "" || sess.KeyName != name || sess.Admin {
			t.Errorf("session %+v: want a CSRF token, key name %q, not admin", sess, name)
		}
		if ttl := time.Until(sess.ExpiresAt); ttl < 11*time.Hour || ttl > 12*time.Hour {
			t.Errorf("session expires in %v, want the default 12h", ttl)
		}
	})

	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	execPath := "/v1/sandboxes/" + sb.ID + "/exec"
	execBody := `{"command":"echo console"}`
	for _, tc := range []struct {
		name       string
		call       consoleCall
		wantStatus int
	}{
		{"GET by cookie", consoleCall{method: "GET", path: "/v1/sandboxes/" + sb.ID, cookie: ck}, 200},
		{"GET by cookie from the console", consoleCall{method: "GET", path: "/v1/sandboxes/" + sb.ID, cookie: ck, origin: self}, 200},
		{"GET session", consoleCall{method: "GET", path: "/v1/session", cookie: ck, origin: self}, 200},
		{"GET from another origin", consoleCall{method: "GET", path: "/v1/session", cookie: ck, origin: evil}, 403},
		{"GET from an opaque origin", consoleCall{method: "GET", path: "/v1/sandboxes", cookie: ck, origin: "null"}, 403},
		{"POST without CSRF token", consoleCall{method: "POST", path: execPath, body: execBody, cookie: ck, origin: self}, 403},
		{"POST with a wrong CSRF token", consoleCall{method: "POST", path: execPath, body: execBody, cookie: ck, origin: self, csrf: sess.CSRFToken + "x"}, 403},
		{"POST from another origin", consoleCall{method: "POST", path: execPath, body: execBody, cookie: ck, origin: evil, csrf: sess.CSRFToken}, 403},
		{"POST without Origin", consoleCall{method: "POST", path: execPath, body: execBody, cookie: ck, csrf: sess.CSRFToken}, 403},
		{"DELETE without CSRF token", consoleCall{method: "DELETE", path: "/v1/sandboxes/" + sb.ID, cookie: ck, origin: self}, 403},
		{"POST from the console", consoleCall{method: "POST", path: execPath, body: execBody, cookie: ck, origin: self, csrf: sess.CSRFToken}, 200},
		{"no cookie", consoleCall{method: "GET", path: "/v1/sandboxes", origin: self}, 401},
		{"another session id", consoleCall{method: "GET", path: "/v1/sandboxes", cookie: &http.Cookie{Name: ck.Name, Value: "x" + ck.Value}}, 401},
		{"key management needs the token", consoleCall{method: "GET", path: "/v1/keys", cookie: ck}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := tc.call.do(t, d)
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("%s %s: %d %s; want %d", tc.call.method, tc.call.path, resp.StatusCode, body, tc.wantStatus)
			}
			if tc.wantStatus == 200 && tc.call.method == "POST" && !strings.Contains(body, `"stdout":"console\n"`) {
				t.Errorf("exec answered %s", body)
			}
		})
	}
	// The sandbox is still there: none of the refused calls reached it.
	if got, err := d.C.GetSandbox(t.Context(), sb.ID); err != nil || got.State != "running" {
		t.Errorf("after the refused calls: %v %v, want running", got.State, err)
	}

	t.Run("websocket", func(t *testing.T) {
		u := "ws://" + d.Addr + "/v1/sandboxes/" + sb.ID + "/exec?tty=true&command=echo+ws-ok"
		dial := func(origin string) (*websocket.Conn, *http.Response, error) {
			h := http.Header{}
			h.Set("Cookie", ck.Name+"="+ck.Value)
			if origin != "" {
				h.Set("Origin", origin)
			}
			return websocket.Dial(t.Context(), u, &websocket.DialOptions{HTTPHeader: h})
		}
		for _, origin := range []string{evil, ""} {
			c, resp, err := dial(origin)
			if err == nil {
				c.CloseNow()
				t.Errorf("terminal WebSocket by cookie with Origin %q was accepted", origin)
			} else if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Errorf("terminal WebSocket by cookie with Origin %q: %v, want 403", origin, err)
			}
		}
		c, _, err := dial(self)
		if err != nil {
			t.Fatalf("terminal WebSocket by cookie from the console: %v", err)
		}
		defer c.CloseNow()
		var out strings.Builder
		for !strings.Contains(out.String(), "ws-ok") {
			typ, data, err := c.Read(t.Context())
			if err != nil {
				t.Fatalf("read terminal: %v (so far %q)", err, out.String())
			}
			if typ == websocket.MessageBinary {
				out.Write(data)
			}
		}
	})

	t.Run("previews by path ignore the cookie", func(t *testing.T) {
		resp, body := consoleCall{method: "GET", path: "/v1/sandboxes/" + sb.ID + "/ports/8000/http/", cookie: ck, origin: self}.do(t, d)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("preview by path with only the console cookie: %d %s, want 401", resp.StatusCode, body)
		}
	})

	t.Run("sign out", func(t *testing.T) {
		ck2, sess2 := consoleSignIn(t, d, created.Key)
		resp, body := consoleCall{method: "DELETE", path: "/v1/session", cookie: ck2, origin: self}.do(t, d)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("sign out without the CSRF token: %d %s, want 403", resp.StatusCode, body)
		}
		resp, body = consoleCall{method: "DELETE", path: "/v1/session", cookie: ck2, origin: self, csrf: sess2.CSRFToken}.do(t, d)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("sign out: %d %s", resp.StatusCode, body)
		}
		cleared := false
		for _, c := range resp.Cookies() {
			cleared = cleared || c.Name == ck2.Name && c.MaxAge < 0
		}
		if !cleared {
			t.Errorf("sign out did not clear the cookie: %v", resp.Header["Set-Cookie"])
		}
		if resp, body := (consoleCall{method: "GET", path: "/v1/sandboxes", cookie: ck2}).do(t, d); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("after sign out: %d %s, want 401", resp.StatusCode, body)
		}
		// The other session of the same key is still signed in.
		if resp, body := (consoleCall{method: "GET", path: "/v1/session", cookie: ck}).do(t, d); resp.StatusCode != http.StatusOK {
			t.Errorf("the other session after this one signed out: %d %s, want 200", resp.StatusCode, body)
		}
	})

	t.Run("revoked key", func(t *testing.T) {
		if err := d.C.DeleteAPIKey(t.Context(), name); err != nil {
			t.Fatal(err)
		}
		resp, body := consoleCall{method: "GET", path: "/v1/sandboxes", cookie: ck}.do(t, d)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
			t.Errorf("session of a revoked key: %d %s, want 401 saying revoked", resp.StatusCode, body)
		}
	})

	t.Run("a browser at / goes to the console", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", self+"/", nil)
		req.Header.Set("Accept", "text/html,application/xhtml+xml")
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
			t.Errorf("GET / from a browser: %d Location %q, want 302 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
		}
		// An API client still gets the API's JSON answer.
		if resp, body := (consoleCall{method: "GET", path: "/"}).do(t, d); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"error"`) {
			t.Errorf("GET / from an API client: %d %s, want the API's JSON 401", resp.StatusCode, body)
		}
	})
	t.Run("the console's page", func(t *testing.T) {
		resp, body := consoleCall{method: "GET", path: "/ui/"}.do(t, d)
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != 200 || !strings.Contains(body, "<html") && !strings.Contains(body, "<!doctype html>") {
			t.Errorf("GET /ui/: %d %.200s", resp.StatusCode, body)
		}
		for _, want := range []string{"script-src 'self'", "default-src 'none'", "frame-ancestors 'none'", "connect-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET /ui/: Content-Security-Policy %q lacks %q", csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-eval") || strings.Contains(strings.SplitN(strings.SplitAfter(csp, "script-src")[1], ";", 2)[0], "unsafe-inline") {
			t.Errorf("GET /ui/: script-src allows inline or eval: %q", csp)
		}
	})
}

// TestConsoleSessionExpiry signs in on a daemon whose sessions last two
// seconds: after that the cookie is refused.
func TestConsoleSessionExpiry(t *testing.T) {
	t.Parallel()
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--console-session-ttl", "2s"}})
	t.Cleanup(d.Close)
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	ck, sess := consoleSignIn(t, d, strings.TrimSpace(string(tok)))
	if !sess.Admin || ck.MaxAge != 2 {
		t.Errorf("session %+v, cookie Max-Age %d: want admin (the token) and 2", sess, ck.MaxAge)
	}
	time.Sleep(time.Until(sess.ExpiresAt) + 100*time.Millisecond)
	resp, body := consoleCall{method: "GET", path: "/v1/sandboxes", cookie: ck}.do(t, d)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "expired") {
		t.Errorf("after expiry: %d %s, want 401 saying expired", resp.StatusCode, body)
	}
}
