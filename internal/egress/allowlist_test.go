package egress

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestParseEntry(t *testing.T) {
	t.Parallel()
	good := []struct{ in, want string }{
		{"example.test", "example.test"},
		{"Example.TEST.", "example.test"},
		{"*.pkg.test", "*.pkg.test"},
		{"api.test:443", "api.test:443"},
		{"*.pkg.test:8080", "*.pkg.test:8080"},
		{"10.99.0.0/24", "10.99.0.0/24"},
		{"10.99.0.7/24", "10.99.0.0/24"},
		{"198.18.0.1", "198.18.0.1"},
		{"198.18.0.1:80", "198.18.0.1:80"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"_srv.example.test", "_srv.example.test"},
	}
	for _, tc := range good {
		e, err := ParseEntry(tc.in)
		if err != nil {
			t.Errorf("ParseEntry(%q): %v", tc.in, err)
			continue
		}
		if e.String() != tc.want {
			t.Errorf("ParseEntry(%q): got %q, want %q", tc.in, e.String(), tc.want)
		}
		if back, err := ParseEntry(e.String()); err != nil || back != e {
			t.Errorf("round trip of %q: got %+v, %v", e.String(), back, err)
		}
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"a.*.com", "wildcard"},
		{"*", "wildcard"},
		{"*.com", "two labels"},
		{"**.a.com", "wildcard"},
		{"a..com", "labels"},
		{"-a.com", "starts or ends"},
		{"a b.com", "not allowed"},
		{"10.0.0.0/33", "CIDR"},
		{"10.0.0.300", "address"},
		{"1.2.3", "address"},
		{"api.test:0", "outside"},
		{"api.test:65536", "outside"},
		{"api.test:http", "not a number"},
		{"api.test:", "not a number"},
		{":80", "no host"},
		{"[::1", "']'"},
		{"[::1]x", "after"},
		{"fe80::1%eth0", "zones"},
		{strings.Repeat("a", 64) + ".com", "labels"},
	}
	for _, tc := range bad {
		_, err := ParseEntry(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseEntry(%q): got %v, want an error about %q", tc.in, err, tc.why)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy("egress", wire.EgressPolicy{Allow: []string{"a.test", "A.test", "*.b.test:443"}}, wire.EgressOpen)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != wire.EgressAllowlist || len(p.Entries) != 2 {
		t.Errorf("got %+v, want allowlist with 2 entries (duplicates folded)", p)
	}
	if p, _ := ParsePolicy("egress", wire.EgressPolicy{}, wire.EgressNone); p.Mode != wire.EgressNone {
		t.Errorf("default mode: got %q, want none", p.Mode)
	}
	for _, tc := range []struct {
		p     wire.EgressPolicy
		field string
	}{
		{wire.EgressPolicy{Mode: "closed"}, "egress.mode"},
		{wire.EgressPolicy{Mode: "open", Allow: []string{"a.test"}}, "egress.allow"},
		{wire.EgressPolicy{Allow: []string{"a.test", "a.*.test"}}, "egress.allow[1]"},
		{wire.EgressPolicy{Allow: make([]string, MaxAllow+1)}, "egress.allow"},
	} {
		_, err := ParsePolicy("egress", tc.p, wire.EgressOpen)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("%+v: got %v, want an invalid-argument error naming %s", tc.p, err, tc.field)
		}
	}
}

func TestMatchName(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy("egress", wire.EgressPolicy{Allow: []string{"a.test", "*.pkg.test:443", "10.0.0.0/8"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{
		"a.test": 1, "b.a.test": 0, "pkg.test": 0, "x.pkg.test": 1, "y.x.pkg.test": 1, "xpkg.test": 0, "10.0.0.1": 0,
	} {
		if got := len(p.MatchName(name)); got != want {
			t.Errorf("MatchName(%q): got %d entries, want %d", name, got, want)
		}
	}
	if m := p.MatchName("x.pkg.test"); m[0].Port != 443 {
		t.Errorf("port: got %d, want 443", m[0].Port)
	}
}

// FuzzParseEntry: the parser never panics, and what it accepts renders to
// a form that parses back to the same entry.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"example.test", "*.pkg.test:443", "10.0.0.0/8", "[2001:db8::1]:80", "a.*.com", "::1", "1.2.3.4:99999", "*.", "[]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err != nil {
			return
		}
		back, err := ParseEntry(e.String())
		if err != nil || back != e {
			t.Fatalf("%q → %q → %+v, %v", s, e.String(), back, err)
		}
		if e.Domain != "" && (strings.Contains(e.Domain, "*") || e.Prefix.IsValid()) {
			t.Fatalf("%q: bad entry %+v", s, e)
		}
	})
}
