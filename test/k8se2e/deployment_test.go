package k8se2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/e2btest"
	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// deployImage is the hotcell image TestKubernetesDeployment builds from this
// tree and imports into the cluster.
const deployImage = "hotcell/hotcell:test-deployment"

// TestKubernetesDeploymentManifest: deploy/kubernetes/hotcell.yaml is what a
// real API server takes (a server-side dry run of every object).
func TestKubernetesDeploymentManifest(t *testing.T) {
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := env.MustKubectl(t, "-n", ns, "apply", "--dry-run=server", "-f", filepath.Join(root, "deploy/kubernetes/hotcell.yaml"), "-o", "name")
	for _, want := range []string{"serviceaccount/hotcell", "role.rbac.authorization.k8s.io/hotcell", "rolebinding.rbac.authorization.k8s.io/hotcell",
		"clusterrole.rbac.authorization.k8s.io/hotcell", "clusterrolebinding.rbac.authorization.k8s.io/hotcell", "service/hotcell", "deployment.apps/hotcell",
		"poddisruptionbudget.policy/hotcell", "persistentvolumeclaim/hotcell-backups"} {
		if !strings.Contains(out, want+"\n") && !strings.HasSuffix(out, want) {
			t.Errorf("the dry run did not make %s:\n%s", want, out)
		}
	}
}

