// Package egress owns where sandboxes may connect: the egress bridge network
// they join, the host firewall rules keyed on their addresses, and the
// allowlisting DNS resolver on the network's gateway that adds the addresses
// of allowlisted names to a sandbox's rules for their TTL.
package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Limits on a policy, so one request cannot make thousands of rules.
const (
	MaxAllow     = 256
	maxEntryLen  = 300
	maxDomainLen = 253
)

// Entry is one parsed allowlist entry: a domain (exact, or a "*." wildcard
// that matches strictly below Domain) or a prefix, with an optional port
// (0: any port).
type Entry struct {
	Domain   string // lower case, no trailing dot; empty for a prefix
	Wildcard bool
	Prefix   netip.Prefix
	Port     int
}

// String renders the entry in the form it was given (normalised).
func (e Entry) String() string {
	var s string
	switch {
	case e.Domain != "" && e.Wildcard:
		s = "*." + e.Domain
	case e.Domain != "":
		s = e.Domain
	case e.Prefix.Addr().Is6() && e.Port != 0:
		s = "[" + prefixString(e.Prefix) + "]"
	default:
		s = prefixString(e.Prefix)
	}
	if e.Port != 0 {
		s += ":" + strconv.Itoa(e.Port)
	}
	return s
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// Policy is a validated EgressPolicy.
type Policy struct {
	Mode    string
	Entries []Entry
}

// Wire returns the policy in its API form.
func (p Policy) Wire() wire.EgressPolicy {
	w := wire.EgressPolicy{Mode: p.Mode}
	for _, e := range p.Entries {
		w.Allow = append(w.Allow, e.String())
	}
	return w
}

// MatchName returns the entries whose domain matches name (lower case, no
// trailing dot). An exact entry matches only itself; "*.example.com"
// matches every name below example.com but not example.com itself.
func (p Policy) MatchName(name string) []Entry {
	var out []Entry
	for _, e := range p.Entries {
		if e.Domain == "" {
			continue
		}
		if e.Wildcard {
			if strings.HasSuffix(name, "."+e.Domain) {
				out = append(out, e)
			}
		} else if name == e.Domain {
			out = append(out, e)
		}
	}
	return out
}

// ParsePolicy validates p. field names the policy in errors, e.g. "egress";
// an entry's error names it as field.allow[i]. defaultMode fills an empty
// mode when there is no allowlist.
func ParsePolicy(field string, p wire.EgressPolicy, defaultMode string) (Policy, error) {
	mode := p.Mode
	if mode == "" {
		mode = defaultMode
		if len(p.Allow) > 0 {
			mode = wire.EgressAllowlist
		}
	}
	switch mode {
	case wire.EgressOpen, wire.EgressNone, wire.EgressAllowlist:
	default:
		return Policy{}, errdefs.Invalid(field+".mode", "unknown mode %q (want open, none or allowlist)", clip(mode))
	}
	if len(p.Allow) > 0 && mode != wire.EgressAllowlist {
		return Policy{}, errdefs.Invalid(field+".allow", "an allowlist needs mode allowlist, not %s", mode)
	}
	if len(p.Allow) > MaxAllow {
		return Policy{}, errdefs.Invalid(field+".allow", "at most %d entries", MaxAllow)
	}
	out := Policy{Mode: mode}
	seen := map[string]bool{}
	for i, s := range p.Allow {
		e, err := ParseEntry(s)
		if err != nil {
			return Policy{}, errdefs.Invalid(fmt.Sprintf("%s.allow[%d]", field, i), "%q: %v", clip(s), err)
		}
		if k := e.String(); !seen[k] {
			seen[k] = true
			out.Entries = append(out.Entries, e)
		}
	}
	return out, nil
}

// ParseEntry parses one allowlist entry: a domain, "*.domain", an address
// or CIDR, each optionally followed by ":port"; an IPv6 address or CIDR
// with a port is written in brackets.
func ParseEntry(s string) (Entry, error) {
	if s == "" {
		return Entry{}, fmt.Errorf("empty entry")
	}
	if len(s) > maxEntryLen {
		return Entry{}, fmt.Errorf("longer than %d bytes", maxEntryLen)
	}
	host, port, err := splitPort(s)
	if err != nil {
		return Entry{}, err
	}
	if host == "" {
		return Entry{}, fmt.Errorf("no host before the port")
	}
	if looksLikeAddress(strings.TrimSuffix(host, ".")) {
		pfx, err := parsePrefix(host)
		if err != nil {
			return Entry{}, err
		}
		return Entry{Prefix: pfx, Port: port}, nil
	}
	e := Entry{Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		e.Wildcard = true
		host = rest
	}
	d, err := normalizeDomain(host)
	if err != nil {
		return Entry{}, err
	}
	if e.Wildcard && !strings.Contains(d, ".") {
		// "*.com" would open a whole top-level domain.
		return Entry{}, fmt.Errorf("a wildcard needs at least two labels after \"*.\"")
	}
	e.Domain = d
	return e, nil
}

// splitPort splits an optional ":port". A bare IPv6 address has colons of
// its own, so a port after IPv6 needs brackets.
func splitPort(s string) (string, int, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("missing ']'")
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("unexpected %q after ']'", clip(rest))
		}
		port, err := parsePort(p)
		return host, port, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil // IPv6 without a port
	}
	host, p, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parsePort(p)
	return host, port, err
}

func parsePort(p string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || p == "" || p[0] < '0' || p[0] > '9' || len(p) > 5 {
		return 0, fmt.Errorf("port %q is not a number", clip(p))
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %d is outside 1-65535", n)
	}
	return n, nil
}

// looksLikeAddress tells an address or CIDR from a name: names have a
// letter in their last label, addresses have none (or have a colon).
func looksLikeAddress(h string) bool {
	if strings.ContainsAny(h, ":/") {
		return true
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	return last != "" && strings.Trim(last, "0123456789") == ""
}

func parsePrefix(h string) (netip.Prefix, error) {
	if strings.Contains(h, "/") {
		p, err := netip.ParsePrefix(h)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not a CIDR: %v", err)
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("not a CIDR: zones are not allowed")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an address: %v", err)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("not an address: zones are not allowed")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// normalizeDomain checks a DNS name (letters, digits, '-' and '_' in
// labels of 1 to 63 characters) and returns it in lower case without a
// trailing dot.
func normalizeDomain(d string) (string, error) {
	d = strings.ToLower(strings.TrimSuffix(d, "."))
	if d == "" {
		return "", fmt.Errorf("empty domain")
	}
	if len(d) > maxDomainLen {
		return "", fmt.Errorf("domain longer than %d characters", maxDomainLen)
	}
	for _, label := range strings.Split(d, ".") {
		if label == "*" || strings.Contains(label, "*") {
			return "", fmt.Errorf("a wildcard is allowed only as the whole first label (\"*.example.com\")")
		}
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("labels must be 1 to 63 characters between dots")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-'", label)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "", fmt.Errorf("%q is not allowed in a domain (letters, digits, '-', '_' and '.')", r)
			}
		}
	}
	return d, nil
}

// NormalizeName returns a queried DNS name in the form MatchName expects.
func NormalizeName(n string) string { return strings.ToLower(strings.TrimSuffix(n, ".")) }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
