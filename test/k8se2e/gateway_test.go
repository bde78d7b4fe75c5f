package k8se2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testinet"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// gatewayDaemon starts `hotcell serve --driver kubernetes` whose LLM
// gateway forwards to a fake upstream on this host's loopback (the daemon
// reaches it there; pods reach only the gateway), and returns the gateway's
// address: the pods' bridge address at a free port. The key is in a file
// only the daemon reads. extra are more flags.
func gatewayDaemon(t *testing.T, extra ...string) (*kubeDaemon, *gatewaytest.Upstream, string) {
	t.Helper()
	env := testk8s.Cluster(t)
	gw := net.JoinHostPort(env.HostIP, strconv.Itoa(freePort(t, env.HostIP)))
	d, up := gatewayDaemonIn(t, env, env.Namespace(t), gw, extra...)
	return d, up, gw
}

// gatewayDaemonIn is gatewayDaemon in namespace ns with the gateway on gw.
func gatewayDaemonIn(t *testing.T, env *testk8s.Env, ns, gw string, extra ...string) (*kubeDaemon, *gatewaytest.Upstream) {
	t.Helper()
	up, providers := gatewayProviders(t)
	_, port, _ := net.SplitHostPort(gw)
	d := startKubeDaemonIn(t, env, ns, append([]string{"--providers-file", providers, "--egress-gateway-port", port}, extra...)...)
	return d, up
}

