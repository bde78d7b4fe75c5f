package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// The HTTP preview proxy: a port inside a sandbox reached by path
// (/v1/sandboxes/{id}/ports/{port}/http/...) or by host name
// ({port}-{id}.<preview domain>). The agent makes the connection inside the
// sandbox; the daemon only talks to the agent.
//
// Access needs the API token, or the sandbox's preview token, unless the
// port is public. The preview token is derived, not stored: an HMAC of the
// sandbox's id and creation time under a key derived from the API token.
// It grants preview access to that one sandbox, survives daemon restarts,
// dies with the sandbox, and changes when the API token does.
//
// By host name, each preview is its own browser origin: a token given once
// in the query becomes an HttpOnly cookie for that host, so the page's later
// requests and WebSocket upgrades (dev-server hot reload) carry it, and the
// app's own cookies pass both ways. By path, every preview shares the API's
// origin, so cookies are not passed (one sandbox's app must not read
// another's) and the token must come with each request; that mode is meant
// for API clients, the host-name mode for browsers.

// DefaultPreviewTokenTTL is how long a preview token lasts when
// Options.PreviewTokenTTL is not set.
const DefaultPreviewTokenTTL = 24 * time.Hour

// previewToken returns a preview token for port of sb that expires at exp:
// "{port}.{expiry unix seconds}.{mac}". The MAC covers the sandbox, its
// creation time, the port and the expiry, so a token opens one port of one
// sandbox until it expires, and nothing in it can be changed.
func (s *Server) previewToken(sb wire.Sandbox, port int, exp time.Time) string {
	head := strconv.Itoa(port) + "." + strconv.FormatInt(exp.Unix(), 10)
	return head + "." + s.previewMAC(sb, head)
}

func (s *Server) previewMAC(sb wire.Sandbox, head string) string {
	key := hmac.New(sha256.New, []byte(s.opts.Token))
	key.Write([]byte("hotcell preview token v2"))
	mac := hmac.New(sha256.New, key.Sum(nil))
	fmt.Fprintf(mac, "%s\x00%d\x00%s", sb.ID, sb.CreatedAt.UnixNano(), head)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// validPreviewToken reports whether tok opens port of sb at now.
func (s *Server) validPreviewToken(sb wire.Sandbox, port int, tok string, now time.Time) bool {
	ps, rest, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	es, mac, ok := strings.Cut(rest, ".")
	if !ok || ps != strconv.Itoa(port) {
		return false
	}
	exp, err := strconv.ParseInt(es, 10, 64)
	if err != nil || !now.Before(time.Unix(exp, 0)) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(mac), []byte(s.previewMAC(sb, ps+"."+es))) == 1
}

// previewCookieName is the preview cookie's name for r: with TLS the
// __Host- prefix, which makes the browser refuse the cookie unless it is
// Secure, host-only and for Path=/, so a sibling preview name cannot set
// or shadow it (plain HTTP cannot carry a __Host- cookie).
func previewCookieName(r *http.Request) string {
	if r.TLS != nil {
		return "__Host-" + wire.PreviewTokenCookie
	}
	return wire.PreviewTokenCookie
}

// isPublic reports whether port of sb answers previews without a
// credential: a port made public, or any port of a sandbox made through
// the E2B API with public traffic (E2B's network.allowPublicTraffic, on
// by default there: docs/e2b.md).
func isPublic(sb wire.Sandbox, port int) bool {
	return slices.Contains(sb.PublicPorts, port) || sb.Labels[e2b.LabelPublicTraffic] == "true"
}

// presentedPreviewToken returns the preview token r carries, and whether it
// came in the query (to be turned into a cookie). Cookies count only by
// host name.
func presentedPreviewToken(r *http.Request, byHost bool) (tok string, fromQuery bool) {
	if t := r.Header.Get(wire.PreviewTokenHeader); t != "" {
		return t, false
	}
	if t := r.URL.Query().Get(wire.PreviewTokenQuery); t != "" {
		return t, true
	}
	return "", false
}

// presentedPreviewCookie returns the preview cookie r carries (by host
// name only).
func presentedPreviewCookie(r *http.Request) string {
	if c, err := r.Cookie(previewCookieName(r)); err == nil {
		return c.Value
	}
	return ""
}

// errPreviewAuth answers a preview request without valid credentials. It
// does not say whether the sandbox exists.
func errPreviewAuth(port int) error {
	return fmt.Errorf("preview of port %d needs the API token (Authorization: Bearer), or the sandbox's preview token "+
		"(%s header or %s query parameter; get it from POST /v1/sandboxes/{id}/ports/{port}/preview-url), "+
		"or the port made public: %w", port, wire.PreviewTokenHeader, wire.PreviewTokenQuery, errdefs.ErrUnauthenticated)
}

