package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// loopbackClient sends every request to the daemon's address whatever the
// URL's host says, as wildcard DNS for the preview domain would: the test
// talks to preview host names without touching any resolver.
func loopbackClient(d *testdaemon.Daemon) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "tcp", d.Addr)
		},
		DisableCompression: true,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func get(t *testing.T, hc *http.Client, u string, hdr map[string]string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp.StatusCode, readAll(resp), resp
}

// startBackground starts a server in the sandbox that outlives the exec.
func startBackground(t *testing.T, d *testdaemon.Daemon, id, command string) {
	t.Helper()
	mustOK(t, run(t, d, id, "setsid nohup "+command+" >/tmp/bg.log 2>&1 </dev/null &"), "start "+command)
}

func TestPortsPreviewAndTunnel(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := sharedDaemon(t)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt, Image: testenv.BaseImage(t)})
		id := sb.ID
		ctx := t.Context()
		_, daemonPort, _ := net.SplitHostPort(d.Addr)

		mustOK(t, run(t, d, id, "mkdir -p /workspace/site && printf 'hello preview\\n' > /workspace/site/index.html"), "write site")
		startBackground(t, d, id, "python3 -m http.server 8000 --bind 127.0.0.1 --directory /workspace/site")
		res, err := d.C.WaitPort(ctx, id, 8000, 30*time.Second)
		if err != nil || !res.Ready {
			t.Fatalf("wait for the dev server: %+v, %v", res, err)
		}

		hc := loopbackClient(d)
		bearer := map[string]string{"Authorization": "Bearer " + apiToken(t, d)}
		pathURL := "http://" + d.Addr + "/v1/sandboxes/" + id + "/ports/8000/http/index.html"
		hostURL := "http://8000-" + id + ".preview.localhost:" + daemonPort + "/index.html"

		t.Run("by path with the API token", func(t *testing.T) {
			code, body, _ := get(t, hc, pathURL, bearer)
			if code != 200 || body != "hello preview\n" {
				t.Fatalf("got %d %q", code, body)
			}
		})
		t.Run("by host name with the API token", func(t *testing.T) {
			code, body, _ := get(t, hc, hostURL, bearer)
			if code != 200 || body != "hello preview\n" {
				t.Fatalf("got %d %q", code, body)
			}
		})

		pv, err := d.C.PreviewURL(ctx, id, 8000)
		if err != nil {
			t.Fatal(err)
		}
		if pv.Token == "" || !strings.HasPrefix(pv.URL, "http://8000-"+id+".preview.localhost:"+daemonPort+"/?") {
			t.Fatalf("preview url: %+v", pv)
		}

		t.Run("refused without a token", func(t *testing.T) {
			for _, u := range []string{pathURL, hostURL} {
				if code, body, _ := get(t, hc, u, nil); code != http.StatusUnauthorized {
					t.Errorf("%s: got %d %q, want 401", u, code, body)
				}
				if code, _, _ := get(t, hc, u, map[string]string{"X-Hotcell-Preview-Token": "wrong"}); code != http.StatusUnauthorized {
					t.Errorf("%s with a wrong token: got %d, want 401", u, code)
				}
			}
		})
		t.Run("allowed with the preview token", func(t *testing.T) {
			for _, u := range []string{pathURL, hostURL} {
				code, body, _ := get(t, hc, u, map[string]string{"X-Hotcell-Preview-Token": pv.Token})
				if code != 200 || body != "hello preview\n" {
					t.Errorf("%s: got %d %q", u, code, body)
				}
			}
			// A token in the query becomes a cookie for that host; the cookie
			// alone then opens the preview, as a browser's later requests do.
			code, body, resp := get(t, hc, hostURL+"?hotcell_preview_token="+url.QueryEscape(pv.Token), nil)
			if code != 200 || body != "hello preview\n" {
				t.Fatalf("query token: got %d %q", code, body)
			}
			var cookie *http.Cookie
			for _, c := range resp.Cookies() {
				if c.Name == "hotcell_preview_token" {
					cookie = c
				}
			}
			if cookie == nil || !cookie.HttpOnly || cookie.Domain != "" {
				t.Fatalf("cookie: %+v, want an HttpOnly host-only cookie", cookie)
			}
			code, body, _ = get(t, hc, hostURL, map[string]string{"Cookie": cookie.Name + "=" + cookie.Value})
			if code != 200 || body != "hello preview\n" {
				t.Fatalf("cookie: got %d %q", code, body)
			}
			// The token opens this sandbox's previews only.
			other := "http://8000-sb-000000000000.preview.localhost:" + daemonPort + "/"
			if code, _, _ := get(t, hc, other, map[string]string{"X-Hotcell-Preview-Token": pv.Token}); code != http.StatusUnauthorized {
				t.Errorf("another sandbox with this token: got %d, want 401", code)
			}
		})

		t.Run("TCP tunnel with half-close", func(t *testing.T) {
			conn, err := d.C.DialPort(ctx, id, 8000)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := io.ReadAll(conn)
			if err != nil {
				t.Fatalf("read the answer: %v", err)
			}
			if !strings.HasPrefix(string(resp), "HTTP/1.0 200") || !strings.HasSuffix(string(resp), "\r\n\r\nhello preview\n") {
				t.Fatalf("answer %q", resp)
			}
		})

		t.Run("public port needs no token", func(t *testing.T) {
			if _, err := d.C.SetPortPublic(ctx, id, 8000, true); err != nil {
				t.Fatal(err)
			}
			for _, u := range []string{pathURL, hostURL} {
				if code, body, _ := get(t, hc, u, nil); code != 200 || body != "hello preview\n" {
					t.Errorf("%s: got %d %q", u, code, body)
				}
			}
			got, err := d.C.GetSandbox(ctx, id)
			if err != nil || len(got.PublicPorts) != 1 || got.PublicPorts[0] != 8000 {
				t.Errorf("sandbox publicPorts = %v, %v", got.PublicPorts, err)
			}
			if _, err := d.C.SetPortPublic(ctx, id, 8000, false); err != nil {
				t.Fatal(err)
			}
			if code, _, _ := get(t, hc, hostURL, nil); code != http.StatusUnauthorized {
				t.Errorf("after making it private again: got %d, want 401", code)
			}
		})
	})
}