// gatewayProviders starts a fake upstream on this host's loopback and
// writes a providers file of one openai provider forwarding to it, its key
// in a file of its own; it returns the upstream and the providers file.
func gatewayProviders(t *testing.T) (*gatewaytest.Upstream, string) {
	t.Helper()
	up := gatewaytest.New(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "openai.key")
	providers := filepath.Join(dir, "providers.toml")
	if err := os.WriteFile(key, []byte(gatewaytest.OpenAIKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(providers, []byte(fmt.Sprintf("[[provider]]\nname = \"openai\"\nkind = \"openai\"\nbase_url = %q\nkey_file = %q\n", up.URL+"/v1", key)), 0o600); err != nil {
		t.Fatal(err)
	}
	return up, providers
}

// gatewayEnv is what a sandbox's env says of the gateway: its base URL and
// token for the openai provider.
func gatewayEnv(t *testing.T, c *client.Client, id string) (base, token string) {
	t.Helper()
	out := execOK(t, c, id, `printf '%s %s' "$OPENAI_BASE_URL" "$OPENAI_API_KEY"`)
	base, token, _ = strings.Cut(out, " ")
	return base, token
}

// postFromPod POSTs a chat completion to base (a sandbox's OPENAI_BASE_URL)
// from inside sandbox id with token, with busybox's wget, and returns the
// answer's status and, on a 2xx, its body (wget shows no other's).
func postFromPod(t *testing.T, c *client.Client, id, base, token string) (int, string) {
	t.Helper()
	st, body, err := tryPostFromPod(t, c, id, base, token)
	if err != nil {
		t.Fatal(err)
	}
	return st, body
}

// tryPostFromPod is postFromPod returning what stopped it.
func tryPostFromPod(t *testing.T, c *client.Client, id, base, token string) (int, string, error) {
	res, err := c.Exec(t.Context(), id, client.ExecRequest{Argv: []string{"wget", "-S", "-O", "-",
		"--header", "Authorization: Bearer " + token, "--header", "Content-Type: application/json",
		"--post-data", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, base + "/chat/completions"}, TimeoutMs: 30_000})
	if err != nil {
		return 0, "", fmt.Errorf("post from %s: %v", id, err)
	}
	m := httpStatus.FindStringSubmatch(string(res.Stderr))
	if m == nil {
		return 0, "", fmt.Errorf("post from %s: no HTTP answer: stdout %q, stderr %q, exit %d", id, res.Stdout, res.Stderr, res.ExitCode)
	}
	st, _ := strconv.Atoi(m[1])
	return st, string(res.Stdout), nil
}

var httpStatus = regexp.MustCompile(`HTTP/1\.[01] (\d{3})`)

// TestKubernetesGateway: the LLM gateway on the Kubernetes driver, through
// a real `hotcell serve` and real pods: a sandbox's pod calls the gateway
// with its env's base URL and token and gets the upstream's answer, made
// with the provider's key, with the usage counted for that sandbox; a pod
// presenting its neighbour's token is refused (the token is taken only
// from its own sandbox's pod address), and the key is nowhere in the pod
// (env, files) nor in what the cluster stores of the sandbox.
func TestKubernetesGateway(t *testing.T) {
	d, up, gw := gatewayDaemon(t)
	ctx := t.Context()
	c := d.C
	create := func() client.Sandbox {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Gateway: []string{"openai"}, Limits: client.Limits{CPUs: 0.1, MemoryMB: 128}})
		if err != nil {
			t.Fatalf("create sandbox with the gateway: %v\n%s", err, d.Logs())
		}
		return sb
	}
	a, b := create(), create()
	aBase, aTok := gatewayEnv(t, c, a.ID)
	bBase, bTok := gatewayEnv(t, c, b.ID)
	if want := "http://" + gw + "/openai"; aBase != want || bBase != want {
		t.Fatalf("OPENAI_BASE_URL: got %q and %q, want %q", aBase, bBase, want)
	}
	if !strings.HasPrefix(aTok, "hcgw_") || aTok == bTok {
		t.Fatalf("tokens %.10s... and %.10s...: want a gateway token of each sandbox's own", aTok, bTok)
	}

	t.Run("a pod calls through the gateway", func(t *testing.T) {
		st, body := postFromPod(t, c, a.ID, aBase, aTok)
		if st != 200 || !strings.Contains(body, "hello from the fake upstream") {
			t.Fatalf("got %d %s, want the upstream's answer", st, body)
		}
		last, ok := up.Last()
		if !ok || last.Header.Get("Authorization") != "Bearer "+gatewaytest.OpenAIKey || strings.Contains(fmt.Sprint(last.Header), "hcgw_") {
			t.Errorf("upstream got headers %v: want the provider's key, never the sandbox's token", last.Header)
		}
		u, err := c.Usage(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Providers) != 1 || u.Providers[0].Requests != 1 || u.Providers[0].InputTokens != gatewaytest.OpenAIPrompt || u.Providers[0].OutputTokens != gatewaytest.OpenAICompletion {
			t.Errorf("usage of %s: got %+v, want one request of %d + %d tokens", a.ID, u.Providers, gatewaytest.OpenAIPrompt, gatewaytest.OpenAICompletion)
		}
	})

	t.Run("a neighbour's token is refused", func(t *testing.T) {
		n := len(up.Requests())
		st, _ := postFromPod(t, c, b.ID, bBase, aTok)
		if st != 401 {
			t.Errorf("a's token from b's pod: got %d, want 401", st)
		}
		// Refused as a's token from b's pod's address.
		bIP := d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pod", kubernetes.PodName(b.ID), "-o", "jsonpath={.status.podIP}")
		refusal := regexp.MustCompile(`msg="gateway request refused" .*sandbox=` + a.ID + ` .*status=401 .*remote=` + regexp.QuoteMeta(bIP) + `:`)
		if logs := d.Logs(); bIP == "" || !refusal.MatchString(logs) {
			t.Errorf("the daemon's log has no refusal of %s's token from %s's pod (%s):\n%s", a.ID, b.ID, bIP, logs)
		}
		if got := len(up.Requests()); got != n {
			t.Errorf("the refused call reached the upstream (%d requests, want %d)", got, n)
		}
		// b's own token from b's pod passes: the refusal is the token's.
		if st, body := postFromPod(t, c, b.ID, bBase, bTok); st != 200 {
			t.Errorf("b's own token: got %d %s, want 200", st, body)
		}
		ua, _ := c.Usage(ctx, a.ID)
		ub, _ := c.Usage(ctx, b.ID)
		if len(ua.Providers) != 1 || ua.Providers[0].Requests != 1 || len(ub.Providers) != 1 || ub.Providers[0].Requests != 1 {
			t.Errorf("usage: a %+v, b %+v; want one request each (the refused call counts for no one)", ua.Providers, ub.Providers)
		}
	})

	t.Run("the key is not in the pod", func(t *testing.T) {
		// Every process's env and command line, and every file but under
		// /proc, /sys and /dev, each once (the image's hundreds of hard
		// links to busybox would take minutes at the pod's CPU). The
		// secret comes on stdin and the pattern file is under /dev, so
		// that neither the scan's command lines nor its pattern hold it.
		const scan = `read -r s; [ -n "$s" ] || exit 3; printf '%s\n' "$s" > /dev/shm/pat
for p in /proc/[0-9]*; do grep -l -f /dev/shm/pat $p/environ $p/cmdline 2>/dev/null; done
find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -exec stat -c '%d:%i %n' {} + 2>/dev/null | sort -u -k1,1 | {
	n=0; while read -r ino f; do n=$((n+1)); grep -l -f /dev/shm/pat "$f" 2>/dev/null; done; echo "scanned $n"; }
rm /dev/shm/pat`
		// The control: the sandbox's own token, in its env and put in a
		// file, is found in both.
		if _, err := c.WriteFile(ctx, a.ID, "/workspace/control", strings.NewReader("token="+aTok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			what, secret string
			found        bool
		}{{"the provider's key", gatewaytest.OpenAIKey, false}, {"the sandbox's own token (the scan's control)", aTok, true}} {
			res, err := c.Exec(ctx, a.ID, client.ExecRequest{Argv: []string{"sh", "-c", scan}, Stdin: tc.secret + "\n", TimeoutMs: 120_000})
			if err != nil {
				t.Fatal(err)
			}
			out := strings.TrimSpace(string(res.Stdout))
			hits, last, _ := strings.Cut(out, "scanned ")
			found := strings.Contains(hits, "/environ") && strings.Contains(hits, "/workspace/control")
			if n, _ := strconv.Atoi(last); n < 5 || found != tc.found || (!tc.found && strings.TrimSpace(hits) != "") {
				t.Errorf("scan for %s: got %q (stderr %q), want found=%v in an env and a file", tc.what, out, res.Stderr, tc.found)
			}
			t.Logf("scan for %s: %s", tc.what, out)
		}
		// Nor in what the cluster keeps of the sandbox (the pod's spec,
		// its Secret, its claim).
		objs := d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pods,secrets,persistentvolumeclaims", "-o", "json")
		if strings.Contains(objs, gatewaytest.OpenAIKey) {
			t.Error("the provider's key is in the namespace's objects")
		}
		// The token reaches the pod through its agent, not its spec.
		if strings.Contains(objs, aTok) {
			t.Error("a sandbox's gateway token is in the namespace's objects")
		}
		if strings.Contains(d.Logs(), gatewaytest.OpenAIKey) || strings.Contains(d.Logs(), aTok) {
			t.Error("the daemon's log holds the key or a token")
		}
	})
}

// TestKubernetesGatewayEgressNode: with the nodes enforcing egress
// (kubernetes_egress_resolver, hotcell egress-node), a sandbox of mode
// none, which reaches nothing else, still reaches the gateway: the node
// lets the pods through to it as to the agent channel (egress-node's
// --allow, the gateway's address in the sandbox's NetworkPolicy), and only
// to it: another port of the node stays refused.
func TestKubernetesGatewayEgressNode(t *testing.T) {
	testenv.RequireRoot(t, "the node's egress controller changes iptables and ipsets")
	env := testk8s.Cluster(t)
	// The node's resolver address (port 53) and rule set are those of
	// every other test's egress node on this host: take turns, as the
	// tests with a test internet do (testk8s.NewInternet).
	testinet.Lock(t)
	ns := env.Namespace(t)
	agent := net.JoinHostPort(env.HostIP, strconv.Itoa(freePort(t, env.HostIP)))
	gw := net.JoinHostPort(env.HostIP, strconv.Itoa(freePort(t, env.HostIP)))
	// Another port of the node, as the gateway's: it must stay refused.
	other, err := net.Listen("tcp", net.JoinHostPort(env.HostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the node\n"))
			c.Close()
		}
	}()
	// No DNS is asked of it: the sandboxes here are of mode none.
	startEgressNode(t, env, ns, "127.0.0.1:1", agent, gw)
	d, up := gatewayDaemonIn(t, env, ns, gw, "--agent-listen", agent,
		"--kubernetes-egress-resolver", env.HostIP, "--kubernetes-network-policies")
	ctx := t.Context()
	c := d.C
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Gateway: []string{"openai"},
		Egress: &client.EgressPolicy{Mode: client.EgressNone}, Limits: client.Limits{CPUs: 0.1, MemoryMB: 128}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, d.Logs())
	}
	base, tok := gatewayEnv(t, c, sb.ID)
	if st, body := postFromPod(t, c, sb.ID, base, tok); st != 200 || !strings.Contains(body, "hello from the fake upstream") {
		t.Errorf("mode none through the gateway: got %d %s, want the upstream's answer", st, body)
	}
	if len(up.Requests()) != 1 {
		t.Errorf("upstream requests: got %d, want 1", len(up.Requests()))
	}
	_, otherPort, _ := net.SplitHostPort(other.Addr().String())
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "nc -w 3 " + env.HostIP + " " + otherPort + " </dev/null", TimeoutMs: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout), "hello from the node") {
		t.Errorf("mode none reached another port of the node (%s): %q", otherPort, res.Stdout)
	}

	// A CNI that enforces NetworkPolicy lets the pod reach the gateway too.
	np := d.k8s.MustKubectl(t, "-n", ns, "get", "networkpolicy", kubernetes.NetworkPolicyName(sb.ID), "-o", "json")
	_, gwPort, _ := net.SplitHostPort(gw)
	_, agentPort, _ := net.SplitHostPort(agent)
	for _, want := range []string{`"cidr": "` + env.HostIP + `/32"`, `"port": ` + gwPort, `"port": ` + agentPort} {
		if !strings.Contains(np, want) {
			t.Errorf("the sandbox's NetworkPolicy lacks %s:\n%s", want, np)
		}
	}
}

