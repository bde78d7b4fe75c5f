package config

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Provider kinds of the LLM gateway.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
	ProviderGeneric   = "generic"
)

// DefaultProviderTimeout bounds how long the gateway waits for an
// upstream's response headers. A non-streamed completion sends its headers
// only when it is done, so this is minutes, not seconds.
const DefaultProviderTimeout = 5 * time.Minute

// DefaultMaxTokens is what the gateway reserves of a token budget for the
// answer of a request that names no max_tokens (default_max_tokens).
const DefaultMaxTokens = 4096

// DefaultGatewayMaxConcurrent is gateway_max_concurrent's default.
const DefaultGatewayMaxConcurrent = "8"

// Provider is one upstream of the LLM gateway: a `[[provider]]` table in
// the config file or in the file named by providers_file. The key itself is
// never part of the config: KeyEnv or KeyFile say where the daemon reads it.
type Provider struct {
	// Name is the provider's id: the first path element of its gateway
	// URL and what a create request's "gateway" list names.
	Name string `toml:"name"`
	// Kind is openai, anthropic or generic.
	Kind string `toml:"kind"`
	// BaseURL is the upstream URL that the sandbox's base URL stands for,
	// e.g. https://api.openai.com/v1 or https://api.anthropic.com.
	BaseURL string `toml:"base_url"`
	// KeyEnv names the daemon's environment variable holding the key.
	KeyEnv string `toml:"key_env"`
	// KeyFile is a file holding the key (surrounding space is trimmed).
	KeyFile string `toml:"key_file"`
	// Header and Format say how a generic upstream wants the key: the
	// header name (default Authorization) and its value with {key} where
	// the key goes (default "Bearer {key}"). Sandboxes present their token
	// the same way.
	Header string `toml:"header"`
	Format string `toml:"format"`
	// Per-sandbox limits; 0 is unlimited.
	BudgetRequests int64 `toml:"budget_requests"`
	BudgetTokens   int64 `toml:"budget_tokens"`
	RatePerMinute  int64 `toml:"rate_per_minute"`
	// Timeout bounds the wait for the upstream's response headers, as a
	// duration such as "90s"; empty is DefaultProviderTimeout.
	Timeout string `toml:"timeout"`
	// Paths are the API paths, relative to BaseURL, that sandboxes may
	// call: "[METHOD ]path", path ending in "/*" for everything under it.
	// Empty is the kind's default (DefaultPaths).
	Paths []string `toml:"paths"`
	// DefaultMaxTokens is reserved of the token budget for the answer of a
	// request without max_tokens; 0 is DefaultMaxTokens.
	DefaultMaxTokens int64 `toml:"default_max_tokens"`

	// source is where the entry came from, for error messages.
	source string
}

// Source says which file the provider came from.
func (p Provider) Source() string { return p.source }

// TimeoutDuration is Timeout parsed, or the default.
func (p Provider) TimeoutDuration() time.Duration {
	d, err := time.ParseDuration(p.Timeout)
	if err != nil || d <= 0 {
		return DefaultProviderTimeout
	}
	return d
}

// providerFile is the shape of a file with [[provider]] tables.
type providerFile struct {
	Provider []Provider `toml:"provider"`
}

// applyProviders reads the [[provider]] tables of a TOML document. Keys a
// provider table should not have are errors: a misspelt budget must not
// silently mean unlimited.
func (c *Config) applyProviders(data []byte, path string) error {
	var pf providerFile
	md, err := toml.Decode(string(data), &pf)
	if err != nil {
		return fmt.Errorf("config: parse %s: %w", path, err)
	}
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == "provider" {
			return fmt.Errorf("config: %s: unknown key %q in [[provider]] (known: name, kind, base_url, key_env, key_file, header, format, budget_requests, budget_tokens, rate_per_minute, timeout, paths, default_max_tokens)", path, k.String())
		}
	}
	for i := range pf.Provider {
		pf.Provider[i].source = fmt.Sprintf("file %s, provider[%d]", path, len(c.Providers)+i)
	}
	c.Providers = append(c.Providers, pf.Provider...)
	return nil
}