func TestPortsWebSocketAndStreaming(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	id := sb.ID
	ctx := t.Context()
	_, daemonPort, _ := net.SplitHostPort(d.Addr)

	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/portsrv"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, id, "/workspace/portsrv", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	startBackground(t, d, id, "/workspace/portsrv http 8001")
	if _, err := d.C.WaitPort(ctx, id, 8001, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pv, err := d.C.PreviewURL(ctx, id, 8001)
	if err != nil {
		t.Fatal(err)
	}
	hc := loopbackClient(d)
	host := "8001-" + id + ".preview.localhost:" + daemonPort

	t.Run("WebSocket echo through the preview", func(t *testing.T) {
		ws, _, err := websocket.Dial(ctx, "ws://"+host+"/ws?hotcell_preview_token="+url.QueryEscape(pv.Token), &websocket.DialOptions{HTTPClient: hc})
		if err != nil {
			t.Fatalf("upgrade through the preview: %v", err)
		}
		defer ws.CloseNow()
		for _, msg := range []string{"hello", strings.Repeat("x", 20000)} {
			if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, data, err := ws.Read(ctx)
			if err != nil || string(data) != "echo:"+msg {
				t.Fatalf("echo: got %.40q, %v", data, err)
			}
		}
		ws.Close(websocket.StatusNormalClosure, "")
	})

	t.Run("WebSocket refused without a token", func(t *testing.T) {
		_, resp, err := websocket.Dial(ctx, "ws://"+host+"/ws", &websocket.DialOptions{HTTPClient: hc})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("got %v, %v; want 401", resp, err)
		}
	})

	t.Run("streaming is not buffered", func(t *testing.T) {
		for _, u := range []string{
			"http://" + host + "/stream",
			"http://" + d.Addr + "/v1/sandboxes/" + id + "/ports/8001/http/stream",
		} {
			run(t, d, id, "rm -f /tmp/portsrv-release")
			req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
			req.Header.Set("X-Hotcell-Preview-Token", pv.Token)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			first, err := br.ReadString('\n')
			if err != nil || first != "first\n" {
				t.Fatalf("%s: first chunk %q, %v", u, first, err)
			}
			// The server sends the last chunk only after this, so the first
			// one came through while the response was still open.
			mustOK(t, run(t, d, id, "touch /tmp/portsrv-release"), "release")
			rest, _ := io.ReadAll(br)
			resp.Body.Close()
			if string(rest) != "last\n" {
				t.Fatalf("%s: rest %q", u, rest)
			}
		}
	})
}