// TestKubernetesDeployment: deploy/kubernetes/hotcell.yaml, as it ships with
// its values filled in, runs a set of two daemons in pods of the hotcell
// image on the test cluster: in-cluster credentials (its ServiceAccount and
// RBAC), one PostgreSQL store, one Service in front of their APIs, agent
// channels and LLM gateways, a readiness probe. Through the Service a
// client creates a sandbox and execs in it, and the sandbox's pod calls the
// gateway at the Service with its token. One daemon pod is then killed
// (deleted with no grace period): the Service keeps only the ready one,
// the sandbox's agent redials through the Service, and exec, its files and
// gateway calls carry on, while the Deployment brings a second daemon
// back. The workspace, a claim of the cluster's default StorageClass, is
// kept across a stop and a start; a snapshot's sandbox is made after the
// daemon that took it was killed (its workspace is on the backups' claim
// every daemon mounts); and a two-stage Dockerfile is built in sandboxes
// the daemons' pods run, committed to the registry through a forwarder.
func TestKubernetesDeployment(t *testing.T) {
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	prepareImages(t, env)
	image := testenv.HotcellImage(t, deployImage)
	env.ImportImage(t, image)
	drv, err := kubernetes.New(kubernetes.Config{Kubeconfig: env.Kubeconfig, PullPolicy: "Never"})
	if err != nil {
		t.Fatal(err)
	}
	testk8s.WaitImages(t, drv, image)

	// What the daemons' pods reach on this host, through forwarders on the
	// pods' bridge: the store (the host's PostgreSQL listens on loopback),
	// the API server (the cluster's `kubernetes` Service leads to the
	// host's bridge address, where the test cluster's API server, on
	// loopback, does not listen) and the fake upstream of the gateway.
	pgURL := testenv.RequirePostgres(t)
	pg, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	pg.Host = forward(t, net.JoinHostPort(env.HostIP, "0"), pg.Host)
	forwardAPIServer(t, env)
	up := gatewaytest.New(t)
	upURL, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	upURL.Host = forward(t, net.JoinHostPort(env.HostIP, "0"), upURL.Host)
	// The registry the daemons push snapshots and builds to: the node's
	// containerd pulls from it on loopback, the daemons' pods push through
	// a forwarder on the bridge (kubernetes_registry_url).
	registryURL := "http://" + forward(t, net.JoinHostPort(env.HostIP, "0"), env.Registry)
	registrySecret := env.RegistrySecret(t, ns)

	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/hotcell.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, service := deploymentObjects(t, string(manifest), ns, image)
	ctx := t.Context()
	// The Service first, at an address the cluster picks (the manifest's
	// fixed one could be taken here): the daemons' flags name it.
	if _, err := env.Kubectl(ctx, strings.NewReader(service), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	svcIP := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "get", "service", "hotcell", "-o", "jsonpath={.spec.clusterIP}"))
	if _, err := netip.ParseAddr(svcIP); err != nil {
		t.Fatalf("the Service's address %q: %v", svcIP, err)
	}
	// The store's URL and the gateway's provider, with its key, in
	// Secrets, as an operator would give them.
	env.MustKubectl(t, "-n", ns, "create", "secret", "generic", "hotcell-store", "--from-literal=url="+pg.String())
	providers := fmt.Sprintf("[[provider]]\nname = \"openai\"\nkind = \"openai\"\nbase_url = %q\nkey_file = \"/etc/hotcell/openai.key\"\n", "http://"+upURL.Host+"/v1")
	env.MustKubectl(t, "-n", ns, "create", "secret", "generic", "hotcell-providers",
		"--from-literal=providers.toml="+providers, "--from-literal=openai.key="+gatewaytest.OpenAIKey)
	for i, doc := range objs {
		doc = strings.ReplaceAll(doc, manifestServiceIP, svcIP)
		if strings.Contains(doc, "\nkind: Deployment\n") {
			doc = withProviders(t, doc)
			// The registry flags its comment shows: the registry as the
			// node pulls, as the daemons' pods push, and its Secret. A
			// build's sandbox asks for little of the test node's 2 CPUs.
			doc = withFlags(t, doc, "--kubernetes-registry="+env.Registry, "--kubernetes-registry-url="+registryURL,
				"--kubernetes-registry-secret="+registrySecret, "--template-build-limits=cpus=0.25,memory=256")
		}
		objs[i] = doc
	}
	backupsClaim(t, env, ns, objs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = env.Kubectl(ctx, nil, "delete", "clusterrolebinding,clusterrole", "hotcell-"+ns, "--ignore-not-found")
	})
	if _, err := env.Kubectl(ctx, strings.NewReader(strings.Join(objs, "\n---\n")), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	rollout := func(what string) {
		t.Helper()
		if _, err := env.Kubectl(ctx, nil, "-n", ns, "rollout", "status", "deployment/hotcell", "--timeout=3m"); err != nil {
			pods, _ := env.Kubectl(context.Background(), nil, "-n", ns, "describe", "pods", "-l", "app.kubernetes.io/name=hotcell")
			logs, _ := env.Kubectl(context.Background(), nil, "-n", ns, "logs", "-l", "app.kubernetes.io/name=hotcell", "--tail=40", "--prefix")
			t.Fatalf("%s: the Deployment is not ready: %v\n%s\n%s", what, err, pods, logs)
		}
	}
	rollout("applied")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := env.Kubectl(context.Background(), nil, "-n", ns, "logs", "-l", "app.kubernetes.io/name=hotcell", "--tail=80", "--prefix")
			t.Logf("the daemons' logs:\n%s", logs)
		}
	})

	// Ready pods are the Service's endpoints once kube-proxy has
	// programmed them, a moment after the rollout.
	hc := &http.Client{Timeout: 2 * time.Second}
	api := "http://" + net.JoinHostPort(svcIP, "8080")
	eventually(t, 30*time.Second, "the Service to answer", func() error {
		resp, err := hc.Get(api + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	// The set's one token, made by the first daemon and taken by the other.
	token := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "exec", "deploy/hotcell", "--", "cat", "/var/lib/hotcell/token"))
	// The daemons run unprivileged, and the disruption budget covers them.
	if uid := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "exec", "deploy/hotcell", "--", "id", "-u")); uid != "65532" {
		t.Errorf("the daemon's uid in its pod: %q, want 65532", uid)
	}
	eventually(t, 30*time.Second, "the PodDisruptionBudget to allow one disruption of the two daemons", func() error {
		got := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "get", "pdb", "hotcell", "-o", "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}"))
		if got != "2/1" {
			return fmt.Errorf("healthy/allowed %q, want 2/1", got)
		}
		return nil
	})
	c, err := client.New(api, token)
	if err != nil {
		t.Fatal(err)
	}
	// The workspace is a claim of the cluster's default StorageClass.
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Image: testenv.BusyboxImage(t),
		Gateway: []string{"openai"}, Limits: client.Limits{CPUs: 0.1, MemoryMB: 128}})
	if err != nil {
		t.Fatalf("create through the Service: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Errorf("destroy %s through the Service: %v", sb.ID, err)
		}
	})
	if got := execOK(t, c, sb.ID, "echo kept > /workspace/note && cat /workspace/note"); got != "kept\n" {
		t.Fatalf("exec through the Service: %q", got)
	}
	base, tok := gatewayEnv(t, c, sb.ID)
	if want := "http://" + net.JoinHostPort(svcIP, "8090") + "/openai"; base != want {
		t.Fatalf("OPENAI_BASE_URL: %q, want the Service's %q", base, want)
	}
	if st, body := postFromPod(t, c, sb.ID, base, tok); st != 200 || !strings.Contains(body, "hello from the fake upstream") {
		t.Fatalf("a call through the Service's gateway: %d %s, want the upstream's answer", st, body)
	}

	// Kill the daemon holding the sandbox's agent session.
	st, err := store.Open(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	holder, ok, err := st.SessionHolder(ctx, sb.ID)
	if err != nil || !ok {
		t.Fatalf("the holder of %s's agent session: %v, %v", sb.ID, ok, err)
	}
	victim := podAt(t, env, ns, holder.URL)
	env.MustKubectl(t, "-n", ns, "delete", "pod", victim, "--grace-period=0", "--force")
	// The object goes at once; its daemon, when the kubelet kills it.
	eventually(t, 60*time.Second, "the killed daemon to stop answering", func() error {
		resp, err := hc.Get(holder.URL + "/healthz")
		if err != nil {
			return nil
		}
		resp.Body.Close()
		return fmt.Errorf("%s still answers", holder.URL)
	})
	eventually(t, 90*time.Second, "exec through the Service after its daemon's pod was killed", func() error {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "cat /workspace/note"})
		if err != nil {
			return err
		}
		if res.Stdout != "kept\n" {
			return fmt.Errorf("the note reads %q", res.Stdout)
		}
		return nil
	})
	n := len(up.Requests())
	eventually(t, 60*time.Second, "a gateway call through the Service after the kill", func() error {
		st, body, err := tryPostFromPod(t, c, sb.ID, base, tok)
		if err == nil && (st != 200 || !strings.Contains(body, "hello from the fake upstream")) {
			err = fmt.Errorf("got %d %s", st, body)
		}
		return err
	})
	if got := len(up.Requests()); got != n+1 {
		t.Errorf("the upstream got %d calls after the kill, want 1", got-n)
	}
	if h, ok, err := st.SessionHolder(ctx, sb.ID); err != nil || !ok || h.URL == holder.URL {
		t.Errorf("the session's holder after the kill: %+v, %v, %v; want another daemon", h, ok, err)
	}
	// The Deployment makes its second daemon again.
	rollout("after the kill")

	// What the ClusterRole is for, through the in-cluster credentials:
	// the nodes and RuntimeClasses (/v1/host) and the kubelet's stats
	// through the API server (nodes/proxy), once the kubelet has read the
	// pod.
	if h, err := c.Host(ctx); err != nil || h.Driver != "kubernetes" || !slices.Contains(h.Runtimes, "runc") {
		t.Errorf("host through the Service: %+v, %v; want the kubernetes driver with runc", h, err)
	}
	eventually(t, 90*time.Second, "the sandbox's memory read by the kubelet, through the daemon's credentials", func() error {
		s, err := c.Stats(ctx, sb.ID)
		if err != nil {
			return err
		}
		if slices.Contains(s.Unavailable, wire.StatMemoryUsage) || s.Memory.UsageBytes == 0 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})

	// The workspace is a claim of the default StorageClass, made by its
	// provisioner: kept across a stop and a start through the Service.
	if got := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "get", "pvc", kubernetes.ClaimName(sb.ID), "-o", "jsonpath={.status.phase} {.spec.storageClassName}")); got != "Bound "+env.StorageClass {
		t.Errorf("the sandbox's workspace claim: %q, want Bound, of class %s", got, env.StorageClass)
	}
	if _, err := c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("stop through the Service: %v", err)
	}
	if _, err := c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("start through the Service: %v", err)
	}
	if got := execOK(t, c, sb.ID, "cat /workspace/note"); got != "kept\n" {
		t.Errorf("the workspace after stop and start: %q", got)
	}

	// A snapshot through the Service: its root filesystem pushed to the
	// registry by a daemon's pod, its workspace in the backups' claim
	// every daemon mounts. The daemon that took it is killed; a sandbox
	// made from it through the Service has both.
	execOK(t, c, sb.ID, "echo in-root > /etc/snap-mark")
	sn, err := c.CreateSnapshot(ctx, sb.ID)
	if err != nil {
		t.Fatalf("snapshot through the Service: %v", err)
	}
	if holder, ok, err := st.SessionHolder(ctx, sb.ID); err != nil || !ok {
		t.Fatalf("the holder of %s's agent session: %v, %v", sb.ID, ok, err)
	} else {
		env.MustKubectl(t, "-n", ns, "delete", "pod", podAt(t, env, ns, holder.URL), "--grace-period=0", "--force")
	}
	var fork client.Sandbox
	eventually(t, 90*time.Second, "a sandbox from the snapshot through the Service, its daemon killed", func() error {
		fork, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{Snapshot: sn.ID})
		return err
	})
	if got := execOK(t, c, fork.ID, "cat /etc/snap-mark /workspace/note"); got != "in-root\nkept\n" {
		t.Errorf("the sandbox from the snapshot: %q, want its root filesystem's file and its workspace", got)
	}
	if err := c.DeleteSandbox(ctx, fork.ID); err != nil {
		t.Errorf("destroy %s: %v", fork.ID, err)
	}
	rollout("after the second kill")

	// A template built through the Service, in a sandbox a daemon's pod
	// runs, and committed to the registry.
	var buildLog []string
	tpl, err := c.BuildTemplate(ctx, "built-in-the-deployment", client.BuildTemplateOptions{},
		dockerContext(t, "FROM "+testenv.BusyboxImage(t)+" AS base\nRUN echo built > /built\nFROM base\nRUN echo second >> /built\n"),
		func(line string) { buildLog = append(buildLog, line) })
	if err != nil {
		t.Fatalf("build through the Service: %v\n%s", err, strings.Join(buildLog, "\n"))
	}
	fromTpl, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tpl.Name})
	if err != nil {
		t.Fatalf("create from the built template: %v", err)
	}
	if got := execOK(t, c, fromTpl.ID, "cat /built"); got != "built\nsecond\n" {
		t.Errorf("the sandbox from the built template: %q", got)
	}
	if err := c.DeleteSandbox(ctx, fromTpl.ID); err != nil {
		t.Errorf("destroy %s: %v", fromTpl.ID, err)
	}
	if err := c.DeleteSnapshot(ctx, sb.ID, sn.ID); err != nil {
		t.Errorf("delete the snapshot: %v", err)
	}
	if err := c.DeleteTemplate(ctx, tpl.Name, false); err != nil {
		t.Errorf("delete the template: %v", err)
	}

	// Code written for E2B, through the Service: envd's process service
	// (commands.test.mjs, the real e2b SDK) on a sandbox of the base
	// image, its calls landing on either daemon and forwarded to the one
	// holding the agent.
	t.Run("e2b", func(t *testing.T) {
		e2btest.RequireSDK(t)
		persist := false
		base := testenv.BaseImage(t)
		env.ImportImage(t, base)
		testk8s.WaitImages(t, drv, base)
		key, err := c.CreateAPIKey(ctx, "e2b-sdk-through-the-service")
		if err != nil {
			t.Fatal(err)
		}
		secret := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "exec", "deploy/hotcell", "--", "cat", "/var/lib/hotcell/e2b-secret"))
		envd := e2b.New(e2b.Options{Secret: []byte(secret)})
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Image: base, Persist: &persist, Limits: client.Limits{CPUs: 0.5}})
		if err != nil {
			t.Fatalf("create a sandbox of %s: %v", base, err)
		}
		t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
		execOK(t, c, sb.ID, "id user >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash user")
		e2btest.Run(t, e2btest.Target{Addr: net.JoinHostPort(svcIP, "8080"), Token: token, APIKey: key.Key, Template: base}, "commands.test.mjs",
			"E2B_TEST_SANDBOX_ID="+sb.ID,
			"E2B_TEST_ENVD_TOKEN="+envd.EnvdToken(sb.ID),
			"E2B_TEST_MISSING_ID=sb-missing-e2b-process",
			"E2B_TEST_MISSING_TOKEN="+envd.EnvdToken("sb-missing-e2b-process"),
			"E2B_TEST_OTHER_TOKEN="+envd.EnvdToken(sb.ID+"x"))
	})
}

