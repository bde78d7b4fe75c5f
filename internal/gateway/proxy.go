package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// reqState is one proxied request's metering, shared by the handler, the
// proxy's hooks and the body wrappers through the request's context.
type reqState struct {
	p      *provider
	k      key
	target *url.URL
	c      *counters
	call   callInfo

	in     atomic.Int64 // request body bytes read
	out    atomic.Int64 // response body bytes read
	status int
	// answered: the upstream's response headers came.
	answered bool
	usage    usageParser
	// upstreamErr is the error the proxy answered with, if any.
	upstreamErr string
	// bodyEnded: the upstream's answer was read to its end; delivered:
	// and the proxy passed all of it on (ServeHTTP returned, not aborted).
	bodyEnded, delivered bool
}

type stateKey struct{}

// serve is the gateway: /<provider>/<path under its base URL>.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name, rest := splitProvider(r.URL.EscapedPath())
	p, ok := g.providers[name]
	if !ok {
		g.refuse(w, r, start, name, "", http.StatusNotFound, "not_found", fmt.Sprintf("no provider %q on this gateway: the path starts with the provider's name, as in the sandbox's *_BASE_URL", name), nil)
		return
	}
	k, ok := g.lookup(r.Context(), p.token(r.Header))
	switch {
	case !ok:
		g.refuse(w, r, start, name, "", http.StatusUnauthorized, "unauthenticated",
			"missing, wrong or revoked gateway token: send the sandbox's token for "+name+" where the provider's SDK sends its API key", nil)
		return
	case k.provider != name:
		g.refuse(w, r, start, name, k.sandbox, http.StatusUnauthorized, "unauthenticated", fmt.Sprintf("this token is for provider %q, not %q", k.provider, name), nil)
		return
	case !g.fromSandbox(r, k.sandbox):
		g.refuse(w, r, start, name, k.sandbox, http.StatusUnauthorized, "unauthenticated", "this token belongs to another sandbox: it is accepted only from its own sandbox's address", nil)
		return
	}
	target, err := p.target(rest, r.URL.RawQuery)
	if err != nil {
		g.refuse(w, r, start, name, k.sandbox, http.StatusBadRequest, "invalid_argument", err.Error(), nil)
		return
	}
	if !p.allowed(r.Method, target.Path[len(p.base.Path):]) {
		g.refuse(w, r, start, name, k.sandbox, http.StatusForbidden, "permission_denied",
			fmt.Sprintf("%s %s is not an API path that provider %s lets sandboxes use (allowed: %s; the operator sets them with paths in its [[provider]] table)", r.Method, rest, name, p.pathList()), nil)
		return
	}
	c := g.counter(k)
	if !g.acquire(k.sandbox) {
		c.reject()
		g.refuse(w, r, start, name, k.sandbox, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("this sandbox has %d LLM gateway requests in flight, the most it may (gateway_max_concurrent)", g.maxConcurrent),
			map[string]any{"budget": "concurrency", "limit": g.maxConcurrent, "used": g.maxConcurrent})
		return
	}
	defer g.release(k.sandbox)
	call, err := g.prepare(r, p, target.Path[len(p.base.Path):])
	if err != nil {
		g.refuse(w, r, start, name, k.sandbox, http.StatusBadRequest, "invalid_argument", err.Error(), nil)
		return
	}
	rej, decided := g.admitCall(r.Context(), k, c, p, call.reserve())
	if !decided {
		rej = c.admit(p, time.Now(), call.reserve())
	}
	if rej != nil {
		if rej.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(rej.retryAfter.Seconds()+0.999)))
		}
		g.refuse(w, r, start, name, k.sandbox, http.StatusTooManyRequests, rej.code, rej.message, map[string]any{"budget": rej.budget, "limit": rej.limit, "used": rej.used})
		return
	}

	st := &reqState{p: p, k: k, target: target, c: c, call: call}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, n: &st.in}
	}
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	// Deferred, so that the record is written also when the proxy aborts a
	// response cut off half-way (it panics with http.ErrAbortHandler).
	defer g.finish(r, st, start)
	// Full duplex: net/http must not read and close the request's body
	// under the transport as the answer's head is written (the transport
	// then fails and cuts the answer off; see internal/api's passBody).
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.proxy.ServeHTTP(w, r)
	st.delivered = st.bodyEnded
}

