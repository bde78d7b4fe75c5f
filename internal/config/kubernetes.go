package config

import (
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Drivers: the backend that runs sandboxes' boxes.
const (
	DriverDocker     = "docker"
	DriverKubernetes = "kubernetes"
)

// Defaults of the [kubernetes] settings.
const (
	DefaultKubeNamespace  = "hotcell"
	DefaultKubeAgentImage = "hotcell/agent:latest"
	DefaultKubePullPolicy = "IfNotPresent"
)

// kubeTable is the TOML table whose keys are the kubernetes_* settings:
// `[kubernetes] namespace = "x"` is `kubernetes_namespace = "x"`.
const kubeTable = "kubernetes"

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	imageRef     = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:-]*(@sha256:[a-f0-9]{64})?$`)
)

// Kubernetes reports whether sandboxes run on the Kubernetes driver.
func (c Config) Kubernetes() bool { return c.Driver == DriverKubernetes }

// validateDriver checks driver and, on Kubernetes, the kubernetes_*
// settings and what the driver needs of the others: the TCP agent channel
// (a pod cannot see the daemon's unix sockets) with an address pods can
// dial. It runs before validateAgentChannel, whose default it changes.
func (c *Config) validateDriver(bad func(key string, value any, format string, args ...any) error) error {
	switch c.Driver = strings.ToLower(c.Driver); c.Driver {
	case "":
		c.Driver = DriverDocker
	case DriverDocker, DriverKubernetes:
	default:
		return bad("driver", c.Driver, "must be docker (containers on this host's Docker Engine) or kubernetes (pods in a cluster; see the kubernetes_* settings)")
	}
	if c.KubeNamespace == "" {
		c.KubeNamespace = DefaultKubeNamespace
	}
	if !dnsLabel.MatchString(c.KubeNamespace) {
		return bad("kubernetes_namespace", c.KubeNamespace, "must be a Kubernetes namespace name: 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit")
	}
	if c.KubeStorageClass != "" && (len(c.KubeStorageClass) > 253 || !dnsSubdomain.MatchString(c.KubeStorageClass)) {
		return bad("kubernetes_storage_class", c.KubeStorageClass, "must be a StorageClass name (lower-case letters, digits, '-' and '.'), or empty for the cluster's default class")
	}
	if c.KubeWorkspaceHostDir != "" && !filepath.IsAbs(c.KubeWorkspaceHostDir) {
		return bad("kubernetes_workspace_host_dir", c.KubeWorkspaceHostDir, "must be an absolute path on the node (a single-node cluster on this host), or empty to let the StorageClass's provisioner make the volumes")
	}
	if c.KubeAgentImage == "" {
		c.KubeAgentImage = DefaultKubeAgentImage
	}
	if len(c.KubeAgentImage) > 255 || !imageRef.MatchString(c.KubeAgentImage) {
		return bad("kubernetes_agent_image", c.KubeAgentImage, "must be an image reference such as hotcell/agent:latest or registry.example.com/hotcell/agent:v1")
	}
	switch strings.ToLower(c.KubePullPolicy) {
	case "":
		c.KubePullPolicy = DefaultKubePullPolicy
	case "always":
		c.KubePullPolicy = "Always"
	case "ifnotpresent":
		c.KubePullPolicy = "IfNotPresent"
	case "never":
		c.KubePullPolicy = "Never"
	default:
		return bad("kubernetes_pull_policy", c.KubePullPolicy, "must be Always, IfNotPresent or Never (Never on a cluster without a registry: the images must be on the nodes)")
	}
	if c.KubeEgressResolver != "" {
		if a, err := netip.ParseAddr(c.KubeEgressResolver); err != nil || !a.Is4() || a.IsUnspecified() || a.IsLoopback() {
			return bad("kubernetes_egress_resolver", c.KubeEgressResolver, "must be the IPv4 address every node's hotcell egress-node answers DNS on: the nodes' common gateway on the pod network (10.244.0.1 on the test cluster), or a link-local address such as 169.254.20.53 that egress-node puts on each node")
		}
	}
	if c.KubeGatewayAdvertise != "" {
		if !c.Kubernetes() {
			return bad("kubernetes_gateway_advertise", c.KubeGatewayAdvertise, "is for driver kubernetes: on Docker sandboxes reach their own daemon's gateway")
		}
		// An address, not a name: it goes into NetworkPolicies, and a pod
		// whose DNS is egress-node's resolver could not look a name up.
		ap, err := netip.ParseAddrPort(c.KubeGatewayAdvertise)
		if err != nil || !ap.Addr().Is4() || ap.Addr().IsUnspecified() || ap.Addr().IsLoopback() || ap.Port() == 0 {
			return bad("kubernetes_gateway_advertise", c.KubeGatewayAdvertise, "must be the IPv4 address:port pods reach every daemon's gateway at, such as a Service's cluster IP and port (10.96.0.50:8090)")
		}
	}
	if err := c.checkKubeRegistry(bad); err != nil {
		return err
	}
	if !c.Kubernetes() {
		return nil
	}
	if c.KubeKubeconfig != "" {
		fi, err := os.Stat(c.KubeKubeconfig)
		if err != nil {
			return bad("kubernetes_kubeconfig", c.KubeKubeconfig, "cannot be read: %v", err)
		}
		if fi.IsDir() {
			return bad("kubernetes_kubeconfig", c.KubeKubeconfig, "is a directory; name the kubeconfig file")
		}
	}
	switch strings.ToLower(c.AgentChannel) {
	case AgentChannelTCP:
	case "", AgentChannelUnix:
		if c.Source("agent_channel") != defaultSource {
			return bad("agent_channel", c.AgentChannel, "must be tcp with driver kubernetes: a pod runs in its own network namespace, usually on another host, and cannot reach the daemon's unix sockets")
		}
		c.AgentChannel = AgentChannelTCP
	}
	if c.AgentAdvertise == "" {
		// A listener on one address is also where pods dial; one on
		// every address says nothing about which of them pods reach.
		host, port, err := splitListen(c.AgentListen)
		ip, perr := netip.ParseAddr(host)
		if err != nil || perr != nil || ip.IsUnspecified() || ip.IsLoopback() || port == 0 {
			return bad("agent_advertise", c.AgentAdvertise, "must be set with driver kubernetes: the host:port pods dial to reach agent_listen (%s, which gives no address and fixed port of its own to dial), e.g. the host's address on the pods' network, 10.244.0.1:8091 on the test cluster", c.AgentListen)
		}
		c.AgentAdvertise = c.AgentListen
	}
	for _, a := range []struct {
		key, action string
		timeout     time.Duration
	}{{"idle_action", c.IdleAction, c.IdleTimeout}, {"lifetime_action", c.LifetimeAction, c.MaxLifetime}} {
		if a.action == "pause" && a.timeout > 0 {
			return bad(a.key, a.action, "the kubernetes driver cannot pause a pod: use stop or destroy")
		}
	}
	return nil
}

// KubeGateway is where the LLM gateway listens on the Kubernetes driver
// and the host:port pods reach it at: egress_gateway_port on agent_listen's
// host and on agent_advertise's host. Pods already reach the daemon there
// (the agent channel), so the gateway asks no address of its own. With
// several addresses (a set's daemons) it is the one of agent_listen's host,
// this daemon's own, so that each daemon's pods call its gateway; else the
// first. kubernetes_gateway_advertise, when set, is the advertised one
// instead (a Service in front of every daemon's gateway).
func (c Config) KubeGateway() (listen, advertise string) {
	port := strconv.Itoa(c.Egress().GatewayPort)
	lhost, _, _ := net.SplitHostPort(c.AgentListen) // checked at load
	addrs := c.AgentAdvertiseAddrs()                // set and checked at load
	ahost, _, _ := net.SplitHostPort(addrs[0])
	for _, a := range addrs {
		if h, _, _ := net.SplitHostPort(a); h == lhost {
			ahost = h
			break
		}
	}
	if c.KubeGatewayAdvertise != "" {
		return net.JoinHostPort(lhost, port), c.KubeGatewayAdvertise
	}
	return net.JoinHostPort(lhost, port), net.JoinHostPort(ahost, port)
}

// KubeGatewayEnds are the host:ports a pod's calls to the gateway may go
// to, for its NetworkPolicy: the advertised address and, behind a
// kubernetes_gateway_advertise Service, every daemon's gateway
// (agent_advertise's hosts at egress_gateway_port), the destinations a
// CNI sees once the Service's address is translated.
func (c Config) KubeGatewayEnds() []string {
	_, adv := c.KubeGateway()
	ends := []string{adv}
	if c.KubeGatewayAdvertise == "" {
		return ends
	}
	port := strconv.Itoa(c.Egress().GatewayPort)
	for _, a := range c.AgentAdvertiseAddrs() {
		h, _, _ := net.SplitHostPort(a)
		if e := net.JoinHostPort(h, port); !slices.Contains(ends, e) {
			ends = append(ends, e)
		}
	}
	return ends
}

// registryName is a registry as image references name it: host[:port]
// and an optional path.
var registryName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// checkKubeRegistry checks kubernetes_registry and its push URL.
func (c *Config) checkKubeRegistry(bad func(key string, value any, format string, args ...any) error) error {
	if c.KubeRegistry == "" {
		if c.KubeRegistryURL != "" {
			return bad("kubernetes_registry_url", c.KubeRegistryURL, "needs kubernetes_registry, the registry as the nodes pull from it")
		}
		if c.KubeRegistrySecret != "" {
			return bad("kubernetes_registry_secret", c.KubeRegistrySecret, "needs kubernetes_registry, the registry it holds the credentials of")
		}
		return nil
	}
	if c.KubeRegistrySecret != "" && (len(c.KubeRegistrySecret) > 253 || !dnsSubdomain.MatchString(c.KubeRegistrySecret)) {
		return bad("kubernetes_registry_secret", c.KubeRegistrySecret, "must be a Secret name (lower-case letters, digits, '-' and '.')")
	}
	if !c.Kubernetes() {
		return bad("kubernetes_registry", c.KubeRegistry, "is for driver kubernetes: on Docker the engine keeps the images it commits")
	}
	if len(c.KubeRegistry) > 200 || !registryName.MatchString(c.KubeRegistry) {
		return bad("kubernetes_registry", c.KubeRegistry, "must be a registry as image references name it, host[:port][/path], such as registry.example.com/hotcell or 10.96.0.90:5000")
	}
	if c.KubeRegistryURL != "" {
		u, err := url.Parse(c.KubeRegistryURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return bad("kubernetes_registry_url", c.KubeRegistryURL, "must be http(s)://host[:port], the endpoint the daemon pushes to (http:// for a registry without TLS)")
		}
	}
	return nil
}
