package config

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Egress defaults. 10.213.0.0/16 sits outside Docker's default address
// pools (172.17-31.0.0/16, 192.168.0.0/16) and the ranges home and cloud
// networks usually hand out.
const (
	DefaultEgressNetwork     = "hotcell-egress"
	DefaultEgressSubnet      = "10.213.0.0/16"
	DefaultEgressMode        = "open"
	DefaultEgressGatewayPort = "8090"
	resolvConf               = "/etc/resolv.conf"
)

// EgressSettings are the egress settings, parsed.
type EgressSettings struct {
	Network     string
	Subnet      netip.Prefix
	Upstreams   []string
	DefaultMode string
	GatewayPort int
	// AllowPrivate are the private networks sandboxes may reach.
	AllowPrivate []netip.Prefix
}

// Egress returns the validated egress settings.
func (c Config) Egress() EgressSettings {
	s := EgressSettings{Network: c.EgressNetwork, DefaultMode: c.EgressDefaultMode}
	s.Subnet, _ = netip.ParsePrefix(c.EgressSubnet)
	s.GatewayPort, _ = strconv.Atoi(c.EgressGatewayPort)
	s.AllowPrivate, _ = parseCIDRList(c.EgressAllowPrivate)
	for _, u := range strings.Split(c.EgressDNSUpstream, ",") {
		if u = strings.TrimSpace(u); u != "" {
			s.Upstreams = append(s.Upstreams, u)
		}
	}
	return s
}

// validateEgress checks the egress settings and fills the DNS upstream
// from the host's resolv.conf when none is set.
func (c *Config) validateEgress(bad func(key string, value any, format string, args ...any) error) error {
	if c.EgressNetwork == "" || strings.ContainsAny(c.EgressNetwork, " /:\x00") || len(c.EgressNetwork) > 64 {
		return bad("egress_network", c.EgressNetwork, "must be a network name of 1 to 64 characters without spaces, '/' or ':'")
	}
	p, err := netip.ParsePrefix(c.EgressSubnet)
	if err != nil {
		return bad("egress_subnet", c.EgressSubnet, "must be an IPv4 CIDR such as %s: %v", DefaultEgressSubnet, err)
	}
	if !p.Addr().Is4() || p.Bits() > 28 || p.Bits() < 8 {
		return bad("egress_subnet", c.EgressSubnet, "must be an IPv4 CIDR from /8 to /28")
	}
	c.EgressSubnet = p.Masked().String()
	switch c.EgressDefaultMode = strings.ToLower(c.EgressDefaultMode); c.EgressDefaultMode {
	case "open", "none", "allowlist":
	default:
		return bad("egress_default_mode", c.EgressDefaultMode, "must be open, none or allowlist")
	}
	if n, err := strconv.Atoi(c.EgressGatewayPort); err != nil || n < 0 || n > 65535 {
		return bad("egress_gateway_port", c.EgressGatewayPort, "must be a port from 0 to 65535")
	}
	if ps, err := parseCIDRList(c.EgressAllowPrivate); err != nil {
		return bad("egress_allow_private", c.EgressAllowPrivate, "must be comma-separated IPv4 CIDRs such as 10.1.0.0/16: %v", err)
	} else {
		c.EgressAllowPrivate = strings.Join(prefixStrings(ps), ",")
	}
	if strings.TrimSpace(c.EgressDNSUpstream) == "" {
		ups, err := hostResolvers(resolvConf)
		if err != nil || len(ups) == 0 {
			return bad("egress_dns_upstream", c.EgressDNSUpstream, "is not set and %s names no nameserver; set it to host:port", resolvConf)
		}
		c.EgressDNSUpstream = strings.Join(ups, ",")
	}
	var ups []string
	for _, u := range strings.Split(c.EgressDNSUpstream, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if _, err := netip.ParseAddr(u); err == nil {
			u = net.JoinHostPort(u, "53")
		}
		ap, err := netip.ParseAddrPort(u)
		if err != nil || ap.Port() == 0 {
			return bad("egress_dns_upstream", c.EgressDNSUpstream, "%q must be an address with an optional :port", u)
		}
		ups = append(ups, ap.String())
	}
	c.EgressDNSUpstream = strings.Join(ups, ",")
	return nil
}

// parseCIDRList parses comma-separated IPv4 CIDRs (a bare address is a /32).
func parseCIDRList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			f += "/32"
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("%s is not IPv4 (the egress network has no IPv6)", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// hostResolvers reads the nameservers of a resolv.conf as host:53.
func hostResolvers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53).String())
			}
		}
	}
	return out, sc.Err()
}
