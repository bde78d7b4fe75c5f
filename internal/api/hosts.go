package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// HostAllowlist says which Host headers the API answers. A page on an
// attacker's domain whose name the attacker re-points at 127.0.0.1 (DNS
// rebinding) reaches the daemon with the browser's same-origin blessing,
// but its requests still name the attacker's domain in Host; refusing
// names the daemon was not told about defeats it. An IP literal cannot
// be rebound, so every address is answered: the daemon reached by the
// address of an interface it listens on keeps working.
type HostAllowlist struct {
	exact    map[string]bool
	suffixes []string // ".example.com" of "*.example.com"
	any      bool
}

// NewHostAllowlist allows localhost and its subdomains, listenHost (the
// host of the listen address, when it is a name), the preview domain and
// its subdomains, and names: "api.example.com", "*.example.com" (the
// subdomains) or "*" (any Host: the check is off).
func NewHostAllowlist(listenHost, previewDomain string, names []string) *HostAllowlist {
	a := &HostAllowlist{exact: map[string]bool{"localhost": true}, suffixes: []string{".localhost"}}
	add := func(n string) {
		n = normalizeHost(n)
		switch {
		case n == "":
		case n == "*":
			a.any = true
		case strings.HasPrefix(n, "*."):
			a.suffixes = append(a.suffixes, n[1:])
		default:
			a.exact[n] = true
		}
	}
	add(listenHost)
	if previewDomain != "" {
		add(previewDomain)
		add("*." + previewDomain)
	}
	for _, n := range names {
		add(n)
	}
	return a
}

// Allowed reports whether a request with this Host header (host or
// host:port) is answered.
func (a *HostAllowlist) Allowed(hostport string) bool {
	if a == nil || a.any {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = normalizeHost(host)
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends that
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return true
	}
	if a.exact[host] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// errHostNotAllowed names the setting that would let host in.
func errHostNotAllowed(r *http.Request) error {
	return fmt.Errorf("host %q is not a name this daemon answers to (a defence against DNS rebinding): use a loopback address, the listen address or the preview domain, or add the name to allowed_hosts (--allowed-hosts, HOTCELL_ALLOWED_HOSTS): %w",
		clip(r.Host), errdefs.ErrPermissionDenied)
}