// TestKubernetesGatewayBehindService: with kubernetes_gateway_advertise a
// set's sandboxes call the LLM gateway at one address in front of every
// daemon's gateway (a real Service's cluster IP, which the test cluster's
// kube-proxy translates), not at the daemon that made them. A pod made
// through daemon A calls through A's gateway; A is SIGKILLed and the
// Service's endpoint moves to B's gateway (as a readiness probe would); the
// same pod, with the base URL and token it had, calls through B, which
// takes A's token from the store and the call's source as the pod's.
func TestKubernetesGatewayBehindService(t *testing.T) {
	env := testk8s.Cluster(t)
	up, providers := gatewayProviders(t)
	portA, portB := freePort(t, env.HostIP), freePort(t, env.HostIP)
	host := netip.MustParseAddr(env.HostIP)
	// The Service: a ClusterIP the cluster's kube-proxy translates to one
	// daemon's gateway, as it would to the ready pods of a Deployment.
	service := env.NewService(t, env.Namespace(t), "hotcell-gateway", 8090, netip.AddrPortFrom(host, uint16(portA)))
	svc := service.Addr().String()
	common := []string{"--providers-file", providers, "--kubernetes-gateway-advertise", svc}
	s := startDaemonSetWith(t, append([]string{"--egress-gateway-port", strconv.Itoa(portA)}, common...), append([]string{"--egress-gateway-port", strconv.Itoa(portB)}, common...))
	ctx := t.Context()

	sb, err := s.a.C.CreateSandbox(ctx, client.CreateSandboxRequest{Gateway: []string{"openai"}, Limits: client.Limits{CPUs: 0.1, MemoryMB: 128}})
	if err != nil {
		t.Fatalf("create through A: %v\n%s", err, s.a.Logs())
	}
	base, tok := gatewayEnv(t, s.a.C, sb.ID)
	if want := "http://" + svc + "/openai"; base != want {
		t.Fatalf("OPENAI_BASE_URL: got %q, want the Service's %q (not A's own gateway)", base, want)
	}
	if st, body := postFromPod(t, s.a.C, sb.ID, base, tok); st != 200 || !strings.Contains(body, "hello from the fake upstream") {
		t.Fatalf("through A's gateway: got %d %s, want the upstream's answer", st, body)
	}
	// What the set's store holds of the sandbox's usage: a daemon adds
	// its counts there as each call ends, so A's is there before its
	// SIGKILL.
	st, err := store.Open(ctx, s.store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	requests := func(want int64) func() error {
		return func() error {
			us, err := st.ListGatewayUsage(ctx)
			if err != nil {
				return err
			}
			for _, u := range us {
				if u.SandboxID == sb.ID && u.Provider == "openai" && u.Requests == want {
					return nil
				}
			}
			return fmt.Errorf("usage in the store %+v, want %d requests of %s", us, want, sb.ID)
		}
	}
	eventually(t, 30*time.Second, "A's call counted in the store", requests(1))

	s.a.Stop(syscall.SIGKILL)
	service.To(t, netip.AddrPortFrom(host, uint16(portB)))
	// The pod's agent redials to B; until then B's calls for it go to A.
	eventually(t, 60*time.Second, "exec through B after A's SIGKILL", func() error {
		_, err := s.b.C.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}})
		return err
	})
	n := len(up.Requests())
	eventually(t, 60*time.Second, "a call through B's gateway with A's base URL and token", func() error {
		st, body := postFromPod(t, s.b.C, sb.ID, base, tok)
		if st != 200 || !strings.Contains(body, "hello from the fake upstream") {
			return fmt.Errorf("got %d %s", st, body)
		}
		return nil
	})
	if got := len(up.Requests()); got != n+1 {
		t.Errorf("the upstream got %d calls after A went, want 1", got-n)
	}
	eventually(t, 30*time.Second, "A's and B's calls summed in the store", requests(2))
	if u, err := s.b.C.Usage(ctx, sb.ID); err != nil || len(u.Providers) != 1 || u.Providers[0].Requests != 2 {
		t.Errorf("usage through B: %+v, %v; want the two requests", u, err)
	}
}