// admitCall decides the admission of a call of a provider with a budget
// or a rate limit on a store other daemons add to, where their counts,
// reservations and draws on the rate decide too (admitShared). decided is
// false when the caller is to decide on this daemon's counters (c.admit).
func (g *Gateway) admitCall(ctx context.Context, k key, c *counters, p *provider, reserve int64) (rej *rejection, decided bool) {
	if !g.opts.Shared || !p.budgeted() && p.rate == 0 {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, writeThroughTimeout)
	defer cancel()
	return g.admitShared(ctx, k, c, p, reserve)
}

// prepare reads what bounds a call's use from its body, before anything
// is forwarded, and puts the body back for the proxy: rewritten with
// stream_options.include_usage when the call streams OpenAI-style.
func (g *Gateway) prepare(r *http.Request, p *provider, rest string) (callInfo, error) {
	call := callInfo{metered: r.Method == http.MethodPost}
	if !call.metered {
		call.inEst = inputEstimate(max(r.ContentLength, 0))
		return call, nil
	}
	if !noOutput(rest) {
		call.maxOut = p.defaultMax
	}
	if r.Body == nil || r.Body == http.NoBody {
		return call, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxInspect+1))
	if err != nil {
		return call, fmt.Errorf("read the request body: %v", err)
	}
	if len(buf) > maxInspect {
		// Too big to hold: it streams on, unread, and reserves by size.
		call.inEst = inputEstimate(max(r.ContentLength, int64(len(buf))))
		call.unread = true
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return call, nil
	}
	f, body, injected, ok := inspect(buf, p.wantsUsageOption(rest))
	if ok && !noOutput(rest) {
		call.maxOut = f.maxOutput(p.defaultMax)
	}
	call.injected = injected
	call.inEst = inputEstimate(int64(len(body)))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.Header.Del("Content-Length")
	return call, nil
}

// acquire takes one of a sandbox's gateway_max_concurrent slots.
func (g *Gateway) acquire(sandbox string) bool {
	g.inflightMu.Lock()
	defer g.inflightMu.Unlock()
	if g.inflight[sandbox] >= g.maxConcurrent {
		return false
	}
	g.inflight[sandbox]++
	return true
}

func (g *Gateway) release(sandbox string) {
	g.inflightMu.Lock()
	defer g.inflightMu.Unlock()
	if g.inflight[sandbox]--; g.inflight[sandbox] <= 0 {
		delete(g.inflight, sandbox)
	}
}

// fromSandbox checks the source address of a request against the token's
// sandbox: on the sandbox network it must be that sandbox's address (or
// the host's own address there); from outside that network it must be one
// of the host's own addresses (the host holds the keys anyway: the
// operator's and benchmarks' calls, whose source the kernel picks among
// the host's addresses). Any other source, such as a container on another
// network or another machine that routes to the gateway address, is
// refused even with a valid token. With SandboxAddr (pods on a cluster's
// network, which hotcell does not own) the same holds with every address
// but the host's counting as the sandbox network: it must be the token's
// sandbox's address.
func (g *Gateway) fromSandbox(r *http.Request, id string) bool {
	if g.opts.SandboxAddr == nil && (g.opts.SandboxAt == nil || !g.opts.Subnet.IsValid()) {
		return true
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	if g.opts.SandboxAddr != nil {
		if g.hostAddr(addr) {
			return true
		}
		want, err := g.opts.SandboxAddr(r.Context(), id)
		if err != nil {
			g.log.Warn("look up the address of a gateway token's sandbox", "sandbox", id, "err", err)
			return false
		}
		return want.IsValid() && want.Unmap() == addr
	}
	if addr == g.opts.HostAddr {
		return true
	}
	if !g.opts.Subnet.Contains(addr) {
		return g.hostAddr(addr)
	}
	got, ok := g.opts.SandboxAt(addr)
	return ok && got == id
}

// hostAddr reports whether addr is one of the host's own addresses.
func (g *Gateway) hostAddr(addr netip.Addr) bool {
	if g.opts.IsHostAddr != nil {
		return g.opts.IsHostAddr(addr)
	}
	if addr.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
				return true
			}
		}
	}
	return false
}