// withProviders gives the manifest's Deployment doc the gateway's
// providers: the hotcell-providers Secret at /etc/hotcell and the flag
// that names its file, as the manifest's comment says to.
func withProviders(t *testing.T, doc string) string {
	t.Helper()
	for _, r := range []struct{ at, add string }{
		{"            - --log-format=json\n", "            - --providers-file=/etc/hotcell/providers.toml\n"},
		{"              mountPath: /var/lib/hotcell\n", "            - name: providers\n              mountPath: /etc/hotcell\n              readOnly: true\n"},
		{"        - name: tmp\n          emptyDir: {}\n", "        - name: providers\n          secret:\n            secretName: hotcell-providers\n"},
	} {
		if strings.Count(doc, r.at) != 1 {
			t.Fatalf("the manifest's Deployment has not one %q", r.at)
		}
		doc = strings.Replace(doc, r.at, r.at+r.add, 1)
	}
	return doc
}

// withFlags gives the manifest's Deployment doc more flags of hotcell
// serve.
func withFlags(t *testing.T, doc string, flags ...string) string {
	t.Helper()
	at := "            - --log-format=json\n"
	if strings.Count(doc, at) != 1 {
		t.Fatalf("the manifest's Deployment has not one %q", at)
	}
	var add strings.Builder
	for _, f := range flags {
		add.WriteString("            - " + f + "\n")
	}
	return strings.Replace(doc, at, at+add.String(), 1)
}