func TestPortsErrors(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	id := sb.ID
	ctx := t.Context()

	_, err := d.C.WaitPort(ctx, id, 8999, 500*time.Millisecond)
	if !errors.Is(err, client.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "8999") {
		t.Fatalf("wait on a port with nothing: got %v, want a deadline error naming the port", err)
	}

	for _, port := range []int{0, 65536, -1} {
		_, err := d.C.WaitPort(ctx, id, port, time.Second)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, "port") {
			t.Errorf("port %d: got %v, want 400 naming port", port, err)
		}
	}

	if _, err := d.C.DialPort(ctx, id, 8999); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "nothing listens on port 8999") {
		t.Errorf("dial a port with nothing: got %v", err)
	}

	hc := loopbackClient(d)
	bearer := map[string]string{"Authorization": "Bearer " + apiToken(t, d)}
	code, body, _ := get(t, hc, "http://"+d.Addr+"/v1/sandboxes/"+id+"/ports/8999/http/", bearer)
	if code != http.StatusBadGateway || !strings.Contains(body, "nothing listens on port 8999") {
		t.Errorf("preview of a port with nothing: got %d %q, want 502", code, body)
	}
	code, body, _ = get(t, hc, "http://"+d.Addr+"/v1/sandboxes/"+id+"/ports/70000/http/", bearer)
	if code != http.StatusBadRequest || !strings.Contains(body, "port") {
		t.Errorf("preview of port 70000: got %d %q, want 400", code, body)
	}
	_, daemonPort, _ := net.SplitHostPort(d.Addr)
	code, body, _ = get(t, hc, "http://0-"+id+".preview.localhost:"+daemonPort+"/", bearer)
	if code != http.StatusBadRequest || !strings.Contains(body, "port") {
		t.Errorf("preview host of port 0: got %d %q, want 400", code, body)
	}
}

func apiToken(t *testing.T, d *testdaemon.Daemon) string {
	t.Helper()
	tok, err := client.ReadTokenFile(d.DataDir + "/token")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// postApp is a JSON service as people write them with Python's
// http.server: HTTP/1.1, kept-alive connections, and the answer's head and
// body written apart (end_headers flushes), Nagle left on.
const postApp = `
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b'{"echo":' + body + b'}\n'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
ThreadingHTTPServer(("127.0.0.1", 8002), H).serve_forever()
`

// TestPreviewPostsWhole sends 600 POSTs, one after another on one kept-alive
// client connection, through the preview by path to such an app: every
// answer arrives whole. At each of the two proxies (the daemon's, the
// agent's) net/http read the rest of a request's body and closed it as the
// answer's head was written, under the transport still reading it: the
// transport then closed its connection mid-answer, and about one answer in
// 150 came back with a 200 and an empty body (see passBody).
func TestPreviewPostsWhole(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	ctx := t.Context()
	mustOK(t, run(t, d, sb.ID, "cat > /workspace/app.py <<'EOF'\n"+postApp+"\nEOF"), "write app")
	startBackground(t, d, sb.ID, "python3 /workspace/app.py")
	if res, err := d.C.WaitPort(ctx, sb.ID, 8002, 30*time.Second); err != nil || !res.Ready {
		t.Fatalf("wait for the app: %+v, %v", res, err)
	}
	hc := loopbackClient(d)
	url := "http://" + d.Addr + "/v1/sandboxes/" + sb.ID + "/ports/8002/http/api"
	tok := apiToken(t, d)
	cut := 0
	for i := range 600 {
		in := fmt.Sprintf(`{"n":%d}`, i)
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(in))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			cut++
			t.Logf("POST %d: %v", i, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := `{"echo":` + in + "}\n"; err != nil || resp.StatusCode != 200 || string(body) != want {
			cut++
			t.Logf("POST %d: %d %q, %v", i, resp.StatusCode, body, err)
		}
	}
	if cut > 0 {
		t.Errorf("%d of 600 answers through the preview were cut off or failed", cut)
	}
}