// previewAccess checks r's right to preview port of sandbox id (both
// already parsed; parseErr is what went wrong parsing them). It answers a
// bad id or port with 400 only to callers that sent credentials, 401 to
// anyone else. setCookie says to hand the token back as a cookie; byCookie
// says the preview cookie was the credential that let r in.
func (s *Server) previewAccess(r *http.Request, id string, port int, parseErr error, byHost bool) (setCookie string, byCookie bool, err error) {
	// The daemon's token or an API key, never the console's session: a
	// console page must not open previews on the API's origin by cookie.
	_, authErr := s.authenticateBearer(r)
	bearer := authErr == nil
	tok, fromQuery := presentedPreviewToken(r, byHost)
	var cookie string
	if byHost {
		cookie = presentedPreviewCookie(r)
	}
	if parseErr != nil {
		if bearer || tok != "" || cookie != "" {
			return "", false, parseErr
		}
		return "", false, errPreviewAuth(port)
	}
	if bearer {
		return "", false, nil
	}
	sb, err := s.opts.Manager.Get(r.Context(), id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", false, errPreviewAuth(port)
	}
	if err != nil {
		return "", false, err
	}
	now := time.Now()
	if tok != "" && s.validPreviewToken(sb, port, tok, now) {
		if fromQuery && byHost {
			return tok, false, nil
		}
		return "", false, nil
	}
	if cookie != "" && s.validPreviewToken(sb, port, cookie, now) {
		return "", true, nil
	}
	if isPublic(sb, port) {
		return "", false, nil
	}
	return "", false, errPreviewAuth(port)
}

// checkPreviewOrigin refuses a request let in by the preview cookie that
// changes state (any method but GET, HEAD and OPTIONS) or upgrades to a
// WebSocket, unless its Origin is the preview's own. The browser sends the
// cookie with requests that any page of the same site makes, and every
// preview name is the same site; without this, a page on sandbox A's
// preview could POST to sandbox B's, or open its WebSocket, as the user.
func checkPreviewOrigin(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		if r.Header.Get("Upgrade") == "" {
			return nil
		}
	}
	origin := r.Header.Get("Origin")
	if sameOrigin(origin, r) {
		return nil
	}
	return fmt.Errorf("preview %s: a %s request or WebSocket upgrade let in by the preview cookie needs the Origin header of this same preview (got %q); another page must not act here with the user's cookie. Send the preview token in the %s header instead: %w",
		r.Host, r.Method, clip(origin), wire.PreviewTokenHeader, errdefs.ErrPermissionDenied)
}

// sameOrigin reports whether origin (an Origin header) names r's own host
// with a web scheme: https under TLS, either without (a proxy in front may
// end TLS).
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || origin == "" || u.Path != "" || u.User != nil || u.RawQuery != "" {
		return false
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && r.TLS == nil:
	default:
		return false
	}
	return u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// previewByPath serves /v1/sandboxes/{id}/ports/{port}/http/{path...}.
// Handler lets it through without the bearer token; it checks access here.
func (s *Server) previewByPath(w http.ResponseWriter, r *http.Request) error {
	id, port, parseErr := pathIDPort(r)
	if _, _, err := s.previewAccess(r, id, port, parseErr, false); err != nil {
		return err
	}
	// A browser fetching a service worker script says so. A worker from a
	// preview by path would run on the API's origin with a scope the app
	// chooses; there is no way to allow it safely.
	if r.Header.Get("Service-Worker") == "script" {
		return fmt.Errorf("preview of port %d of sandbox %s: a preview by path is served on the API's origin and may not register a service worker (request header Service-Worker: script); use the preview by host name, {port}-{id}.<preview_domain>, which has an origin of its own: %w",
			port, id, errdefs.ErrPermissionDenied)
	}
	q := r.URL.Query()
	q.Del(wire.PreviewTokenQuery)
	r.Header.Del(wire.PreviewTokenHeader)
	return s.proxyApp(w, r, id, "/v1/ports/"+strconv.Itoa(port)+"/http/"+r.PathValue("path"), q)
}

