package gateway

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/wire"
)

// provider is a configured upstream with its key loaded.
type provider struct {
	name, kind string
	base       *url.URL
	// header carries the key upstream as prefix+key+suffix; sandboxes
	// present their token the same way (anthropic also as a bearer token).
	header         string
	prefix, suffix string
	// keyValue is the whole header value, key included; a reload swaps it.
	keyValue       atomic.Pointer[string]
	cfg            config.Provider // as loaded, for Reload
	paths          []pathRule
	defaultMax     int64 // reserved for a call's answer when it names no max_tokens
	budgetRequests int64
	budgetTokens   int64
	rate           int64
	timeout        time.Duration
	proxy          *httputil.ReverseProxy
}

func newProvider(pc config.Provider, getenv func(string) string, log *slog.Logger) (*provider, error) {
	key, err := pc.ReadKey(getenv)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(pc.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("provider %q: base_url: %w", pc.Name, err)
	}
	base.Path = strings.TrimSuffix(base.Path, "/")
	base.RawPath = ""
	p := &provider{
		name: pc.Name, kind: pc.Kind, base: base, cfg: pc,
		budgetRequests: pc.BudgetRequests, budgetTokens: pc.BudgetTokens, rate: pc.RatePerMinute,
		timeout: pc.TimeoutDuration(), defaultMax: pc.MaxTokensDefault(),
	}
	for _, pat := range pc.AllowedPaths() {
		m, path, err := config.ParsePathPattern(pat)
		if err != nil {
			return nil, fmt.Errorf("provider %q: paths: %w", pc.Name, err)
		}
		r := pathRule{method: m, path: path}
		if rest, ok := strings.CutSuffix(path, "/*"); ok {
			r.path, r.prefix = rest+"/", true
		} else if path == "*" {
			r.path, r.prefix = "", true
		}
		p.paths = append(p.paths, r)
	}
	format := "{key}"
	switch pc.Kind {
	case config.ProviderOpenAI:
		p.header, format = "Authorization", "Bearer {key}"
	case config.ProviderAnthropic:
		p.header = "X-Api-Key"
	default:
		p.header, format = http.CanonicalHeaderKey(pc.Header), pc.Format
		if p.header == "" {
			p.header = "Authorization"
		}
		if !strings.Contains(format, "{key}") {
			format = "Bearer {key}"
		}
	}
	p.prefix, p.suffix, _ = strings.Cut(format, "{key}")
	p.setKey(key)
	p.proxy = newProxy(p, log)
	return p, nil
}

func (p *provider) setKey(key string) {
	v := p.prefix + key + p.suffix
	p.keyValue.Store(&v)
}

// pathRule is one allowed path: exact, or everything under path (which
// then ends in "/") when prefix is set; any method if method is empty.
type pathRule struct {
	method, path string
	prefix       bool
}

// allowed reports whether method and the unescaped path under the base
// URL (with its leading slash) are among the provider's paths.
func (p *provider) allowed(method, rest string) bool {
	rest = strings.TrimPrefix(rest, "/")
	for _, r := range p.paths {
		if r.method != "" && r.method != method {
			continue
		}
		if r.prefix && strings.HasPrefix(rest, r.path) && len(rest) > len(r.path) || !r.prefix && rest == r.path {
			return true
		}
	}
	return false
}

// pathList is the allowed paths as configured, for error messages.
func (p *provider) pathList() string { return strings.Join(p.cfg.AllowedPaths(), ", ") }

// budgeted says whether p counts a sandbox's requests or tokens against a
// budget.
func (p *provider) budgeted() bool { return p.budgetRequests > 0 || p.budgetTokens > 0 }

func (p *provider) budget() wire.GatewayBudget {
	return wire.GatewayBudget{Requests: p.budgetRequests, Tokens: p.budgetTokens, RatePerMinute: p.rate}
}

// envNames are the sandbox's variables for this provider, as pairs of
// base URL and token: HOTCELL_<NAME>_*, and with standard the names the
// provider's official SDKs read.
func (p *provider) envNames(standard bool) []string {
	n := "HOTCELL_" + strings.ToUpper(strings.ReplaceAll(p.name, "-", "_"))
	out := []string{n + "_BASE_URL", n + "_TOKEN"}
	if standard {
		switch p.kind {
		case config.ProviderOpenAI:
			out = append(out, "OPENAI_BASE_URL", "OPENAI_API_KEY")
		case config.ProviderAnthropic:
			out = append(out, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")
		}
	}
	return out
}

// token returns the sandbox token a request presents, where the
// provider's SDKs put the key.
func (p *provider) token(h http.Header) string {
	if p.kind == config.ProviderAnthropic {
		if v := h.Get("X-Api-Key"); v != "" {
			return v
		}
		// The Anthropic SDKs send an auth token (ANTHROPIC_AUTH_TOKEN) as a bearer.
		v, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		return v
	}
	v := h.Get(p.header)
	v, ok := strings.CutPrefix(v, p.prefix)
	if !ok {
		return ""
	}
	v, ok = strings.CutSuffix(v, p.suffix)
	if !ok {
		return ""
	}
	return v
}

// transport is one provider's connection pool to its upstream. Compression
// is off so that SSE events pass as they come and usage can be read from
// the bytes as they pass.
func transport(p *provider) *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		ResponseHeaderTimeout: p.timeout,
		DisableCompression:    true,
	}
}
