package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Ports: wait for a port, a TCP tunnel to it and an HTTP reverse proxy to it.
// Every dial happens here, inside the sandbox's network namespace, to its
// loopback: the daemon never connects to a container address.

const (
	defaultPortWait = 30 * time.Second
	maxPortWait     = 10 * time.Minute
	// portPollInterval is how often wait retries; a refused loopback dial
	// costs microseconds, so polling is cheap and keeps the latency low.
	portPollInterval = 25 * time.Millisecond
)

type portService struct {
	log       *slog.Logger
	keepalive time.Duration
	// transport carries the HTTP proxy's requests; it dials through dialPort,
	// so "localhost:PORT" means IPv4 loopback, then IPv6.
	transport *http.Transport
}

// portRoutes registers the routes of this service.
func (h *handler) portRoutes(mux *http.ServeMux) {
	p := &portService{log: h.log.With("service", "ports"), keepalive: h.opts.Keepalive}
	p.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, ps, _ := net.SplitHostPort(addr)
			port, err := strconv.Atoi(ps)
			if err != nil {
				return nil, fmt.Errorf("dial %q: bad port", addr)
			}
			return dialPort(ctx, port)
		},
		// One connection per request. Kept alive, a connection to an app
		// that writes its answer's head and body apart with Nagle on (as
		// Python's http.server does) made each request wait ~40 ms for a
		// delayed ACK, and about one POST in 150 had its answer cut off:
		// the transport's write of a request failed with "invalid Read on
		// closed Body" and closed the connection mid-answer
		// (TestPortHTTPProxyKeepAliveApp). A loopback connect costs far
		// less than either.
		DisableKeepAlives: true,
		// The browser negotiates compression with the app; the proxy must
		// not add its own.
		DisableCompression: true,
	}
	mux.Handle("GET /v1/ports/{port}/wait", h.adapt(p.wait))
	mux.Handle("GET /v1/ports/{port}/tcp", h.adapt(p.tunnel))
	mux.Handle("/v1/ports/{port}/http/{path...}", h.adapt(p.httpProxy))
}

// pathPort reads and checks the {port} of the route.
func pathPort(r *http.Request) (int, error) {
	return parsePort(r.PathValue("port"))
}

// parsePort accepts a decimal TCP port from 1 to 65535.
func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || len(s) > 5 || s[0] == '+' || s[0] == '-' {
		return 0, errdefs.Invalid("port", "%q is not a port number (1-65535)", clip(s, 20))
	}
	if n < 1 || n > 65535 {
		return 0, errdefs.Invalid("port", "%d is outside 1-65535", n)
	}
	return n, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// dialPort connects to port on the sandbox's loopback, IPv4 first, then
// IPv6, since a server may bind either ("localhost" means both).
func dialPort(ctx context.Context, port int) (net.Conn, error) {
	var d net.Dialer
	p := strconv.Itoa(port)
	c, err4 := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", p))
	if err4 == nil {
		return c, nil
	}
	c, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", p))
	if err6 == nil {
		return c, nil
	}
	if errors.Is(err4, syscall.ECONNREFUSED) && (errors.Is(err6, syscall.ECONNREFUSED) || errors.Is(err6, syscall.EADDRNOTAVAIL) || errors.Is(err6, syscall.ENETUNREACH) || errors.Is(err6, syscall.EAFNOSUPPORT)) {
		return nil, &classified{msg: fmt.Sprintf("nothing listens on port %d in the sandbox", port), class: errdefs.ErrNotFound, cause: err4}
	}
	return nil, fmt.Errorf("dial port %d: %w", port, errors.Join(err4, err6))
}

func (p *portService) wait(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	ms, err := queryInt64(r.URL.Query(), "timeoutMs", defaultPortWait.Milliseconds())
	if err != nil {
		return err
	}
	timeout := min(time.Duration(ms)*time.Millisecond, maxPortWait)
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	tick := time.NewTicker(portPollInterval)
	defer tick.Stop()
	for {
		// Each attempt gets its own short bound so that a dial that hangs
		// (a full accept queue) cannot overrun the wait.
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		c, err := dialPort(dctx, port)
		dcancel()
		if err == nil {
			c.Close()
			return writeJSON(w, http.StatusOK, wire.PortWaitResult{Port: port, Ready: true, WaitedMs: time.Since(start).Milliseconds()})
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			if r.Context().Err() != nil {
				return r.Context().Err()
			}
			return classErr(errdefs.ErrDeadlineExceeded, "wait for port %d: nothing accepted connections within %v", port, timeout)
		}
	}
}

// badGateway is a 502: the proxy works, the program behind the port does not.
func badGateway(format string, args ...any) error {
	return &errdefs.RemoteError{Status: http.StatusBadGateway, Code: "unavailable", Message: fmt.Sprintf(format, args...)}
}

func (p *portService) httpProxy(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	var proxyErr error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// "localhost" rather than the preview host name: dev servers
			// check Host against an allow list that has localhost in it.
			// The public name travels in X-Forwarded-Host.
			host := net.JoinHostPort("localhost", strconv.Itoa(port))
			pr.Out.URL = &url.URL{Scheme: "http", Host: host, Path: "/" + r.PathValue("path"), RawQuery: r.URL.RawQuery}
			// Keep the client's escaping (%2F stays %2F) when it is intact.
			if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/ports/"+r.PathValue("port")+"/http/"); ok {
				pr.Out.URL.RawPath = "/" + rest
			}
			pr.Out.Host = host
			// Rewrite drops X-Forwarded-*; here they come from the daemon,
			// which set them from what the client really sent.
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := pr.In.Header.Values(k); len(v) > 0 {
					pr.Out.Header[k] = v
				}
			}
		},
		Transport: p.transport,
		// -1 flushes every write: server-sent events and chunked dev-server
		// output must not sit in a buffer.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			proxyErr = err
		},
	}
	// Full duplex: the request's body goes on to the app while the app's
	// answer comes back. Otherwise net/http, as it writes the answer's
	// head, reads what is left of the request's body and closes it under
	// the transport, which may not be done with it: the transport's last
	// read of the body (to find its end) then fails with "invalid Read on
	// closed Body", and it closes the connection to the app in the middle
	// of the answer being copied. About one POST in a hundred to a Python
	// http.server app came back cut off.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
	if proxyErr == nil {
		return nil
	}
	if errors.Is(proxyErr, errdefs.ErrNotFound) {
		return badGateway("nothing listens on port %d in the sandbox", port)
	}
	if r.Context().Err() != nil {
		return r.Context().Err()
	}
	return badGateway("proxy to port %d in the sandbox: %v", port, proxyErr)
}
