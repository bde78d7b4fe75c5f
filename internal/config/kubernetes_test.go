package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestKubernetesSettings(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	kubeconfig := writeFile(t, "apiVersion: v1\nkind: Config\n")
	hostDir := t.TempDir()
	file := writeFile(t, `driver = "kubernetes"
agent_listen = "10.244.0.1:8091"

[kubernetes]
kubeconfig = "`+kubeconfig+`"
namespace = "sandboxes"
storage_class = "fast.ssd"
workspace_host_dir = "`+hostDir+`"
agent_image = "registry.example.com/hotcell/agent:v1"
pull_policy = "never"
egress_resolver = "10.244.0.1"
network_policies = true
registry = "registry.example.com:5000/hotcell"
registry_url = "http://10.0.0.9:5000"
registry_secret = "hotcell-registry"
`)
	c, err := Load(flags(t, "--config", file, "--agent-binary", agent), envMap(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !c.Kubernetes() || c.KubeKubeconfig != kubeconfig || c.KubeNamespace != "sandboxes" || c.KubeStorageClass != "fast.ssd" ||
		c.KubeWorkspaceHostDir != hostDir || c.KubeAgentImage != "registry.example.com/hotcell/agent:v1" || c.KubePullPolicy != "Never" ||
		c.KubeEgressResolver != "10.244.0.1" || !c.KubeNetworkPolicies ||
		c.KubeRegistry != "registry.example.com:5000/hotcell" || c.KubeRegistryURL != "http://10.0.0.9:5000" ||
		c.KubeRegistrySecret != "hotcell-registry" {
		t.Errorf("got %+v", c)
	}
	// The TCP channel is the default on Kubernetes, and pods dial the
	// listener's own address when it has one.
	if !c.AgentTCP() || c.AgentAdvertise != "10.244.0.1:8091" {
		t.Errorf("agent channel %q advertise %q: want tcp, 10.244.0.1:8091", c.AgentChannel, c.AgentAdvertise)
	}
	if src := c.Source("kubernetes_namespace"); src != "file "+file {
		t.Errorf("Source(kubernetes_namespace): got %q, want the file", src)
	}

	// A flag beats the file's table, and the env names the same setting.
	c, err = Load(flags(t, "--config", file, "--agent-binary", agent, "--kubernetes-namespace", "other"),
		envMap(map[string]string{"HOTCELL_KUBERNETES_STORAGE_CLASS": "slow"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.KubeNamespace != "other" || c.KubeStorageClass != "slow" {
		t.Errorf("namespace %q storage class %q: want other, slow", c.KubeNamespace, c.KubeStorageClass)
	}
}

// TestKubernetesGateway: the LLM gateway is served on Kubernetes, on
// agent_listen's host at egress_gateway_port, and pods are told
// agent_advertise's host at that port.
func TestKubernetesGateway(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	providers := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(providers, []byte("[[provider]]\nname = \"openai\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nkey_env = \"K\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                      string
		args                      []string
		wantListen, wantAdvertise string
		wantEnds                  []string
	}{
		{"listen is advertised", []string{"--agent-listen", "10.244.0.1:8091"}, "10.244.0.1:8090", "10.244.0.1:8090", []string{"10.244.0.1:8090"}},
		{"a set's list: this daemon's own", []string{"--agent-listen", "10.244.0.2:8091", "--agent-advertise", "10.244.0.1:8091,10.244.0.2:8091"}, "10.244.0.2:8090", "10.244.0.2:8090", []string{"10.244.0.2:8090"}},
		{"every address, advertise a name", []string{"--agent-listen", ":8091", "--agent-advertise", "hotcell.example:7443", "--egress-gateway-port", "7444"}, ":7444", "hotcell.example:7444", []string{"hotcell.example:7444"}},
		{"a Service in front of a set", []string{"--agent-listen", "10.244.0.2:8091", "--agent-advertise", "10.244.0.1:8091,10.244.0.2:8091", "--kubernetes-gateway-advertise", "10.96.0.50:80"},
			"10.244.0.2:8090", "10.96.0.50:80", []string{"10.96.0.50:80", "10.244.0.1:8090", "10.244.0.2:8090"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--agent-binary", agent, "--driver", "kubernetes", "--providers-file", providers}, tc.args...)
			c, err := Load(flags(t, args...), envMap(nil))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(c.Providers) != 1 {
				t.Errorf("providers: got %+v, want openai", c.Providers)
			}
			if l, a := c.KubeGateway(); l != tc.wantListen || a != tc.wantAdvertise {
				t.Errorf("KubeGateway: got %s, %s; want %s, %s", l, a, tc.wantListen, tc.wantAdvertise)
			}
			if ends := c.KubeGatewayEnds(); !slices.Equal(ends, tc.wantEnds) {
				t.Errorf("KubeGatewayEnds: got %v, want %v", ends, tc.wantEnds)
			}
		})
	}
}

func TestKubernetesBad(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	k8s := []string{"--driver", "kubernetes", "--agent-advertise", "10.244.0.1:8091"}
	for _, tc := range []struct {
		name string
		args []string
		key  string // the setting the error must name
		want string // and a part of its text
	}{
		{"unknown driver", []string{"--driver", "nomad"}, "driver", "docker"},
		{"namespace", append(k8s, "--kubernetes-namespace", "Not_A_Name"), "kubernetes_namespace", "namespace name"},
		{"storage class", append(k8s, "--kubernetes-storage-class", "a b"), "kubernetes_storage_class", "StorageClass"},
		{"host dir", append(k8s, "--kubernetes-workspace-host-dir", "rel/dir"), "kubernetes_workspace_host_dir", "absolute"},
		{"agent image", append(k8s, "--kubernetes-agent-image", "Bad Image"), "kubernetes_agent_image", "image reference"},
		{"pull policy", append(k8s, "--kubernetes-pull-policy", "sometimes"), "kubernetes_pull_policy", "Never"},
		{"kubeconfig", append(k8s, "--kubernetes-kubeconfig", "/nonexistent/kubeconfig"), "kubernetes_kubeconfig", "cannot be read"},
		{"unix channel", append(k8s, "--agent-channel", "unix"), "agent_channel", "must be tcp"},
		{"no advertise", []string{"--driver", "kubernetes"}, "agent_advertise", "must be set"},
		{"bad advertise in a list", []string{"--driver", "kubernetes", "--agent-advertise", "10.244.0.1:8091,10.244.0.2"}, "agent_advertise", `"10.244.0.2" is not`},
		{"listen on port 0", []string{"--driver", "kubernetes", "--agent-listen", "10.244.0.1:0"}, "agent_advertise", "must be set"},
		{"idle pause", append(k8s, "--idle-timeout", "10m", "--idle-action", "pause"), "idle_action", "cannot pause"},
		{"lifetime pause", append(k8s, "--max-lifetime", "1h", "--lifetime-action", "pause"), "lifetime_action", "cannot pause"},
		{"egress resolver", append(k8s, "--kubernetes-egress-resolver", "node-1"), "kubernetes_egress_resolver", "IPv4 address"},
		{"loopback egress resolver", append(k8s, "--kubernetes-egress-resolver", "127.0.0.1"), "kubernetes_egress_resolver", "IPv4 address"},
		{"gateway advertise a name", append(k8s, "--kubernetes-gateway-advertise", "gw.example:80"), "kubernetes_gateway_advertise", "IPv4 address:port"},
		{"gateway advertise no port", append(k8s, "--kubernetes-gateway-advertise", "10.96.0.50"), "kubernetes_gateway_advertise", "IPv4 address:port"},
		{"gateway advertise loopback", append(k8s, "--kubernetes-gateway-advertise", "127.0.0.1:80"), "kubernetes_gateway_advertise", "IPv4 address:port"},
		{"registry with a scheme", append(k8s, "--kubernetes-registry", "http://r.example:5000"), "kubernetes_registry", "host[:port][/path]"},
		{"registry upper-case path", append(k8s, "--kubernetes-registry", "r.example/Hotcell"), "kubernetes_registry", "host[:port][/path]"},
		{"registry on docker", []string{"--kubernetes-registry", "r.example:5000"}, "kubernetes_registry", "driver kubernetes"},
		{"registry url alone", append(k8s, "--kubernetes-registry-url", "http://r.example:5000"), "kubernetes_registry_url", "needs kubernetes_registry"},
		{"registry url scheme", append(k8s, "--kubernetes-registry", "r.example:5000", "--kubernetes-registry-url", "ftp://r.example"), "kubernetes_registry_url", "http(s)://host[:port]"},
		{"registry url path", append(k8s, "--kubernetes-registry", "r.example:5000", "--kubernetes-registry-url", "https://r.example/v2"), "kubernetes_registry_url", "http(s)://host[:port]"},
		{"registry secret alone", append(k8s, "--kubernetes-registry-secret", "s"), "kubernetes_registry_secret", "needs kubernetes_registry"},
		{"registry secret name", append(k8s, "--kubernetes-registry", "r.example:5000", "--kubernetes-registry-secret", "Not_A_Name"), "kubernetes_registry_secret", "Secret name"},
		{"gateway advertise on docker", []string{"--kubernetes-gateway-advertise", "10.96.0.50:80"}, "kubernetes_gateway_advertise", "driver kubernetes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(flags(t, append([]string{"--agent-binary", agent}, tc.args...)...), envMap(nil))
			if err == nil || !strings.Contains(err.Error(), tc.key+" ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s and saying %q", err, tc.key, tc.want)
			}
		})
	}
}

func TestKubernetesTableUnknownKey(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "[kubernetes]\nnamespac = \"x\"\n")
	_, err := Load(flags(t, "--config", file, "--agent-binary", fakeAgent(t)), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), `[kubernetes]: unknown key "namespac"`) || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("got %v, want the unknown key named with the known ones", err)
	}
}

// The Docker driver takes no [kubernetes] setting into account but still
// checks them, so a typo is found before the switch.
func TestKubernetesSettingsCheckedOnDocker(t *testing.T) {
	t.Parallel()
	_, err := Load(flags(t, "--agent-binary", fakeAgent(t), "--kubernetes-pull-policy", "x"), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "kubernetes_pull_policy") {
		t.Errorf("got %v, want an error naming kubernetes_pull_policy", err)
	}
}
