package api

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// proxy passes r through to the sandbox's agent at agentPath?q, WebSocket
// upgrades included, streaming both ways with no buffering. Use it for
// bidirectional streams (terminals, tunnels); plain calls use forward. An
// answer other than 2xx or 101 is the agent's error document and becomes an
// error like forward's, so its status is hotcell's, not the agent's.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id, agentPath string, q url.Values) error {
	return s.reverseProxy(w, r, id, agentPath, q, false)
}

// proxyApp is proxy for an app's answer (a preview by path): its status
// passes as the app chose it, as long as it is one, and the answer is
// confined to an opaque origin (confinePreview).
func (s *Server) proxyApp(w http.ResponseWriter, r *http.Request, id, agentPath string, q url.Values) error {
	return s.reverseProxy(w, r, id, agentPath, q, true)
}

func (s *Server) reverseProxy(w http.ResponseWriter, r *http.Request, id, agentPath string, q url.Values, app bool) error {
	conn, err := s.opts.Manager.Agent(r.Context(), id)
	if err != nil {
		return err
	}
	defer s.begin(id)() // terminals, tunnels and previews are activity while open
	var proxyErr error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: "agent", Path: agentPath, RawQuery: q.Encode()}
			pr.Out.Host = "agent"
			// The daemon's token is for the daemon, never for the sandbox.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
		},
		Transport:     conn.Transport(),
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			// The agent is untrusted: it must not set cookies on the API's origin.
			resp.Header.Del("Set-Cookie")
			if !app && resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSwitchingProtocols {
				return conn.ReadError(resp)
			}
			if app {
				confinePreview(resp.Header)
			}
			return checkProxiedStatus(resp)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { proxyErr = err },
		ErrorLog:     nil,
	}
	// The client's body goes on to the agent while the answer comes back
	// (passBody).
	passBody(w)
	if r.Header.Get("Upgrade") != "" {
		// A WebSocket (terminal, tunnel) is hijacked and has no writes of
		// ours: a deadline would outlive the upgrade on its connection.
		rp.ServeHTTP(w, r)
		return proxyErr
	}
	// A preview's answer is streamed like any pass-through: every write has
	// the deadline, so a client that stops reading frees the request.
	rp.ServeHTTP(s.deadlined(w), r)
	s.refreshDeadline(w)
	return proxyErr
}

// checkProxiedStatus refuses a status that WriteHeader would panic on: it
// comes from inside the sandbox.
func checkProxiedStatus(resp *http.Response) error {
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return fmt.Errorf("the sandbox answered with HTTP status %d: %w", resp.StatusCode, errdefs.ErrUnavailable)
	}
	return nil
}

// PreviewPathCSP is the Content-Security-Policy of every answer of a
// preview by path. Those answers are served on the API's own origin; the
// sandbox directive without allow-same-origin gives the page an opaque
// origin instead, so its scripts cannot read the API with the browser's
// preview cookie, register a service worker over the API's origin or
// reach another sandbox's preview, while the app still runs its scripts,
// forms, popups, dialogs and downloads.
const PreviewPathCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// confinePreview sets the headers of an answer of a preview by path. The
// app's own Content-Security-Policy stays: the browser enforces every
// policy, so it can only narrow this one. Service-Worker-Allowed would let
// a worker script claim a scope over the whole API origin.
func confinePreview(h http.Header) {
	h.Del("Service-Worker-Allowed")
	h.Add("Content-Security-Policy", PreviewPathCSP)
}

// deadlineWriter gives every write of a pass-through the stream write
// deadline, fresh, so that a slow but live reader is never cut and a
// stalled one is cut after the timeout.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (s *Server) deadlined(w http.ResponseWriter) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: s.opts.StreamWriteTimeout}
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() { _ = w.rc.Flush() }

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refreshDeadline gives what net/http writes after the handler (the last
// chunk) a fresh deadline: the last write may be long past on a quiet stream.
func (s *Server) refreshDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.StreamWriteTimeout))
}

// passBody readies w for a handler that passes its request's body on to the
// agent through an http.Transport while it writes the answer: full duplex.
// Otherwise net/http, as it writes the answer's head, reads what is left of
// the request's body and closes it under the transport, which may not be
// done with it: the transport's last read of the body (to find its end)
// then fails ("invalid Read on closed Body") and the transport closes the
// agent stream in the middle of the answer being copied. One proxied POST
// in a few hundred came back with its status and an empty body.
func passBody(w http.ResponseWriter) {
	_ = http.NewResponseController(w).EnableFullDuplex()
}