// backupsClaim makes the manifest's claim hotcell-backups of objs first,
// as the test cluster can: ReadWriteOnce (its provisioner offers no
// other; both daemons' pods are on its one node, which may mount it for
// both), and its volume made writable by the daemons' uid and gid (the
// hostPath volume takes no fsGroup). objs gets the claim as made.
func backupsClaim(t *testing.T, env *testk8s.Env, ns string, objs []string) {
	t.Helper()
	i := slices.IndexFunc(objs, func(doc string) bool { return strings.Contains(doc, "\nkind: PersistentVolumeClaim\n") })
	if i < 0 || !strings.Contains(objs[i], "\n  name: hotcell-backups\n") || !strings.Contains(objs[i], `["ReadWriteMany"]`) {
		t.Fatal("the manifest has no ReadWriteMany claim hotcell-backups")
	}
	objs[i] = strings.Replace(objs[i], `["ReadWriteMany"]`, `["ReadWriteOnce"]`, 1)
	if _, err := env.Kubectl(t.Context(), strings.NewReader(objs[i]), "-n", ns, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	var dir string
	eventually(t, 60*time.Second, "the backups' claim bound", func() error {
		out := strings.TrimSpace(env.MustKubectl(t, "-n", ns, "get", "pvc", "hotcell-backups", "-o", "jsonpath={.status.phase} {.spec.volumeName}"))
		phase, pv, _ := strings.Cut(out, " ")
		if phase != "Bound" {
			return fmt.Errorf("the claim is %q", out)
		}
		dir = strings.TrimSpace(env.MustKubectl(t, "get", "pv", pv, "-o", "jsonpath={.spec.hostPath.path}"))
		return nil
	})
	if !strings.HasPrefix(dir, testk8s.HostPathDir+"/") {
		t.Fatalf("the backups' volume is at %q, not one of the test cluster's provisioner", dir)
	}
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
}

// podAt returns the name of the hotcell pod whose API is at u, a daemon's
// URL in the store's registry.
func podAt(t *testing.T, env *testk8s.Env, ns, u string) string {
	t.Helper()
	out := env.MustKubectl(t, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=hotcell",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, ip, _ := strings.Cut(line, " ")
		if "http://"+net.JoinHostPort(ip, "8080") == u {
			return name
		}
	}
	t.Fatalf("no hotcell pod serves %s:\n%s", u, out)
	return ""
}

// deploymentObjects returns the manifest's objects for namespace ns and the
// hotcell image, with the cluster-scoped ones named after ns, and apart the
// Service's without its fixed address.
func deploymentObjects(t *testing.T, manifest, ns, image string) (objs []string, service string) {
	t.Helper()
	for _, doc := range strings.Split(manifest, "\n---\n") {
		doc += "\n" // each line ends, the last too
		switch {
		case strings.Contains(doc, "\nkind: Service\n"):
			service = strings.Replace(doc, "  clusterIP: "+manifestServiceIP+"\n", "", 1)
			continue
		case strings.Contains(doc, "\nkind: ClusterRole\n"), strings.Contains(doc, "\nkind: ClusterRoleBinding\n"):
			doc = strings.ReplaceAll(doc, "\n  name: hotcell\n", "\n  name: hotcell-"+ns+"\n")
			doc = strings.ReplaceAll(doc, "\n    namespace: hotcell\n", "\n    namespace: "+ns+"\n")
		}
		objs = append(objs, strings.ReplaceAll(doc, "image: hotcell/hotcell:latest", "image: "+image))
	}
	if service == "" {
		t.Fatal("the manifest has no Service")
	}
	return objs, service
}

// manifestServiceIP is the Service address deploy/kubernetes/hotcell.yaml
// ships with, which its flags name too.
const manifestServiceIP = "10.96.0.80"

// forward listens at listen and copies every connection to and from to;
// it returns the address it listens at. It stops when t ends.
func forward(t *testing.T, listen, to string) string {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("forward %s to %s: %v", listen, to, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.DialTimeout("tcp", to, 10*time.Second)
			if err != nil {
				in.Close()
				continue
			}
			track(in, true)
			track(out, true)
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			go pipe(out, in)
			go func() {
				pipe(in, out)
				// Both ways are done once the answer ends.
				in.Close()
				out.Close()
				track(in, false)
				track(out, false)
			}()
		}
	}()
	return ln.Addr().String()
}

// forwardAPIServer makes the cluster's `kubernetes` Service lead to its API
// server, for clients in pods: its endpoint is the host's bridge address
// at the API server's port, where a forwarder to the API server on
// loopback listens.
func forwardAPIServer(t *testing.T, env *testk8s.Env) {
	t.Helper()
	ep := strings.TrimSpace(env.MustKubectl(t, "-n", "default", "get", "endpoints", "kubernetes",
		"-o", "jsonpath={.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}"))
	ap, err := netip.ParseAddrPort(ep)
	if err != nil {
		t.Fatalf("the kubernetes Service's endpoint %q: %v", ep, err)
	}
	if ap.Addr().String() != env.HostIP {
		t.Fatalf("the kubernetes Service leads to %s, not the host's bridge address %s", ep, env.HostIP)
	}
	forward(t, ep, net.JoinHostPort("127.0.0.1", fmt.Sprint(ap.Port())))
}
