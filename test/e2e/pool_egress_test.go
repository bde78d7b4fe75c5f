package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestPoolClaimEgress: a pooled box waits under its template's egress
// policy, and a claim puts the claimer's in force, whatever it is: the
// template's own (no rule changes), another allowlist, open, none, some of
// them claimed at once (their rules switched together). Each claimed box
// reaches exactly what its policy allows on a test internet, and never the
// metadata service or a private range; no rules of the pooled generation
// are left behind.
func TestPoolClaimEgress(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t, "egress tests make network namespaces and read iptables")
	in := newInternet(t)
	up := newUpstream(t, map[string]netip.Addr{"allowed.test": in.allowed, "other.test": in.other})
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--egress-dns-upstream", up.addr}})
	t.Cleanup(d.Close)
	ctx := t.Context()

	name := templateName(t)
	if _, err := d.C.BuildTemplate(ctx, name, client.BuildTemplateOptions{
		Defaults: &client.TemplateDefaults{Egress: &client.EgressPolicy{Allow: []string{"allowed.test"}}},
	}, buildContext(t, map[string]string{"Dockerfile": "FROM " + d.Image + "\n"}), nil); err != nil {
		t.Fatalf("build template: %v\n%s", err, d.Logs())
	}
	t.Cleanup(func() { drainPool(d, name) })
	if _, err := d.C.SetTemplatePool(ctx, name, client.PoolConfig{Min: 5, RefillPerSecond: 20}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, d, name, "5 ready", func(s client.PoolStatus) bool { return s.Ready == 5 })
	pooled := pooledIDs(t, d)

	reaches := func(id, host string) bool {
		t.Helper()
		out := run(t, d, id, fmt.Sprintf("timeout 5 nc %s 80 </dev/null 2>&1; true", host)).Stdout
		return strings.Contains(out, "hello from")
	}
	claim := func(p *client.EgressPolicy) client.Sandbox {
		t.Helper()
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: name, Egress: p})
		if err != nil {
			t.Errorf("claim with egress %+v: %v\n%s", p, err, d.Logs())
			return sb
		}
		t.Cleanup(func() { _ = d.C.DeleteSandbox(ctx, sb.ID) })
		if !slices.Contains(pooled, sb.ID) {
			t.Errorf("create with egress %+v: got box %s, want one of the pooled %v", p, sb.ID, pooled)
		}
		return sb
	}

	// The template's own policy: the pooled rules stay.
	same := claim(nil)
	// Three others at once: one batch of rule changes, or several.
	policies := []*client.EgressPolicy{
		{Mode: client.EgressOpen},
		{Allow: []string{in.other.String()}},
		{Mode: client.EgressNone},
	}
	got := make([]client.Sandbox, len(policies))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = claim(p)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	open, other, none := got[0], got[1], got[2]

	for _, c := range []struct {
		what        string
		sb          client.Sandbox
		mode        string
		allowed     bool // allowed.test by name
		otherDirect bool // in.other by address
	}{
		{"the template's allowlist", same, client.EgressAllowlist, true, false},
		{"open", open, client.EgressOpen, true, true},
		{"an allowlist of another address", other, client.EgressAllowlist, false, true},
		{"none", none, client.EgressNone, false, false},
	} {
		if c.sb.Egress == nil || c.sb.Egress.Mode != c.mode {
			t.Errorf("%s: claimed box's policy %+v, want mode %s", c.what, c.sb.Egress, c.mode)
		}
		st, err := d.C.Egress(ctx, c.sb.ID)
		if err != nil || !st.Enforced && c.mode != client.EgressNone {
			t.Errorf("%s: egress status %+v, %v: want enforced", c.what, st, err)
		}
		if got := reaches(c.sb.ID, "allowed.test"); got != c.allowed {
			t.Errorf("%s: reaches allowed.test: got %v, want %v", c.what, got, c.allowed)
		}
		if got := reaches(c.sb.ID, in.other.String()); got != c.otherDirect {
			t.Errorf("%s: reaches %s: got %v, want %v", c.what, in.other, got, c.otherDirect)
		}
		// In every mode: never the metadata service, a private range or
		// the host.
		for _, bad := range append([]string{in.metadata.String(), in.private.String()}, addrStrings(in.metadataOther)...) {
			if reaches(c.sb.ID, bad) {
				t.Errorf("%s: the claimed box reached %s", c.what, bad)
			}
		}
	}
	st, err := d.C.GetTemplatePool(ctx, name)
	if err != nil || st.Claims != 4 || st.Misses != 0 {
		t.Errorf("pool after 4 claims: %+v, %v: want 4 claims, no miss", st, err)
	}

	// Each claimed box has one generation of chains: the pooled one went.
	out, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	chains := func(id string) []string {
		key := strings.TrimPrefix(id, "sb-")
		var cs []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, ":HCE-"+key+"-") || strings.HasPrefix(l, ":HCD-"+key+"-") {
				cs = append(cs, strings.Fields(l[1:])[0])
			}
		}
		return cs
	}
	for _, sb := range []client.Sandbox{same, open, other} {
		if cs := chains(sb.ID); len(cs) != 2 {
			t.Errorf("box %s: chains %v, want one main and one dynamic chain", sb.ID, cs)
		}
	}
	if cs := chains(none.ID); len(cs) != 0 {
		t.Errorf("box %s under egress none: chains %v left", none.ID, cs)
	}
}

func addrStrings[T fmt.Stringer](as []T) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}
