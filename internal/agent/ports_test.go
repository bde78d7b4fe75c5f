package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// These tests dial the test process's own loopback, which stands in for the
// sandbox's.

func listenLoopback(t *testing.T, network, addr string) (net.Listener, int) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		// Loopback without IPv6 (some containers) cannot run these.
		testenv.SkipOrFail(t, "listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, ln.Addr().(*net.TCPAddr).Port
}

// freePort returns a loopback port nothing listens on (any more).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}

func TestPortWait(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	_, p4 := listenLoopback(t, "tcp4", "127.0.0.1:0")
	_, p6 := listenLoopback(t, "tcp6", "[::1]:0")
	for _, port := range []int{p4, p6} {
		var res wire.PortWaitResult
		a.call("GET", "/v1/ports/"+strconv.Itoa(port)+"/wait", q("timeoutMs", "2000"), nil, http.StatusOK, &res)
		if !res.Ready || res.Port != port {
			t.Errorf("wait %d: got %+v", port, res)
		}
	}

	// A server that comes up during the wait is found.
	late := freePort(t)
	go func() {
		time.Sleep(150 * time.Millisecond)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(late))
		if err == nil {
			t.Cleanup(func() { ln.Close() })
		}
	}()
	var res wire.PortWaitResult
	a.call("GET", "/v1/ports/"+strconv.Itoa(late)+"/wait", q("timeoutMs", "5000"), nil, http.StatusOK, &res)
	if res.WaitedMs < 100 {
		t.Errorf("waitedMs = %d, want the time the server took to come up", res.WaitedMs)
	}

	a.callErr("GET", "/v1/ports/"+strconv.Itoa(freePort(t))+"/wait", q("timeoutMs", "300"), nil, http.StatusGatewayTimeout, "nothing accepted connections")
}

func TestPortBadInput(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, p := range []string{"0", "65536", "-1", "abc", "+80", "999999"} {
		for _, route := range []string{"/wait", "/tcp", "/http/"} {
			b := a.callErr("GET", "/v1/ports/"+p+route, nil, nil, http.StatusBadRequest, "port")
			if b.Error.Code != "invalid_argument" {
				t.Errorf("port %s%s: code %q", p, route, b.Error.Code)
			}
		}
	}
	a.callErr("GET", "/v1/ports/80/wait", q("timeoutMs", "-5"), nil, http.StatusBadRequest, "timeoutMs")
}

func TestParsePort(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"1": 1, "80": 80, "65535": 65535, "08080": 8080} {
		if got, err := parsePort(s); err != nil || got != want {
			t.Errorf("parsePort(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "65536", " 80", "80 ", "1e3", "0x50", "-80", "+80", "000080"} {
		if _, err := parsePort(s); err == nil {
			t.Errorf("parsePort(%q): got nil error", s)
		}
	}
}

func FuzzParsePort(f *testing.F) {
	for _, s := range []string{"80", "0", "65535", "65536", "", "+1", "-1", "99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePort(s)
		if err == nil && (p < 1 || p > 65535) {
			t.Fatalf("parsePort(%q) = %d without error", s, p)
		}
	})
}

// halfCloseServer reads everything until EOF, then answers with how much
// it got followed by the data, then closes: it needs half-close to answer.
func halfCloseServer(t *testing.T) int {
	t.Helper()
	ln, port := listenLoopback(t, "tcp", "127.0.0.1:0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				data, _ := io.ReadAll(c)
				fmt.Fprintf(c, "%d:", len(data))
				c.Write(data)
			}()
		}
	}()
	return port
}

func (a *testAgent) dialTunnel(ctx context.Context, port int) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, "http://agent/v1/ports/"+strconv.Itoa(port)+"/tcp", &websocket.DialOptions{HTTPClient: a.client})
}

func TestPortTunnelHalfClose(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	port := halfCloseServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, _, err := a.dialTunnel(ctx, port)
	if err != nil {
		t.Fatalf("dial tunnel: %v", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)

	payload := make([]byte, 3<<20+7)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	go func() {
		for off := 0; off < len(payload); off += 100_000 {
			if err := ws.Write(ctx, websocket.MessageBinary, payload[off:min(off+100_000, len(payload))]); err != nil {
				return
			}
		}
		ctl, _ := json.Marshal(wire.TunnelControl{Type: wire.TunnelCloseWrite})
		ws.Write(ctx, websocket.MessageText, ctl)
	}()
	var got bytes.Buffer
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("read before eof: %v (got %d bytes)", err, got.Len())
		}
		if typ == websocket.MessageText {
			var ctl wire.TunnelControl
			if err := json.Unmarshal(data, &ctl); err != nil || ctl.Type != wire.TunnelEOF {
				t.Fatalf("control message %q", data)
			}
			break
		}
		got.Write(data)
	}
	want := append([]byte(strconv.Itoa(len(payload))+":"), payload...)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got %d bytes, want %d (prefix %q)", got.Len(), len(want), got.Bytes()[:min(20, got.Len())])
	}
	// Both sides have half-closed: the agent ends the tunnel normally.
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after eof: got %v, want a normal close", err)
	}
}

func TestPortTunnelClientGoneClosesConnection(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	ln, port := listenLoopback(t, "tcp", "127.0.0.1:0")
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	ws, _, err := a.dialTunnel(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	defer c.Close()
	ws.Close(websocket.StatusNormalClosure, "")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the agent did not close the connection to the port when the client left: %v", err)
	}
}

func TestPortTunnelNothingListens(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.callErr("GET", "/v1/ports/"+strconv.Itoa(freePort(t))+"/tcp", nil, nil, http.StatusNotFound, "nothing listens on port")
}

