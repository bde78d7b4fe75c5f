package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestEgressDenials checks the denial log and the Prometheus counters: an
// allowlist sandbox's connects to a test host address and to the metadata
// address (both owned by the test's namespace) are dropped, and appear in
// GET .../egress with their destination and in /metrics under the
// sandbox's id, which go when it is destroyed, as do its rules.
func TestEgressDenials(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t, "egress tests make network namespaces and read iptables")
	in := newInternet(t)
	up := newUpstream(t, map[string]netip.Addr{"allowed.test": in.allowed, "other.test": in.other})
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--egress-dns-upstream", up.addr}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	before := rules(t, d.EgressNetwork, d.EgressSubnet)

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Egress: &client.EgressPolicy{Allow: []string{"allowed.test"}}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	connect := func(host string, port int) string {
		t.Helper()
		return run(t, d, sb.ID, fmt.Sprintf("timeout 3 nc %s %d </dev/null 2>&1; true", host, port)).Stdout
	}
	if out := connect("allowed.test", 80); !strings.Contains(out, "hello from") {
		t.Fatalf("the allowlisted name does not connect: %s", out)
	}
	if out := connect(in.other.String(), 8081); strings.Contains(out, "hello") {
		t.Fatalf("a connect to a non-allowed address went through: %s", out)
	}
	connect(in.metadata.String(), 80)
	run(t, d, sb.ID, "timeout 3 nslookup other.test >/dev/null 2>&1; true")

	// The denial log is read asynchronously: wait a little for it.
	var st client.EgressStatus
	find := func(addr string, port int, reason string) *client.EgressDenial {
		for i := range st.Denied {
			dn := &st.Denied[i]
			if dn.Kind == client.EgressDenialConnect && dn.Address == addr && dn.Port == port && dn.Protocol == "tcp" && dn.Reason == reason {
				return dn
			}
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, err = d.C.Egress(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if !st.DenialLogAvailable {
			t.Fatalf("denialLogAvailable is false on a host with NFLOG\n%s", d.Logs())
		}
		if find(in.other.String(), 8081, "not-allowed") != nil && find(in.metadata.String(), 80, "link-local") != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the denied connects to %s:8081 and %s:80 are not in the log: %+v", in.other, in.metadata, st.Denied)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if dn := find(in.other.String(), 8081, "not-allowed"); dn.Packets < 1 || dn.Time.IsZero() {
		t.Errorf("denial entry: got %+v, want a time and packets >= 1", *dn)
	}
	// Nothing the sandbox was allowed to do is in the log.
	for _, dn := range st.Denied {
		if dn.Address == in.allowed.String() {
			t.Errorf("an allowed connect is in the denial log: %+v", dn)
		}
	}

	// The counters on /metrics, labelled by the sandbox's id.
	metric := func(body, name string) (float64, bool) {
		m := regexp.MustCompile(`(?m)^` + name + `\{sandbox="` + regexp.QuoteMeta(sb.ID) + `"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		return v, err == nil
	}
	body := scrape(t, d)
	for _, name := range []string{"hotcell_egress_dropped_packets_total", "hotcell_egress_dropped_bytes_total", "hotcell_egress_dns_refused_total", "hotcell_egress_dns_answered_total", "hotcell_egress_denials_logged_total"} {
		if v, ok := metric(body, name); !ok || v <= 0 {
			t.Errorf("/metrics: %s for %s = %v (present %v), want > 0", name, sb.ID, v, ok)
		}
	}
	if !strings.Contains(body, "hotcell_egress_denial_log_available 1") {
		t.Error("/metrics lacks hotcell_egress_denial_log_available 1")
	}

	// Destroy: the series and every rule of the sandbox go.
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, d); strings.Contains(body, sb.ID) {
		t.Errorf("/metrics still has series of the destroyed sandbox %s", sb.ID)
	}
	after := rules(t, d.EgressNetwork, d.EgressSubnet)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Errorf("rules after destroy differ from before:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
}

func scrape(t *testing.T, d *testdaemon.Daemon) string {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(d.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+d.Addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape /metrics: %d, %v", resp.StatusCode, err)
	}
	return string(b)
}
