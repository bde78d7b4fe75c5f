package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds the token to every request of an MCP client.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

func TestMCPEndpoint(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(New(Options{Token: "t", Log: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(srv.Close)

	resp, err := http.Post(srv.URL+"/v1/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", resp.StatusCode)
	}

	tr := &mcp.StreamableClientTransport{Endpoint: srv.URL + "/v1/mcp", HTTPClient: &http.Client{Transport: bearer{"t", http.DefaultTransport}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) < 8 {
		t.Errorf("got %d tools, want the sandbox, exec, file and process tools", len(tools.Tools))
	}
	// The tools call the API in process, through auth and validation: an
	// invalid id comes back as the API's 400, as a tool error.
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"sandboxId": "bad ID", "command": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "id") {
		t.Errorf("got %v %+v, want a tool error about the id", res.IsError, res.Content)
	}
}

func TestHandlerTransport(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	tr := &handlerTransport{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.Header().Set("X-Seen", r.Header.Get("X-Sent"))
			w.WriteHeader(http.StatusTeapot)
		case "/stream":
			w.Write([]byte("first\n"))
			// The client reads the first line before the handler ends:
			// nothing is buffered whole. It then closes the body, which
			// must cancel this handler.
			<-r.Context().Done()
			ended <- r.Context().Err()
		case "/body":
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
		case "/panic":
			panic("boom")
		}
	})}
	hc := &http.Client{Transport: tr}

	req, _ := http.NewRequest("GET", "http://localhost/empty", nil)
	req.Header.Set("X-Sent", "yes")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Seen") != "yes" {
		t.Errorf("got %d %v, want 418 with the header", resp.StatusCode, resp.Header)
	}

	resp, err = hc.Post("http://localhost/body", "text/plain", strings.NewReader("echo"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "echo" {
		t.Errorf("body %q, want echo", b)
	}

	resp, err = hc.Get("http://localhost/stream")
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "first\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	resp.Body.Close()
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Errorf("handler context ended with %v, want canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the body did not cancel the handler")
	}

	resp, err = hc.Get("http://localhost/panic")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Errorf("a panicking handler gave %v, want an error", err)
	}
}
