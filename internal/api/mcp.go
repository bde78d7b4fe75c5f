package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/mcpserver"
)

// mcpSessionIdle closes an MCP session its client stopped using without
// ending it, so abandoned sessions do not pile up.
const mcpSessionIdle = time.Hour

// mcpRoutes serves the MCP server over the streamable HTTP transport: POST
// carries client messages, GET opens the server's event stream, DELETE ends
// a session. The bearer token is checked by Handler like on every route.
func (s *Server) mcpRoutes() {
	h := s.mcpHandler()
	s.mux.Handle("POST /v1/mcp", h)
	s.mux.Handle("GET /v1/mcp", h)
	s.mux.Handle("DELETE /v1/mcp", h)
}

// mcpHandler builds the MCP server on the Go SDK, like `hotcell mcp` does,
// but with a transport that hands each request to this server's own
// handler in process: the tools behave exactly as over HTTP (same
// validation, auth, errors, logs) without a loopback connection or knowing
// the listen address.
func (s *Server) mcpHandler() http.Handler {
	h := s.Handler()
	if s.opts.Forward != nil {
		h = s.opts.Forward(h)
	}
	hc := &http.Client{Transport: &handlerTransport{h: h}}
	// The host is never dialled; it only has to parse (and must not look
	// like a preview host name).
	c, err := client.New("http://localhost", s.opts.Token, client.WithHTTPClient(hc), client.WithUserAgent("hotcell-mcp"))
	if err != nil {
		panic(fmt.Sprintf("api: mcp client: %v", err)) // a constant URL: cannot happen
	}
	log := s.opts.Log.With("component", "mcp")
	srv := mcpserver.New(c, mcpserver.Options{Log: log})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger:         log,
		SessionTimeout: mcpSessionIdle,
		// A client that hangs up stops its tool call (an exec, say) rather
		// than leaving it to run to its timeout, where the protocol allows.
		PropagateRequestCancellation: true,
	})
}

// handlerTransport is an http.RoundTripper that serves requests with an
// http.Handler in the same process. The response body is a pipe the
// handler writes into as the client reads, so streams (exec, logs) keep
// their backpressure and bounded memory; closing it, or cancelling the
// request, cancels the handler's context.
type handlerTransport struct {
	h http.Handler
}

func (t *handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	sreq := req.Clone(ctx)
	sreq.RequestURI = req.URL.RequestURI()
	sreq.Host = req.URL.Host
	sreq.RemoteAddr = "127.0.0.1:0" // in process: it is the daemon itself
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeResponseWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer cancel()
		defer func() {
			// Like net/http, a panicking handler aborts its response rather
			// than the process; the client sees a broken body.
			if p := recover(); p != nil {
				w.finish()
				pw.CloseWithError(fmt.Errorf("handler panic: %v", p))
				return
			}
			w.finish()
			pw.Close()
		}()
		defer sreq.Body.Close()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          &pipeBody{PipeReader: pr, cancel: cancel},
		ContentLength: -1,
		Request:       req,
	}, nil
}

// pipeResponseWriter hands the status and headers over when they are
// written, and the body through a pipe.
type pipeResponseWriter struct {
	header http.Header
	pw     *io.PipeWriter

	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header
}

func (w *pipeResponseWriter) Header() http.Header { return w.header }

func (w *pipeResponseWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return // informational answers are not the response
	}
	w.once.Do(func() {
		w.status = code
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponseWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(p)
}

// Flush is a no-op: the pipe has no buffer, every write reaches the reader.
func (w *pipeResponseWriter) Flush() {}

// finish answers 200 with no body for a handler that wrote nothing.
func (w *pipeResponseWriter) finish() { w.WriteHeader(http.StatusOK) }

// pipeBody ends the handler when the client closes the body early.
type pipeBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Close() error {
	b.cancel()
	return b.PipeReader.CloseWithError(errBodyClosed)
}

var errBodyClosed = errors.New("response body closed")