// finish settles a proxied request: its reservation is released and it
// is charged its usage (settlement.charge), and its audit line written.
func (g *Gateway) finish(r *http.Request, st *reqState, start time.Time) {
	u := st.usage.result()
	reported := st.usage.reported()
	status := st.status
	// A sandbox that read the whole answer may close its connection
	// before this runs (an answer with a length ends at its last byte,
	// not when the handler returns), which cancels the request's context
	// too: that call was not cut.
	canceled := r.Context().Err() != nil && !st.delivered
	if canceled {
		// The sandbox hung up; the proxy canceled the upstream request.
		st.upstreamErr = "canceled by the sandbox"
		if status == 0 {
			status = 499
		}
	}
	// Cut: the upstream answered and the answer did not end normally.
	// A call canceled before any answer came counts as cut too: its input
	// was sent.
	cut := canceled || st.answered && st.upstreamErr != ""
	charged := settlement{call: st.call, status: st.status, cut: cut, inBytes: st.in.Load(), outBytes: st.out.Load(), reported: reported, sse: st.usage.mode == modeSSE, u: u}.charge()
	st.c.settle(st.call.reserve(), st.in.Load(), st.out.Load(), charged, !canceled && st.upstreamErr != "")
	wctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), writeThroughTimeout)
	g.writeThrough(wctx, st.k, st.c)
	cancel()
	attrs := []any{"sandbox", st.k.sandbox, "provider", st.p.name, "method", r.Method, "path", r.URL.Path,
		"status", status, "ms", time.Since(start).Milliseconds(), "bytesIn", st.in.Load(), "bytesOut", st.out.Load(),
		"inputTokens", charged.input, "outputTokens", charged.output, "totalTokens", charged.total}
	if st.call.metered && (!reported || cut) {
		attrs = append(attrs, "usageReported", reported, "reservedTokens", st.call.reserve())
	}
	if st.upstreamErr != "" {
		attrs = append(attrs, "err", st.upstreamErr)
	}
	g.log.Info("gateway request", attrs...)
}

// writeThroughTimeout bounds the store write at a call's end: a store that
// does not answer then leaves the counts to the next flush rather than
// holding the call's end up.
const writeThroughTimeout = 2 * time.Second

// refuse answers a request that is not forwarded, and audits it.
// Its audit lines are rate-limited per sandbox (per source address when
// no token matched): refusals cost a sandbox nothing, so it could send
// them as fast as it likes.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, start time.Time, provider, sandbox string, status int, code, msg string, extra map[string]any) {
	writeError(w, status, code, msg, extra)
	key := sandbox
	if key == "" {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		key = "addr " + host
	}
	g.refusedLog.Log(r.Context(), g.log, key, slog.LevelInfo, "gateway request refused", "sandbox", sandbox, "provider", provider, "method", r.Method, "path", r.URL.Path,
		"status", status, "code", code, "ms", time.Since(start).Milliseconds(), "remote", r.RemoteAddr)
}