func TestPortHTTPProxy(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream":
			w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
			<-release
			w.Write([]byte("last\n"))
		default:
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s host=%s fwd=%s body=%s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Host, r.Header.Get("X-Forwarded-Host"), body)
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	base := "/v1/ports/" + strconv.Itoa(port) + "/http"

	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://agent"+base+"/a%2Fb/c?x=1&y=2", bytes.NewReader([]byte("hi")))
	req.Header.Set("X-Forwarded-Host", "8000-sb-x.preview.localhost")
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("POST /a%%2Fb/c x=1&y=2 host=localhost:%d fwd=8000-sb-x.preview.localhost body=hi", port)
	if string(body) != want {
		t.Errorf("got %q, want %q", body, want)
	}

	// Streaming: the first chunk arrives while the app still holds the last.
	resp = a.do(t.Context(), "GET", base+"/stream", nil, nil)
	defer resp.Body.Close()
	line := make([]byte, 6)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(resp.Body, line); done <- err }()
	select {
	case err := <-done:
		if err != nil || string(line) != "first\n" {
			t.Fatalf("first chunk: %q, %v", line, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first chunk did not arrive before the response ended: the proxy buffers")
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "last\n" {
		t.Errorf("rest: %q", rest)
	}

	a.callErr("GET", "/v1/ports/"+strconv.Itoa(freePort(t))+"/http/", nil, nil, http.StatusBadGateway, "nothing listens on port")
}

func TestPortHTTPProxyWebSocket(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, data, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, append([]byte("echo:"), data...))
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	ws, _, err := websocket.Dial(t.Context(), "http://agent/v1/ports/"+strconv.Itoa(port)+"/http/ws", &websocket.DialOptions{HTTPClient: a.client})
	if err != nil {
		t.Fatalf("upgrade through the proxy: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(t.Context(), websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_, data, err := ws.Read(t.Context())
	if err != nil || string(data) != "echo:hello" {
		t.Fatalf("got %q, %v", data, err)
	}
}

// TestPortHTTPProxyKeepAliveApp: POSTs through the proxy, on a kept-alive
// agent stream as the daemon sends them, to an app that writes its answer's
// head and body in two writes with Nagle on and keeps its connections
// alive, as Python's http.server does (a code interpreter, a Flask dev
// server). Every answer arrives whole. With the proxy keeping its
// connection to the app alive, each took ~40 ms (a delayed ACK) and about
// one in 150 was cut off mid-answer.
func TestPortHTTPProxyKeepAliveApp(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.client.Transport.(*http.Transport).DisableKeepAlives = false
	ln, port := listenLoopback(t, "tcp", "127.0.0.1:0")
	const answer = "{\"a\":1}\n{\"b\":2}\n"
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*net.TCPConn).SetNoDelay(false)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n", len(answer))
					_, _ = io.WriteString(c, answer)
				}
			}()
		}
	}()
	url := "http://agent/v1/ports/" + strconv.Itoa(port) + "/http/execute"
	cut := 0
	for i := range 1000 {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(`{"code":"x = 1"}`))
		resp, err := a.client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != answer {
			cut++
			t.Logf("request %d: got %q, %v", i, body, err)
		}
	}
	if cut > 0 {
		t.Errorf("%d of 1000 answers were cut off", cut)
	}
}

// postEchoApp is a Python http.server app that echoes a POST's body in a
// JSON answer, written as such apps do: the head, then the body, in two
// writes.
const postEchoApp = `
import sys
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
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestPortHTTPProxyPostsWhole: POSTs through the proxy, on a kept-alive
// agent stream as the daemon sends them, to a Python http.server app: every
// answer arrives whole. net/http's server used to read the rest of each
// request's body and close it as the proxy wrote the answer's head, under
// the transport still reading it for the app; the transport then closed
// its connection to the app mid-answer: 9 to 129 answers in 3,000 came
// back with a 200 and an empty body.
func TestPortHTTPProxyPostsWhole(t *testing.T) {
	t.Parallel()
	python := testenv.RequireTool(t, "python3")
	a := newTestAgent(t)
	a.client.Transport.(*http.Transport).DisableKeepAlives = false
	ln, port := listenLoopback(t, "tcp", "127.0.0.1:0")
	ln.Close() // the app listens on it
	app := filepath.Join(t.TempDir(), "app.py")
	if err := os.WriteFile(app, []byte(postEchoApp), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, app, strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var ready wire.PortWaitResult
	wresp := a.do(t.Context(), "GET", "/v1/ports/"+strconv.Itoa(port)+"/wait", url.Values{"timeoutMs": {"30000"}}, nil)
	if err := json.NewDecoder(wresp.Body).Decode(&ready); err != nil || !ready.Ready {
		t.Fatalf("the app did not listen: %+v, %v", ready, err)
	}
	wresp.Body.Close()
	target := "http://agent/v1/ports/" + strconv.Itoa(port) + "/http/api"
	cut := 0
	const n = 2000
	for i := range n {
		in := fmt.Sprintf(`{"n":%d}`, i)
		req, _ := http.NewRequestWithContext(t.Context(), "POST", target, strings.NewReader(in))
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.client.Do(req)
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := `{"echo":` + in + "}\n"; err != nil || resp.StatusCode != 200 || string(body) != want {
			cut++
			t.Logf("POST %d: %d %q, %v", i, resp.StatusCode, body, err)
		}
	}
	if cut > 0 {
		t.Errorf("%d of %d answers were cut off", cut, n)
	}
}
