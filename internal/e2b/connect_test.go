package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

type echoReq struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

type echoResp struct {
	Text string `json:"text,omitempty"`
	I    int    `json:"i,omitempty"`
}

// testServer serves the real envd wrapper (sandbox routing, token check)
// around test handlers for the framing.
func testServer(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	s := New(Options{Secret: []byte("test-secret"), Token: "hc_admin"})
	s.envd("POST /test.Echo/Unary", unary(func(r *http.Request, req *echoReq) (*echoResp, error) {
		if req.Text == "missing" {
			return nil, fmt.Errorf("no such thing: %w", errdefs.ErrNotFound)
		}
		return &echoResp{Text: SandboxID(r) + ":" + req.Text}, nil
	}))
	s.envd("POST /test.Echo/Stream", serverStream(func(r *http.Request, req *echoReq, st *Stream) error {
		if req.Text == "quiet" {
			st.Keepalive(r.Context(), 20*time.Millisecond, map[string]any{"keepalive": map[string]any{}})
			time.Sleep(150 * time.Millisecond)
			return nil
		}
		for i := 1; i <= req.N; i++ {
			if err := st.Send(echoResp{Text: req.Text, I: i}); err != nil {
				return err
			}
		}
		if req.Text == "fail" {
			return fmt.Errorf("went wrong: %w", errdefs.ErrInvalidArgument)
		}
		return nil
	}))
	s.control("GET /test/control", func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("sandbox x: %w", errdefs.ErrNotFound)
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs
}

func post(t *testing.T, url, ctype string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func envelope(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return appendEnvelope(nil, flagMessage, b)
}

// envelopes splits a stream answer; it fails the test unless the stream
// ends with exactly one end-stream envelope, last.
func envelopes(t *testing.T, body []byte) (msgs []string, end string) {
	t.Helper()
	r := bytes.NewReader(body)
	for r.Len() > 0 {
		flag, msg, err := readEnvelope(r)
		if err != nil {
			t.Fatalf("bad envelope after %d messages: %v (body %q)", len(msgs), err, body)
		}
		if end != "" {
			t.Fatalf("data after the end-stream envelope: %q", msg)
		}
		switch flag {
		case flagMessage:
			msgs = append(msgs, string(msg))
		case flagEndStream:
			end = string(msg)
		default:
			t.Fatalf("flag %#x", flag)
		}
	}
	if end == "" {
		t.Fatalf("no end-stream envelope in %q", body)
	}
	return msgs, end
}

func TestConnectUnary(t *testing.T) {
	s, hs := testServer(t)
	auth := map[string]string{"E2b-Sandbox-Id": "sb1", "X-Access-Token": s.EnvdToken("sb1")}

	resp, body := post(t, hs.URL+"/test.Echo/Unary", "application/json", auth, []byte(`{"text":"hi","unknownField":1}`))
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d type %q body %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var got echoResp
	if err := json.Unmarshal(body, &got); err != nil || got.Text != "sb1:hi" {
		t.Fatalf("answer %s (%v)", body, err)
	}

	for _, tc := range []struct {
		name, ctype, body string
		hdr               map[string]string
		status            int
		code              string
	}{
		{"not found", "application/json", `{"text":"missing"}`, auth, 404, "not_found"},
		{"bad json", "application/json", `{"text":`, auth, 400, "invalid_argument"},
		{"proto codec", "application/proto", `{}`, auth, 400, "invalid_argument"},
		{"no sandbox header", "application/json", `{}`, map[string]string{"X-Access-Token": s.EnvdToken("sb1")}, 400, "invalid_argument"},
		{"no token", "application/json", `{}`, map[string]string{"E2b-Sandbox-Id": "sb1"}, 401, "unauthenticated"},
		{"another sandbox's token", "application/json", `{}`, map[string]string{"E2b-Sandbox-Id": "sb1", "X-Access-Token": s.EnvdToken("sb2")}, 401, "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, hs.URL+"/test.Echo/Unary", tc.ctype, tc.hdr, []byte(tc.body))
			var ce connectError
			if err := json.Unmarshal(body, &ce); err != nil {
				t.Fatalf("error body is not JSON: %q", body)
			}
			if resp.StatusCode != tc.status || ce.Code != tc.code || ce.Message == "" {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, ce, tc.status, tc.code)
			}
		})
	}
}