// writeError writes hotcell's error document, with the top-level "type"
// and the error's "type" that the OpenAI and Anthropic SDKs read.
func writeError(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	e := map[string]any{"code": code, "type": code, "message": msg}
	for k, v := range extra {
		e[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": e})
}

// splitProvider splits an escaped request path /name/rest into name and
// the escaped /rest.
func splitProvider(escaped string) (name, rest string) {
	s := strings.TrimPrefix(escaped, "/")
	name, rest, _ = strings.Cut(s, "/")
	return name, "/" + rest
}

// target maps the escaped path under the provider's gateway URL to the
// upstream URL: base path + rest. A path that would leave the base (dot
// segments, encoded slashes or backslashes that an upstream might decode
// into them) is refused rather than cleaned: a sandbox gets exactly the
// provider's API and nothing else on that host.
func (p *provider) target(escapedRest, rawQuery string) (*url.URL, error) {
	rest, err := checkRest(escapedRest)
	if err != nil {
		return nil, err
	}
	u := *p.base
	u.Path = p.base.Path + rest
	// Keeps the sandbox's escaping (e.g. %20) where it is a valid one.
	u.RawPath = p.base.EscapedPath() + escapedRest
	u.RawQuery = rawQuery
	return &u, nil
}

// checkRest validates an escaped path and returns it unescaped.
func checkRest(escaped string) (string, error) {
	if !strings.HasPrefix(escaped, "/") {
		return "", fmt.Errorf("path must start with /")
	}
	for _, seg := range strings.Split(escaped[1:], "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return "", fmt.Errorf("path: bad escape in %q", seg)
		}
		if dec == "." || dec == ".." || strings.ContainsAny(dec, "/\\\x00") {
			return "", fmt.Errorf("path segment %q would leave the provider's base URL", seg)
		}
		if strings.Contains(seg, "%") && (strings.Contains(strings.ToLower(seg), "%2e") || strings.Contains(strings.ToLower(seg), "%25")) {
			// An upstream that decodes twice would see dot segments or
			// slashes; nothing in the providers' APIs needs these.
			return "", fmt.Errorf("path segment %q: encoded '.' or '%%' is not allowed", seg)
		}
	}
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		return "", fmt.Errorf("path: %v", err)
	}
	return dec, nil
}

// newProxy is the provider's reverse proxy: it flushes every write (SSE
// chunk by chunk), cancels the upstream request when the sandbox hangs up
// (the outgoing request carries the incoming one's context), and answers
// an unreachable upstream with 502 and a slow one with 504.
func newProxy(p *provider, log *slog.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport:     transport(p),
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Rewrite: func(pr *httputil.ProxyRequest) {
			st := pr.In.Context().Value(stateKey{}).(*reqState)
			u := *st.target
			pr.Out.URL = &u
			pr.Out.Host = ""
			h := pr.Out.Header
			// The token arrives in one of these; none may reach the upstream.
			h.Del("Authorization")
			h.Del("X-Api-Key")
			h.Del(p.header)
			h.Set(p.header, *p.keyValue.Load())
			// Identity encoding: the usage is read from the bytes as they pass.
			h.Del("Accept-Encoding")
			h.Del("Cookie")
		},
		ModifyResponse: func(resp *http.Response) error {
			st := resp.Request.Context().Value(stateKey{}).(*reqState)
			st.status = resp.StatusCode
			st.answered = true
			st.usage.contentType(resp.Header.Get("Content-Type"))
			resp.Body = &meterBody{ReadCloser: resp.Body, st: st}
			// The upstream's cookies are for the upstream's own clients.
			resp.Header.Del("Set-Cookie")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st := r.Context().Value(stateKey{}).(*reqState)
			if r.Context().Err() != nil {
				st.upstreamErr = "canceled by the sandbox"
				return // nobody is left to answer
			}
			status, code, msg := classify(p, err)
			st.status = status
			st.upstreamErr = msg
			writeError(w, status, code, msg, nil)
		},
	}
}

// classify turns a failed upstream round trip into a status and message.
// The message names the provider and the upstream host, never a key.
func classify(p *provider, err error) (int, string, string) {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return http.StatusGatewayTimeout, "upstream_timeout",
			fmt.Sprintf("provider %s: upstream %s did not answer within %s", p.name, p.base.Host, p.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is already in the message below
	}
	return http.StatusBadGateway, "upstream_unreachable",
		fmt.Sprintf("provider %s: upstream %s cannot be reached: %v", p.name, p.base.Host, err)
}

// countingBody counts the request body bytes the proxy sends upstream.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// meterBody counts the response bytes and reads the usage from them as
// they pass to the sandbox, without holding them back.
type meterBody struct {
	io.ReadCloser
	st *reqState
}

func (b *meterBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.st.out.Add(int64(n))
		b.st.usage.write(p[:n])
	}
	if err == io.EOF {
		b.st.bodyEnded = true
	}
	if err != nil && err != io.EOF && b.st.upstreamErr == "" {
		b.st.upstreamErr = "upstream response cut off: " + err.Error()
	}
	return n, err
}
