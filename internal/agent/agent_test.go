package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// testAgent is an agent served in-process over a real yamux session, as the
// daemon would reach it, with a temp dir as its workspace.
type testAgent struct {
	t      *testing.T
	ws     string
	client *http.Client
}

func newTestAgent(t *testing.T, mod ...func(*Options)) *testAgent {
	t.Helper()
	ws := t.TempDir()
	opts := Options{Workspace: ws}
	for _, m := range mod {
		m(&opts)
	}
	h := NewHandler(opts)
	daemonEnd, agentEnd := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, agentEnd, h) }()
	sess, err := yamux.Client(daemonEnd, YamuxConfig())
	if err != nil {
		t.Fatalf("yamux client: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = sess.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	tr := &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return sess.Open() },
		DisableKeepAlives: true, // one stream per request (the daemon keeps its streams alive; TestPortHTTPProxyKeepAliveApp does too)
	}
	return &testAgent{t: t, ws: ws, client: &http.Client{Transport: tr}}
}

// do sends a request; body may be nil, []byte, string, io.Reader or a value
// to encode as JSON.
func (a *testAgent) do(ctx context.Context, method, path string, q url.Values, body any) *http.Response {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			a.t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(data)
	}
	u := "http://agent" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		a.t.Fatalf("new request: %v", err)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call sends a request and decodes a JSON answer into out (when non-nil),
// failing unless the status is want.
func (a *testAgent) call(method, path string, q url.Values, body any, want int, out any) {
	a.t.Helper()
	resp := a.do(a.t.Context(), method, path, q, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s?%s: status %d, want %d; body %s", method, path, q.Encode(), resp.StatusCode, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// callErr expects an error document with status want whose message
// contains substr.
func (a *testAgent) callErr(method, path string, q url.Values, body any, want int, substr string) errdefs.Body {
	a.t.Helper()
	var eb errdefs.Body
	a.call(method, path, q, body, want, &eb)
	if !strings.Contains(eb.Error.Message, substr) {
		a.t.Errorf("%s %s: error %q does not contain %q", method, path, eb.Error.Message, substr)
	}
	return eb
}

func TestHealth(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var got struct {
		Version string `json:"version"`
		PID     int    `json:"pid"`
	}
	a.call("GET", "/v1/health", nil, nil, 200, &got)
	if got.Version == "" || got.PID == 0 {
		t.Errorf("got %+v, want version and pid", got)
	}
	a.callErr("GET", "/v1/nope", nil, nil, 404, "no route")
}

// TestRunRedials serves the agent through Run over a real unix socket and
// checks that it comes back after the daemon drops the connection.
func TestRunRedials(t *testing.T) {
	t.Parallel()
	sock := t.TempDir() + "/agent.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, sock, NewHandler(Options{Workspace: t.TempDir()}), nil) }()

	for round := range 2 {
		conn, err := ln.Accept()
		if err != nil {
			t.Fatalf("round %d: accept: %v", round, err)
		}
		sess, err := yamux.Client(conn, YamuxConfig())
		if err != nil {
			t.Fatal(err)
		}
		stream, err := sess.Open()
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(stream, "GET /v1/health HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(stream)
		if !strings.HasPrefix(string(data), "HTTP/1.1 200") {
			t.Fatalf("round %d: got %q, want a 200", round, data)
		}
		_ = sess.Close() // the daemon went away; the agent must dial again
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: got %v, want nil after cancel", err)
	}
}

func mustRequest(t *testing.T, ctx context.Context, method, u, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}