// previewLabel returns the first label of host when host is a name under
// the preview domain, such as "8000-sb-0123456789ab" of
// "8000-sb-0123456789ab.preview.localhost:8080".
func previewLabel(host, domain string) (string, bool) {
	if domain == "" {
		return "", false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, ok := strings.CutSuffix(host, "."+domain)
	if !ok || label == "" || strings.Contains(label, ".") {
		return "", false
	}
	return label, true
}

// parsePreviewLabel splits "{port}-{id}" and validates both.
func parsePreviewLabel(label string) (id string, port int, err error) {
	ps, id, ok := strings.Cut(label, "-")
	if !ok {
		return "", 0, errdefs.Invalid("host", "%q is not {port}-{sandbox id}", clip(label))
	}
	if port, err = parsePort(ps); err != nil {
		return "", 0, err
	}
	return id, port, sandbox.ValidateID(id)
}

// servePreviewHost serves r if its Host is a preview name and reports
// whether it did. It runs before the API's bearer-token check: previews
// have their own credentials, and API routes are never served on a
// preview name.
func (s *Server) servePreviewHost(w http.ResponseWriter, r *http.Request) bool {
	label, ok := previewLabel(r.Host, s.opts.PreviewDomain)
	if !ok {
		return false
	}
	if id, port, err := parsePreviewLabel(label); err == nil && (port == e2b.EnvdPort || port == e2b.CodePort) && s.opts.E2B != nil {
		// 49983-{id}.<preview domain> is that sandbox's envd, the E2B
		// SDK's default envd URL, and 49999-{id} its code interpreter
		// (started on demand): the E2B handler checks the sandbox's
		// envd token. The host names the sandbox, whatever header the
		// client sent.
		r.Header.Set(e2b.SandboxIDHeader, id)
		s.opts.E2B.ServeHTTP(w, r)
		return true
	}
	s.adapt(func(w http.ResponseWriter, r *http.Request) error {
		id, port, parseErr := parsePreviewLabel(label)
		cookie, byCookie, err := s.previewAccess(r, id, port, parseErr, true)
		if err != nil {
			return err
		}
		if byCookie {
			if err := checkPreviewOrigin(r); err != nil {
				return err
			}
		}
		if cookie != "" {
			c := &http.Cookie{
				Name: previewCookieName(r), Value: cookie, Path: "/",
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode,
			}
			if _, es, ok := strings.Cut(cookie, "."); ok {
				es, _, _ = strings.Cut(es, ".")
				if exp, err := strconv.ParseInt(es, 10, 64); err == nil {
					c.Expires = time.Unix(exp, 0)
				}
			}
			http.SetCookie(w, c)
		}
		return s.proxyPreviewHost(w, r, id, port)
	}).ServeHTTP(w, r)
	return true
}

// proxyPreviewHost passes r to the app on port, keeping the app's cookies
// and the client's escaping, minus hotcell's own credentials.
func (s *Server) proxyPreviewHost(w http.ResponseWriter, r *http.Request, id string, port int) error {
	conn, err := s.opts.Manager.Agent(r.Context(), id)
	if err != nil {
		return err
	}
	defer s.begin(id)() // preview traffic is activity (docs/lifecycle.md)
	var proxyErr error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			prefix := "/v1/ports/" + strconv.Itoa(port) + "/http"
			pr.Out.URL = &url.URL{
				Scheme:   "http",
				Host:     "agent",
				Path:     prefix + pr.In.URL.Path,
				RawPath:  prefix + pr.In.URL.EscapedPath(),
				RawQuery: withoutQueryParam(pr.In.URL.RawQuery, wire.PreviewTokenQuery),
			}
			pr.Out.Host = "agent"
			pr.SetXForwarded()
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del(wire.PreviewTokenHeader)
			stripCookie(pr.Out.Header, wire.PreviewTokenCookie)
			stripCookie(pr.Out.Header, "__Host-"+wire.PreviewTokenCookie)
		},
		Transport:      conn.Transport(),
		FlushInterval:  -1,
		ModifyResponse: checkProxiedStatus,
		ErrorHandler:   func(w http.ResponseWriter, r *http.Request, err error) { proxyErr = err },
	}
	passBody(w)
	rp.ServeHTTP(w, r)
	if proxyErr != nil {
		return fmt.Errorf("preview port %d of sandbox %s: %w", port, id, errors.Join(errdefs.ErrUnavailable, proxyErr))
	}
	return nil
}

// withoutQueryParam removes name from a raw query, leaving the rest as the
// client wrote it (order and escaping matter to some apps).
func withoutQueryParam(raw, name string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

// stripCookie removes the cookie name from h's Cookie headers.
func stripCookie(h http.Header, name string) {
	vals := h.Values("Cookie")
	if len(vals) == 0 {
		return
	}
	var kept []string
	for _, v := range vals {
		for _, c := range strings.Split(v, ";") {
			c = strings.TrimSpace(c)
			if k, _, _ := strings.Cut(c, "="); c == "" || k == name {
				continue
			}
			kept = append(kept, c)
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}