// validateProviders reads providers_file, if set, and checks every
// provider. An error names the entry and what to fix.
func (c *Config) validateProviders(bad func(key string, value any, format string, args ...any) error) error {
	if c.ProvidersFile != "" && !c.providersFileRead {
		data, err := os.ReadFile(c.ProvidersFile)
		if err != nil {
			return bad("providers_file", c.ProvidersFile, "cannot be read: %v", err)
		}
		if err := c.applyProviders(data, c.ProvidersFile); err != nil {
			return err
		}
		c.providersFileRead = true
	}
	if n, err := strconv.Atoi(c.GatewayMaxConcurrent); err != nil || n < 1 || n > 10000 {
		return bad("gateway_max_concurrent", c.GatewayMaxConcurrent, "must be a number from 1 to 10000")
	}
	seen := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		if err := p.validate(); err != nil {
			name := p.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i)
			}
			return fmt.Errorf("config: provider %q (%s): %v", name, p.source, err)
		}
		if seen[p.Name] {
			return fmt.Errorf("config: provider %q (%s): the name is used by an earlier provider", p.Name, p.source)
		}
		seen[p.Name] = true
	}
	return nil
}

// ValidProviderName reports whether s can name a provider: 1 to 32 of a-z,
// 0-9 and '-', starting with a letter. It becomes a URL path element and,
// upper-cased with '_' for '-', part of an environment variable's name.
func ValidProviderName(s string) bool {
	if s == "" || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func (p *Provider) validate() error {
	if !ValidProviderName(p.Name) {
		return fmt.Errorf("name must be 1 to 32 of a-z, 0-9 and '-', starting with a letter")
	}
	p.Kind = strings.ToLower(strings.TrimSpace(p.Kind))
	switch p.Kind {
	case ProviderOpenAI, ProviderAnthropic:
		if p.Header != "" || p.Format != "" {
			return fmt.Errorf("header and format are only for kind generic (kind %s has its own)", p.Kind)
		}
	case ProviderGeneric:
		if p.Header == "" {
			p.Header = "Authorization"
		}
		if p.Format == "" {
			p.Format = "Bearer {key}"
		}
		if strings.ContainsAny(p.Header, " :\r\n\t") {
			return fmt.Errorf("header %q must be an HTTP header name", p.Header)
		}
		if strings.Count(p.Format, "{key}") != 1 || strings.ContainsAny(p.Format, "\r\n") {
			return fmt.Errorf("format %q must hold {key} exactly once, on one line", p.Format)
		}
	default:
		return fmt.Errorf("kind %q must be openai, anthropic or generic", p.Kind)
	}
	u, err := url.Parse(p.BaseURL)
	switch {
	case err != nil:
		return fmt.Errorf("base_url %q: %v", p.BaseURL, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("base_url %q must be an absolute http or https URL", p.BaseURL)
	case u.User != nil:
		return fmt.Errorf("base_url must not hold credentials: use key_env or key_file")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("base_url %q must not have a query or fragment", p.BaseURL)
	}
	if (p.KeyEnv == "") == (p.KeyFile == "") {
		return fmt.Errorf("set exactly one of key_env (an environment variable) and key_file (a file) to say where the key is")
	}
	if p.BudgetRequests < 0 || p.BudgetTokens < 0 || p.RatePerMinute < 0 {
		return fmt.Errorf("budget_requests, budget_tokens and rate_per_minute must not be negative (0 is unlimited)")
	}
	if p.Timeout != "" {
		if d, err := time.ParseDuration(p.Timeout); err != nil || d <= 0 {
			return fmt.Errorf("timeout %q must be a positive duration such as \"90s\"", p.Timeout)
		}
	}
	if p.DefaultMaxTokens < 0 {
		return fmt.Errorf("default_max_tokens must not be negative (0 is %d)", DefaultMaxTokens)
	}
	for i, pat := range p.Paths {
		if _, _, err := ParsePathPattern(pat); err != nil {
			return fmt.Errorf("paths[%d]: %v", i, err)
		}
	}
	return nil
}

// DefaultPaths are the API paths a provider of a kind allows when its
// config names none: the model calls (chat, completions, responses,
// messages, embeddings) and the model list; not files, batches, vector
// stores, fine-tuning or anything else the shared key could reach.
func DefaultPaths(kind string) []string {
	if kind == ProviderAnthropic {
		return []string{"POST v1/messages", "POST v1/messages/count_tokens", "POST v1/complete", "GET v1/models", "GET v1/models/*"}
	}
	return []string{"POST chat/completions", "POST completions", "POST responses", "POST embeddings", "GET models", "GET models/*"}
}

// AllowedPaths are the provider's paths, or its kind's default.
func (p Provider) AllowedPaths() []string {
	if len(p.Paths) > 0 {
		return p.Paths
	}
	return DefaultPaths(p.Kind)
}

// MaxTokensDefault is DefaultMaxTokens of the provider, or the default.
func (p Provider) MaxTokensDefault() int64 {
	if p.DefaultMaxTokens > 0 {
		return p.DefaultMaxTokens
	}
	return DefaultMaxTokens
}

// ParsePathPattern splits "[METHOD ]path" into the method (empty: any)
// and the path without a leading slash. The path is plain segments, the
// last of which may be "*" (everything under it).
func ParsePathPattern(pat string) (method, path string, err error) {
	pat = strings.TrimSpace(pat)
	if m, rest, ok := strings.Cut(pat, " "); ok {
		method, pat = m, strings.TrimSpace(rest)
		if method == "" || strings.ToUpper(method) != method || strings.ContainsAny(method, "/*") {
			return "", "", fmt.Errorf("%q: the method must be upper-case, as in \"POST chat/completions\"", pat)
		}
	}
	path = strings.TrimPrefix(pat, "/")
	if path == "" {
		return "", "", fmt.Errorf("empty path")
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		switch {
		case s == "*" && i == len(segs)-1:
		case s == "", s == ".", s == "..", strings.ContainsAny(s, "*%?#\\ "):
			return "", "", fmt.Errorf("%q: segments are plain names; only the last may be *", pat)
		}
	}
	return method, path, nil
}

// MaxConcurrent is gateway_max_concurrent as a number.
func (c Config) MaxConcurrent() int {
	n, err := strconv.Atoi(c.GatewayMaxConcurrent)
	if err != nil || n < 1 {
		n, _ = strconv.Atoi(DefaultGatewayMaxConcurrent)
	}
	return n
}

// Reload loads the configuration again as Load did (same flags, same
// environment lookup, the files read anew), for a daemon that re-reads
// its providers' keys without a restart. A Config not made by Load has
// nothing to reload from.
func (c Config) Reload() (Config, error) {
	if c.reload == nil {
		return Config{}, fmt.Errorf("config: not loaded from flags and files; nothing to reload")
	}
	return c.reload()
}

// ReadKey reads the provider's key from the environment or its file. The
// error names where it looked, never the key.
func (p Provider) ReadKey(getenv func(string) string) (string, error) {
	var key string
	if p.KeyEnv != "" {
		if getenv == nil {
			getenv = os.Getenv
		}
		key = strings.TrimSpace(getenv(p.KeyEnv))
		if key == "" {
			return "", fmt.Errorf("provider %q: environment variable %s (key_env) is not set", p.Name, p.KeyEnv)
		}
		return key, nil
	}
	data, err := os.ReadFile(p.KeyFile)
	if err != nil {
		return "", fmt.Errorf("provider %q: read key_file: %w", p.Name, err)
	}
	key = strings.TrimSpace(string(data))
	if key == "" {
		return "", fmt.Errorf("provider %q: key_file %s is empty", p.Name, p.KeyFile)
	}
	if strings.ContainsAny(key, "\r\n\x00") {
		return "", fmt.Errorf("provider %q: key_file %s holds more than one line", p.Name, p.KeyFile)
	}
	return key, nil
}