func TestConnectServerStream(t *testing.T) {
	s, hs := testServer(t)
	auth := map[string]string{"E2b-Sandbox-Id": "sb1", "X-Access-Token": s.EnvdToken("sb1")}
	url := hs.URL + "/test.Echo/Stream"

	resp, body := post(t, url, "application/connect+json", auth, envelope(t, echoReq{Text: "x", N: 3}))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	msgs, end := envelopes(t, body)
	if want := []string{`{"text":"x","i":1}`, `{"text":"x","i":2}`, `{"text":"x","i":3}`}; fmt.Sprint(msgs) != fmt.Sprint(want) || end != `{}` {
		t.Fatalf("messages %q end %q", msgs, end)
	}

	// An error after messages ends the stream with it, still under a 200.
	resp, body = post(t, url, "application/connect+json", auth, envelope(t, echoReq{Text: "fail", N: 1}))
	msgs, end = envelopes(t, body)
	if resp.StatusCode != 200 || len(msgs) != 1 || !strings.Contains(end, `"code":"invalid_argument"`) || !strings.Contains(end, "went wrong") {
		t.Fatalf("status %d messages %q end %q", resp.StatusCode, msgs, end)
	}

	// A compressed or unenveloped request is refused in the end-stream.
	compressed := envelope(t, echoReq{Text: "x", N: 1})
	compressed[0] = flagCompressed
	for name, req := range map[string][]byte{"compressed": compressed, "bare json": []byte(`{"text":"x"}`), "truncated": compressed[:7]} {
		resp, body = post(t, url, "application/connect+json", auth, req)
		msgs, end = envelopes(t, body)
		if resp.StatusCode != 200 || len(msgs) != 0 || !strings.Contains(end, `"code":"invalid_argument"`) {
			t.Errorf("%s: status %d messages %q end %q", name, resp.StatusCode, msgs, end)
		}
	}

	// A quiet stream carries keepalives.
	_, body = post(t, url, "application/connect+json", auth, envelope(t, echoReq{Text: "quiet"}))
	msgs, end = envelopes(t, body)
	if len(msgs) == 0 || msgs[0] != `{"keepalive":{}}` || end != `{}` {
		t.Fatalf("quiet stream: messages %q end %q", msgs, end)
	}
}

func TestControlAuthAndErrorShape(t *testing.T) {
	_, hs := testServer(t)
	get := func(key string) (int, apiError) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/test/control", nil)
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e apiError
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatalf("error body is not JSON: %v", err)
		}
		return resp.StatusCode, e
	}
	if st, e := get(""); st != 401 || e.Code != 401 {
		t.Errorf("no key: %d %+v", st, e)
	}
	if st, e := get("e2b_0000000000000000000000000000000000000000"); st != 401 || e.Code != 401 {
		t.Errorf("unknown key: %d %+v", st, e)
	}
	// The daemon's token is a key; the route's own error keeps E2B's shape.
	if st, e := get("hc_admin"); st != 404 || e.Code != 404 || !strings.Contains(e.Message, "sandbox x") {
		t.Errorf("admin token: %d %+v", st, e)
	}
}

func TestEnvdHealthAndUnknownRoute(t *testing.T) {
	_, hs := testServer(t)
	resp, err := http.Get(hs.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("/health: %d", resp.StatusCode)
	}
	resp, err = http.Get(hs.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e apiError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 404 || e.Code != 404 {
		t.Errorf("unknown route: %d %+v %v", resp.StatusCode, e, err)
	}
}

func TestEnvdTokenIsPerSandboxAndSecret(t *testing.T) {
	a := New(Options{Secret: []byte("one")})
	b := New(Options{Secret: []byte("two")})
	if a.EnvdToken("x") == a.EnvdToken("y") || a.EnvdToken("x") == b.EnvdToken("x") {
		t.Fatal("tokens must differ per sandbox and per secret")
	}
	if !a.EnvdTokenOK("x", a.EnvdToken("x")) || a.EnvdTokenOK("y", a.EnvdToken("x")) || a.EnvdTokenOK("", "") {
		t.Fatal("EnvdTokenOK")
	}
	if New(Options{}).EnvdTokenOK("x", New(Options{}).EnvdToken("x")) {
		t.Fatal("no secret must accept no token")
	}
}
