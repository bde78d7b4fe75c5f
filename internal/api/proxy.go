package api

import (
	"net/http"
	"net/http/httputil"
	"net/url"
)

// proxy passes r through to the sandbox's agent at agentPath?q, WebSocket
// upgrades included, streaming both ways with no buffering. Use it for
// bidirectional streams (terminals, tunnels); plain calls use forward.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id, agentPath string, q url.Values) error {
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
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { proxyErr = err },
		ErrorLog:     nil,
	}
	rp.ServeHTTP(w, r)
	return proxyErr
}
