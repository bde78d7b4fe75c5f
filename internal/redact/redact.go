// Package redact hides the credentials a URL can carry (user info, tokens
// in its query) before the URL is logged, shown or stored. It is the one
// place that knows what in a URL is secret; it uses only the standard
// library so that any binary may use it.
package redact

import (
	"net/url"
	"strings"
)

// Mark replaces a secret.
const Mark = "REDACTED"

// URL returns raw for logs and messages: user info (a password, or a token
// in the user name as git hosts take it) becomes Mark, and so does the
// value of every query parameter whose name says it is a secret. The rest
// is left as written. Input that does not parse is still cleaned of user
// info.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return cutUserinfo(raw, Mark+"@")
	}
	changed := false
	if u.User != nil {
		u.User = url.User(Mark)
		changed = true
	}
	if q := Query(u.RawQuery); q != u.RawQuery {
		u.RawQuery = q
		changed = true
	}
	if !changed {
		return raw // keep the caller's spelling
	}
	return u.String()
}

// URLWithoutUserinfo returns raw with no user info at all, for a URL that
// is kept and used again (the origin of a cloned repository, the URL a
// sandbox records), where a Mark would read as a user name.
func URLWithoutUserinfo(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return cutUserinfo(raw, "")
	}
	if u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// Query returns a raw query string with the value of every secret
// parameter replaced by Mark; order and escaping of the rest are kept.
// An env parameter (env=NAME=value, as interactive exec and terminals take
// a variable) keeps its name and loses its value: environment variables
// are how secrets reach a sandbox.
func Query(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, hasValue := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		switch {
		case hasValue && IsSecretName(name):
			parts[i] = k + "=" + Mark
		case hasValue && name == EnvParam:
			parts[i] = k + "=" + envValue(p[len(k)+1:])
		}
	}
	return strings.Join(parts, "&")
}

// EnvParam is the query parameter that carries NAME=value environment
// variables.
const EnvParam = "env"

// envValue returns the raw value v of an env parameter (NAME=value,
// escaped or not) as NAME=Mark, the name as written.
func envValue(v string) string {
	if i := strings.Index(v, "="); i >= 0 {
		return v[:i] + "=" + Mark
	}
	if i := strings.Index(strings.ToUpper(v), "%3D"); i >= 0 {
		return v[:i] + "%3D" + Mark
	}
	return Mark
}

// secretWords are parts of parameter names that carry secrets: tokens,
// keys, signatures of pre-signed URLs, passwords.
var secretWords = []string{"token", "secret", "passw", "signature", "credential", "key", "auth"}

// IsSecretName reports whether a query parameter (or header) called name
// holds a secret. It errs on the side of hiding.
func IsSecretName(name string) bool {
	n := strings.ToLower(name)
	if n == "sig" || n == "code" {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// cutUserinfo replaces the user info of a URL that url.Parse refused
// (a bad escape in a password, say) with repl.
func cutUserinfo(raw, repl string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	start := i + len("://")
	end := len(raw)
	if j := strings.IndexAny(raw[start:], "/?#"); j >= 0 {
		end = start + j
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + repl + raw[start+at+1:]
}
