// Package config is the one reader of the daemon's configuration. A setting
// comes, highest first, from a command-line flag, a HOTCELL_* environment
// variable, an optional TOML file, or its default; every setting remembers
// where it came from so that a validation error can say what to fix.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"

	"github.com/hotcell/hotcell/internal/clientconfig"
	"github.com/hotcell/hotcell/internal/redact"
	"github.com/hotcell/hotcell/internal/wire"
)

// Defaults that clients and docs rely on.
const (
	DefaultListen       = "127.0.0.1:8080"
	DefaultDataDir      = clientconfig.DefaultDataDir
	DefaultImage        = "hotcell/base:latest"
	AgentBinaryName     = "hotcell-agent"
	ConfigFlag          = "config"
	ConfigEnv           = "HOTCELL_CONFIG"
	envPrefix           = "HOTCELL_"
	defaultSource       = "default"
	defaultExecTimeout  = 60 * time.Second
	defaultSetupTimeout = 10 * time.Minute
	defaultGitTimeout   = 10 * time.Minute
	defaultMaxExecOut   = 1 << 20
	defaultShutdown     = 10 * time.Second
	defaultStreamWrite  = time.Minute
)

// DefaultPreviewDomain: *.localhost resolves to loopback in browsers and
// curl, so previews by host name work on the daemon's host with no DNS.
const DefaultPreviewDomain = "preview.localhost"

// Config is the daemon's configuration. Build it with Load (or Default and
// the Apply methods, then Validate).
type Config struct {
	// Listen is the API's host:port.
	Listen string
	// DataDir holds the database, the token and per-sandbox directories.
	DataDir string
	// Store is where the daemon keeps its records: empty for the SQLite
	// file DBPath, or a PostgreSQL URL (postgres:// or postgresql://),
	// a database several daemons can share.
	Store string
	// AdvertiseURL is the URL the other daemons of a set sharing a
	// PostgreSQL store reach this daemon's API at, for calls forwarded to
	// the daemon holding a sandbox's agent session. Empty: http:// and the
	// address the API listens on.
	AdvertiseURL string
	// DefaultImage is used when a create request names no image.
	DefaultImage string
	// AgentBinary is the host path of the static hotcell-agent binary that is
	// bind-mounted into every sandbox. Empty means: next to this executable,
	// else in PATH; Validate resolves it to an absolute path.
	AgentBinary string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
	// DockerHost is the Docker Engine address. Empty means the Docker
	// client's usual environment (DOCKER_HOST, DOCKER_TLS_VERIFY, ...).
	DockerHost string
	// Driver is the backend of sandboxes' boxes: docker or kubernetes
	// (kubernetes.go).
	Driver string
	// Kubernetes driver settings (kubernetes.go), the file's [kubernetes]
	// table: the kubeconfig (empty: in-cluster, then $KUBECONFIG), the
	// namespace of every object, the workspaces' StorageClass, the host
	// dir the driver provisions workspaces in itself (single-node
	// clusters), the image the agent comes from and the pull policy.
	KubeKubeconfig, KubeNamespace, KubeStorageClass, KubeWorkspaceHostDir string
	KubeAgentImage, KubePullPolicy                                        string
	// KubeEgressResolver is the address of hotcell egress-node's resolver
	// that every pod's dnsConfig names: set, every egress mode is served,
	// enforced by egress-node on the nodes. KubeNetworkPolicies makes a
	// NetworkPolicy per sandbox as well (docs/kubernetes.md, "Egress").
	KubeEgressResolver  string
	KubeNetworkPolicies bool
	// KubeGatewayAdvertise is the address:port pods get as their LLM
	// gateway's (their base URL's host), such as a Service's cluster IP in
	// front of every daemon's gateway; empty: this daemon's own
	// (KubeGateway).
	KubeGatewayAdvertise string
	// KubeRegistry is the registry, as the nodes pull from it
	// (host[:port][/path]), where the driver pushes the images it makes:
	// snapshots and templates saved from a sandbox. KubeRegistryURL is
	// the endpoint the daemon pushes to (http(s)://host[:port]; empty:
	// https:// the registry's host). Empty KubeRegistry: the driver makes
	// no images (501).
	KubeRegistry, KubeRegistryURL string
	// KubeRegistrySecret names the kubernetes.io/dockerconfigjson Secret
	// of the namespace with the registry's credentials.
	KubeRegistrySecret string
	// ExecTimeout is the default timeout of an exec that asks for none.
	ExecTimeout time.Duration
	// SetupTimeout bounds each setup command at create.
	SetupTimeout time.Duration
	// GitTimeout bounds the host-side git work of a create's repo (clone,
	// fetch, checkout): a stalled remote fails the create instead of
	// holding it forever.
	GitTimeout time.Duration
	// AllowedHosts are the names, besides loopback, the listen address's
	// host and the preview domain, that the API answers in a request's
	// Host header: comma-separated, "*.example.com" for subdomains, "*"
	// for any. Other names are refused, which defeats DNS rebinding.
	AllowedHosts string
	// AllowLocalRepos lets a create's repo.url be a host path or file://
	// URL. Off by default: the clone runs on the host, as the daemon's
	// user, so a local path would copy any host repository into a sandbox.
	AllowLocalRepos bool
	// MaxExecOutput caps each of stdout and stderr of a buffered exec, in bytes.
	MaxExecOutput int64
	// ShutdownTimeout is the grace period of a shutdown: how long it waits
	// for operations in flight before it cancels them.
	ShutdownTimeout time.Duration
	// StreamWriteTimeout bounds each write of a streamed answer: a client
	// that reads nothing for this long loses the stream, and the work
	// behind it (an exec, a log follow) stops.
	StreamWriteTimeout time.Duration
	// PreviewDomain: requests for {port}-{sandbox id}.<PreviewDomain> to the
	// API's listener are HTTP previews of that port. Empty turns previews by
	// host name off. *.localhost resolves to loopback in browsers, so the
	// default works on the daemon's host with no DNS set up.
	PreviewDomain string
	// PreviewTokenTTL: how long a preview token (preview-url) lasts.
	PreviewTokenTTL time.Duration
	// ConsoleSessionTTL: how long a web console sign-in (/ui/) lasts.
	ConsoleSessionTTL time.Duration
	// E2BTemplates maps E2B template ids to images, "id=image,..." (e2b.go);
	// "base" is DefaultImage unless it is mapped here.
	E2BTemplates string
	// Pools configures templates' warm pools, "name=min[:max[:rate]],..."
	// (pools.go); the API's PUT /v1/templates/{name}/pool sets them too.
	Pools string
	// DefaultLimits fill, per field, the limits a create request leaves
	// out; MaxLimits cap what a request may ask for (limits.go). A zero
	// field is unlimited.
	DefaultLimits, MaxLimits wire.Limits
	// Agent channel settings: see agentchannel.go. AgentChannel is unix or
	// tcp; AgentListen the TCP listener's host:port; AgentAdvertise the
	// host:port boxes dial (default: the egress gateway, AgentListen's port).
	AgentChannel, AgentListen, AgentAdvertise string
	// Egress settings: see egress.go.
	EgressNetwork, EgressSubnet, EgressDNSUpstream, EgressDefaultMode, EgressGatewayPort string
	EgressAllowPrivate                                                                   string
	// Lifecycle defaults and reconciler settings (lifecycle.go).
	IdleTimeout, MaxLifetime, OrphanGrace     time.Duration
	IdleAction, LifetimeAction, EngineRestart string
	// Template builds (templates.go): how long one may take, the memory
	// and CPUs its RUN steps get, and their network.
	TemplateBuildTimeout time.Duration
	TemplateBuildLimits  wire.Limits
	TemplateBuildNetwork string
	// Backup limits (backups.go): the largest workspace tar a backup takes,
	// the bytes a sandbox's kept backups may take, the free space backups
	// leave on the data dir's disk, how long a backup stream may stall.
	BackupMaxSize, BackupQuota, MinFreeDisk int64
	BackupIdleTimeout                       time.Duration
	// BackupDir is where backups and snapshots' workspaces are kept;
	// empty for data_dir/backups (BackupsPath).
	BackupDir string
	// DiskCheckInterval: how often each running sandbox's writable layer
	// is measured against its disk limit.
	DiskCheckInterval time.Duration
	// Providers are the LLM gateway's upstreams ([[provider]] tables of the
	// config file and of ProvidersFile; gateway.go).
	Providers     []Provider
	ProvidersFile string
	// DefaultRuntime is the isolation runtime of a create that names none
	// (wire.RuntimeRunc or wire.RuntimeGVisor); GVisorEngineRuntime is the
	// engine runtime that runs gVisor sandboxes (runtime.go).
	DefaultRuntime, GVisorEngineRuntime string
	// GatewayMaxConcurrent caps one sandbox's requests in flight through
	// the LLM gateway, all providers together (gateway.go).
	GatewayMaxConcurrent string
	// providersFileRead keeps a second Validate from reading it again.
	providersFileRead bool
	// reload, set by Load, loads the configuration again from the same
	// flags, environment and files (Reload).
	reload func() (Config, error)

	// sources maps a setting's key to where its value came from.
	sources map[string]string
}

type kind int

const (
	kindString kind = iota
	kindDuration
	kindBytes
	kindLimits
	kindBool
)

// setting describes one configuration value. Its TOML key is key, its flag
// is key with dashes, its environment variable HOTCELL_ + upper-case key.
type setting struct {
	key   string
	kind  kind
	usage string
	field func(*Config) any // *string, *time.Duration, *int64, *bool or *wire.Limits
}

func (s setting) flag() string { return strings.ReplaceAll(s.key, "_", "-") }
func (s setting) env() string  { return envPrefix + strings.ToUpper(s.key) }

var settings = []setting{
	{"listen", kindString, "address (host:port) the API listens on",
		func(c *Config) any { return &c.Listen }},
	{"data_dir", kindString, "directory for the database, the API token and sandbox state",
		func(c *Config) any { return &c.DataDir }},
	{"store", kindString, "where the daemon keeps its records: empty for the SQLite file <data_dir>/hotcell.db, or a PostgreSQL URL (postgres://user:password@host:5432/db) that several daemons can share",
		func(c *Config) any { return &c.Store }},
	{"advertise_url", kindString, "URL (http:// or https://) the other daemons on the same PostgreSQL store reach this daemon's API at, to forward it calls for the sandboxes whose agents it holds (default: http:// and the listen address, which a wildcard listen host such as 0.0.0.0 leaves unreachable)",
		func(c *Config) any { return &c.AdvertiseURL }},
	{"default_image", kindString, "image for sandboxes created without one",
		func(c *Config) any { return &c.DefaultImage }},
	{"default_runtime", kindString, "isolation runtime of sandboxes created without one: runc (the host's kernel) or gvisor (gVisor's user-space kernel, runsc)",
		func(c *Config) any { return &c.DefaultRuntime }},
	{"gvisor_engine_runtime", kindString, "name under which the Docker Engine knows gVisor's runsc (a key of daemon.json's \"runtimes\")",
		func(c *Config) any { return &c.GVisorEngineRuntime }},
	{"agent_binary", kindString, "path of the hotcell-agent binary (default: next to hotcell, else in PATH)",
		func(c *Config) any { return &c.AgentBinary }},
	{"agent_channel", kindString, "how agents reach the daemon: unix (a socket in each sandbox's run dir) or tcp (TLS to agent_listen with a per-sandbox credential, as sandboxes on other hosts must)",
		func(c *Config) any { return &c.AgentChannel }},
	{"agent_listen", kindString, "address (host:port) of the TCP agent channel's listener, when agent_channel is tcp",
		func(c *Config) any { return &c.AgentListen }},
	{"agent_advertise", kindString, "host:port sandboxes dial for the TCP agent channel, or several separated by commas that agents try in turn (the daemons of a set on one store, each configured with the same list) (default: the egress network's gateway address with agent_listen's port; with driver kubernetes, agent_listen itself when it names an address)",
		func(c *Config) any { return &c.AgentAdvertise }},
	{"log_level", kindString, "log level: debug, info, warn or error",
		func(c *Config) any { return &c.LogLevel }},
	{"log_format", kindString, "log format: text or json",
		func(c *Config) any { return &c.LogFormat }},
	{"docker_host", kindString, "Docker Engine address (default: the Docker client environment, DOCKER_HOST)",
		func(c *Config) any { return &c.DockerHost }},
	{"driver", kindString, "where sandboxes run: docker (containers on this host's Docker Engine) or kubernetes (pods in a cluster: see the kubernetes_* settings, the file's [kubernetes] table)",
		func(c *Config) any { return &c.Driver }},
	{"kubernetes_kubeconfig", kindString, "kubeconfig file of the cluster, with driver kubernetes (default: the in-cluster config, then KUBECONFIG and ~/.kube/config)",
		func(c *Config) any { return &c.KubeKubeconfig }},
	{"kubernetes_namespace", kindString, "namespace of every pod, Secret and claim of the sandboxes, with driver kubernetes (it must exist)",
		func(c *Config) any { return &c.KubeNamespace }},
	{"kubernetes_storage_class", kindString, "StorageClass of the sandboxes' workspace claims, with driver kubernetes (default: the cluster's default class)",
		func(c *Config) any { return &c.KubeStorageClass }},
	{"kubernetes_workspace_host_dir", kindString, "absolute directory on the node where the driver makes each workspace's hostPath volume itself, for a single-node cluster on this host without a provisioner (default: none, the StorageClass provisions)",
		func(c *Config) any { return &c.KubeWorkspaceHostDir }},
	{"kubernetes_agent_image", kindString, "image whose /hotcell-agent an init container copies into every pod, with driver kubernetes",
		func(c *Config) any { return &c.KubeAgentImage }},
	{"kubernetes_pull_policy", kindString, "image pull policy of the pods' containers: Always, IfNotPresent or Never (a cluster without a registry)",
		func(c *Config) any { return &c.KubePullPolicy }},
	{"kubernetes_egress_resolver", kindString, "address of hotcell egress-node's resolver, which every pod's dnsConfig names, with driver kubernetes: set, every egress mode is served, enforced on each node by hotcell egress-node (a start waits for it); empty, only mode open is served. Every node must answer on it: the nodes' common gateway on the pod network, or a link-local address such as 169.254.20.53, which egress-node puts on each node (docs/kubernetes.md, Egress)",
		func(c *Config) any { return &c.KubeEgressResolver }},
	{"kubernetes_network_policies", kindBool, "make a NetworkPolicy per sandbox that expresses its egress mode, for clusters whose CNI enforces them, with driver kubernetes",
		func(c *Config) any { return &c.KubeNetworkPolicies }},
	{"kubernetes_gateway_advertise", kindString, "IPv4 address:port pods reach the LLM gateway at (their base URL's host), with driver kubernetes: a Service's cluster IP and port in front of every daemon's gateway, so that a sandbox's calls do not depend on the daemon that made it (default: this daemon's, agent_advertise's host at egress_gateway_port)",
		func(c *Config) any { return &c.KubeGatewayAdvertise }},
	{"kubernetes_registry", kindString, "registry, as the nodes pull from it (host[:port][/path]), where the driver pushes the images it makes, with driver kubernetes: snapshots and templates saved from a sandbox (default: none, and those are refused)",
		func(c *Config) any { return &c.KubeRegistry }},
	{"kubernetes_registry_url", kindString, "endpoint the daemon pushes kubernetes_registry's images to: http://host:port for a registry without TLS (default: https:// kubernetes_registry's host)",
		func(c *Config) any { return &c.KubeRegistryURL }},
	{"kubernetes_registry_secret", kindString, "Secret of type kubernetes.io/dockerconfigjson in kubernetes_namespace with kubernetes_registry's credentials: the daemon pushes with them, and pods pull with it as their image pull secret (default: none, the registry takes calls without credentials, and must be out of sandboxes' reach)",
		func(c *Config) any { return &c.KubeRegistrySecret }},
	{"exec_timeout", kindDuration, "default timeout of an exec",
		func(c *Config) any { return &c.ExecTimeout }},
	{"setup_timeout", kindDuration, "timeout of each setup command at create",
		func(c *Config) any { return &c.SetupTimeout }},
	{"git_timeout", kindDuration, "timeout of the host-side git clone of a create's repo",
		func(c *Config) any { return &c.GitTimeout }},
	{"allowed_hosts", kindString, "comma-separated host names the API answers besides loopback, the listen host and the preview domain (*.example.com for subdomains, * for any); other Host headers get a 403 (DNS rebinding defence)",
		func(c *Config) any { return &c.AllowedHosts }},
	{"allow_local_repos", kindBool, "let a create's repo.url be a host path or file:// URL (the clone runs on the host: only for trusted clients)",
		func(c *Config) any { return &c.AllowLocalRepos }},
	{"max_exec_output", kindBytes, "cap in bytes on each of stdout and stderr of a buffered exec",
		func(c *Config) any { return &c.MaxExecOutput }},
	{"shutdown_timeout", kindDuration, "how long shutdown waits for requests and the work they started (creates, backups, restores) before it cancels them",
		func(c *Config) any { return &c.ShutdownTimeout }},
	{"stream_write_timeout", kindDuration, "how long a streamed answer waits for a client that reads nothing before it drops the stream",
		func(c *Config) any { return &c.StreamWriteTimeout }},
	{"preview_domain", kindString, "domain whose names {port}-{sandbox id}.DOMAIN serve port previews (empty: off)",
		func(c *Config) any { return &c.PreviewDomain }},
	{"preview_token_ttl", kindDuration, "how long a preview token from preview-url lasts; each token opens one port of one sandbox",
		func(c *Config) any { return &c.PreviewTokenTTL }},
	{"console_session_ttl", kindDuration, "how long a sign-in to the web console (/ui/) lasts before the browser must sign in again",
		func(c *Config) any { return &c.ConsoleSessionTTL }},
	{"e2b_templates", kindString, "comma-separated E2B template ids and the images they mean, id=image (e.g. code-interpreter-v1=myorg/ci:latest); base is default_image unless named here, and other ids are taken as image names (docs/e2b.md)",
		func(c *Config) any { return &c.E2BTemplates }},
	{"pools", kindString, "warm pools of templates, name=min[:max[:refill per second]], comma-separated (e.g. py-data=8:16:4); they replace what the API set for those templates at each start (docs/templates.md)",
		func(c *Config) any { return &c.Pools }},
	{"default_limits", kindLimits, "limits of a sandbox whose create gives none, per field: " + limitsSyntax + "; fields not named keep this default; disk is the size of /workspace and the most the root filesystem's writable layer may take",
		func(c *Config) any { return &c.DefaultLimits }},
	{"disk_check_interval", kindDuration, "how often each running sandbox's writable layer is measured; one over its disk limit is stopped (reason disk_limit)",
		func(c *Config) any { return &c.DiskCheckInterval }},
	{"max_limits", kindLimits, "largest limits a create may ask for, same syntax; fields not named have no maximum",
		func(c *Config) any { return &c.MaxLimits }},
	{"backup_max_size", kindBytes, "largest workspace tar one backup, upload or snapshot workspace takes, in bytes; a stream past it is aborted and removed (0: no cap)",
		func(c *Config) any { return &c.BackupMaxSize }},
	{"backup_quota", kindBytes, "bytes one sandbox's kept backups (snapshots' workspaces included) may take on the daemon's disk; a backup past it is refused with 507 (0: no quota)",
		func(c *Config) any { return &c.BackupQuota }},
	{"min_free_disk", kindBytes, "bytes backups and snapshots leave free on the data dir's filesystem: one that would go below is refused (507) or aborted (0: only a full disk stops them)",
		func(c *Config) any { return &c.MinFreeDisk }},
	{"backup_dir", kindString, "absolute directory for backups and snapshots' workspaces (default: data_dir/backups); on a set of daemons, a volume every daemon mounts, or a backup is only on the daemon that took it",
		func(c *Config) any { return &c.BackupDir }},
	{"backup_idle_timeout", kindDuration, "a backup whose tar stream from the agent delivers nothing for this long is aborted",
		func(c *Config) any { return &c.BackupIdleTimeout }},
	{"template_build_timeout", kindDuration, "longest a template build may take; one still running then is stopped and records nothing",
		func(c *Config) any { return &c.TemplateBuildTimeout }},
	{"template_build_limits", kindLimits, "memory (MiB) and cpus of a template build's RUN steps, e.g. memory=4096,cpus=2 (0: no limit)",
		func(c *Config) any { return &c.TemplateBuildLimits }},
	{"template_build_network", kindString, "network of a template build's RUN steps: default (the engine's bridge, what the host reaches) or none",
		func(c *Config) any { return &c.TemplateBuildNetwork }},
	{"egress_network", kindString, "name of the bridge network sandboxes join",
		func(c *Config) any { return &c.EgressNetwork }},
	{"egress_subnet", kindString, "subnet (CIDR) of the egress network; firewall rules key on it",
		func(c *Config) any { return &c.EgressSubnet }},
	{"egress_dns_upstream", kindString, "comma-separated host:port resolvers allowed names are forwarded to (default: the host's /etc/resolv.conf)",
		func(c *Config) any { return &c.EgressDNSUpstream }},
	{"egress_default_mode", kindString, "egress mode of sandboxes created without one: open, none or allowlist",
		func(c *Config) any { return &c.EgressDefaultMode }},
	{"egress_gateway_port", kindString, "TCP port of the LLM gateway on the egress gateway address, reachable from every sandbox; with driver kubernetes on agent_listen's host, pods reaching it at agent_advertise's host (0: none)",
		func(c *Config) any { return &c.EgressGatewayPort }},
	{"egress_allow_private", kindString, "comma-separated IPv4 CIDRs of private networks sandboxes may reach; the rest of 10/8, 172.16/12, 192.168/16, 100.64/10 and 198.18/15 is dropped in every egress mode (default: none)",
		func(c *Config) any { return &c.EgressAllowPrivate }},
	{"idle_timeout", kindDuration, "default idle timeout of a sandbox (0: none)", func(c *Config) any { return &c.IdleTimeout }},
	{"idle_action", kindString, "default idle timeout action: stop, pause or destroy", func(c *Config) any { return &c.IdleAction }},
	{"max_lifetime", kindDuration, "default maximum lifetime of a sandbox (0: none)", func(c *Config) any { return &c.MaxLifetime }},
	{"lifetime_action", kindString, "default lifetime action: stop, pause or destroy", func(c *Config) any { return &c.LifetimeAction }},
	{"orphan_grace", kindDuration, "how long a box of this daemon with no record is kept before removal (0: at once)", func(c *Config) any { return &c.OrphanGrace }},
	{"providers_file", kindString, "TOML file of [[provider]] tables: the LLM gateway's upstreams", func(c *Config) any { return &c.ProvidersFile }},
	{"gateway_max_concurrent", kindString, "most LLM gateway requests one sandbox may have in flight, all providers together; more get a 429", func(c *Config) any { return &c.GatewayMaxConcurrent }},
	{"engine_restart_policy", kindString, "sandboxes that ran when the engine restarted: restart or mark (stopped)", func(c *Config) any { return &c.EngineRestart }},
}

func lookup(key string) (setting, bool) {
	for _, s := range settings {
		if s.key == key {
			return s, true
		}
	}
	return setting{}, false
}

// Default returns the configuration before any file, environment or flag.
func Default() Config {
	return Config{
		Listen:              DefaultListen,
		DataDir:             DefaultDataDir,
		DefaultImage:        DefaultImage,
		DefaultRuntime:      wire.RuntimeRunc,
		GVisorEngineRuntime: DefaultGVisorEngineRuntime,
		LogLevel:            "info",
		LogFormat:           "text",
		ExecTimeout:         defaultExecTimeout,
		SetupTimeout:        defaultSetupTimeout,
		GitTimeout:          defaultGitTimeout,
		MaxExecOutput:       defaultMaxExecOut,
		ShutdownTimeout:     defaultShutdown,
		StreamWriteTimeout:  defaultStreamWrite,
		IdleAction:          "stop",
		LifetimeAction:      "destroy",
		OrphanGrace:         10 * time.Minute,
		EngineRestart:       "restart",
		PreviewDomain:       DefaultPreviewDomain,
		PreviewTokenTTL:     24 * time.Hour,
		ConsoleSessionTTL:   12 * time.Hour,
		DefaultLimits:       DefaultSandboxLimits,
		MaxLimits:           DefaultMaxLimits,
		BackupMaxSize:       DefaultBackupMaxSize,
		BackupQuota:         DefaultBackupQuota,
		MinFreeDisk:         DefaultMinFreeDisk,
		BackupIdleTimeout:   DefaultBackupIdleTimeout,
		DiskCheckInterval:   10 * time.Second,

		TemplateBuildTimeout: DefaultTemplateBuildTimeout,
		TemplateBuildLimits:  DefaultTemplateBuildLimits,
		TemplateBuildNetwork: BuildNetworkDefault,

		EgressNetwork:     DefaultEgressNetwork,
		EgressSubnet:      DefaultEgressSubnet,
		EgressDefaultMode: DefaultEgressMode,
		EgressGatewayPort: DefaultEgressGatewayPort,

		AgentChannel: AgentChannelUnix,
		AgentListen:  DefaultAgentListen,

		Driver:         DriverDocker,
		KubeNamespace:  DefaultKubeNamespace,
		KubeAgentImage: DefaultKubeAgentImage,
		KubePullPolicy: DefaultKubePullPolicy,

		GatewayMaxConcurrent: DefaultGatewayMaxConcurrent,
	}
}

// AddFlags registers a flag for every setting, plus --config, on fs.
func AddFlags(fs *pflag.FlagSet) {
	fs.String(ConfigFlag, "", "TOML config file (also "+ConfigEnv+")")
	def := Default()
	for _, s := range settings {
		usage := s.usage + " (also " + s.env() + ")"
		switch p := s.field(&def).(type) {
		case *string:
			fs.String(s.flag(), *p, usage)
		case *time.Duration:
			fs.Duration(s.flag(), *p, usage)
		case *int64:
			fs.Int64(s.flag(), *p, usage)
		case *wire.Limits:
			fs.String(s.flag(), FormatLimits(*p), usage)
		case *bool:
			fs.Bool(s.flag(), *p, usage)
		}
	}
}

// Load builds the daemon configuration: defaults, then the file named by
// --config or HOTCELL_CONFIG, then HOTCELL_* variables, then the flags the
// user set on fs; then it validates the result. fs and getenv may be nil.
func Load(fs *pflag.FlagSet, getenv func(string) string) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Default()
	path, namedBy := getenv(ConfigEnv), ConfigEnv
	if fs != nil && fs.Changed(ConfigFlag) {
		path, _ = fs.GetString(ConfigFlag)
		namedBy = "--" + ConfigFlag
	}
	if path != "" {
		if err := c.applyFile(path, namedBy); err != nil {
			return Config{}, err
		}
	}
	if err := c.ApplyEnv(getenv); err != nil {
		return Config{}, err
	}
	if fs != nil {
		if err := c.ApplyFlags(fs); err != nil {
			return Config{}, err
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	c.reload = func() (Config, error) { return Load(fs, getenv) }
	return c, nil
}

// ApplyFile sets the settings present in the TOML file at path. A key the
// file should not have is an error naming it: a typo must not silently
// leave a default in place.
func (c *Config) ApplyFile(path string) error { return c.applyFile(path, "") }

// applyFile is ApplyFile; namedBy says which flag or variable named the
// file, so that a missing file points at what to fix.
func (c *Config) applyFile(path, namedBy string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if namedBy != "" {
			return fmt.Errorf("config: read file named by %s: %w", namedBy, err)
		}
		return fmt.Errorf("config: read file: %w", err)
	}
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err != nil {
		return fmt.Errorf("config: parse %s: %w", path, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	source := "file " + path
	for _, k := range keys {
		if k == "provider" {
			if err := c.applyProviders(data, path); err != nil {
				return err
			}
			continue
		}
		if k == kubeTable {
			if err := c.applyKubeTable(path, m[k], source); err != nil {
				return err
			}
			continue
		}
		s, ok := lookup(k)
		if !ok {
			return fmt.Errorf("config: %s: unknown key %q (known keys: %s)", path, k, knownKeys())
		}
		if err := c.applyFileValue(path, s, k, m[k], source); err != nil {
			return err
		}
	}
	return nil
}

// applyKubeTable sets the kubernetes_* settings from the file's
// [kubernetes] table, whose keys are theirs without the prefix.
func (c *Config) applyKubeTable(path string, v any, source string) error {
	t, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("config: %s: %s: want a table ([kubernetes] with keys such as namespace), got %T", path, kubeTable, v)
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s, ok := lookup(kubeTable + "_" + k)
		if !ok {
			var known []string
			for _, s := range settings {
				if rest, ok := strings.CutPrefix(s.key, kubeTable+"_"); ok {
					known = append(known, rest)
				}
			}
			return fmt.Errorf("config: %s: [%s]: unknown key %q (known keys: %s)", path, kubeTable, k, strings.Join(known, ", "))
		}
		if err := c.applyFileValue(path, s, kubeTable+"."+k, t[k], source); err != nil {
			return err
		}
	}
	return nil
}

// applyFileValue sets s from the file's value v of key k.
func (c *Config) applyFileValue(path string, s setting, k string, v any, source string) error {
	var raw string
	switch v := v.(type) {
	case string:
		if s.kind == kindBytes {
			return fmt.Errorf("config: %s: %s: want an integer number of bytes, got string %q", path, k, v)
		}
		raw = v
	case bool:
		if s.kind != kindBool {
			return fmt.Errorf("config: %s: %s: want a string%s, got boolean %v", path, k, durationHint(s), v)
		}
		raw = strconv.FormatBool(v)
	case int64:
		if s.kind != kindBytes {
			return fmt.Errorf("config: %s: %s: want a string%s, got integer %d", path, k, durationHint(s), v)
		}
		raw = strconv.FormatInt(v, 10)
	default:
		return fmt.Errorf("config: %s: %s: want a string%s, got %T", path, k, durationHint(s), v)
	}
	return c.set(s, raw, source)
}

func knownKeys() string {
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
	}
	return strings.Join(keys, ", ")
}

func durationHint(s setting) string {
	if s.kind == kindDuration {
		return ` duration such as "60s"`
	}
	return ""
}

// ApplyEnv sets the settings whose HOTCELL_* variable is set and not empty.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	for _, s := range settings {
		if v := getenv(s.env()); v != "" {
			if err := c.set(s, v, s.env()); err != nil {
				return err
			}
		}
	}
	return nil
}

// ApplyFlags sets the settings whose flag the user set on fs; flags left at
// their default do not override the file or the environment.
func (c *Config) ApplyFlags(fs *pflag.FlagSet) error {
	for _, s := range settings {
		f := fs.Lookup(s.flag())
		if f == nil || !f.Changed {
			continue
		}
		if err := c.set(s, f.Value.String(), "--"+s.flag()); err != nil {
			return err
		}
	}
	return nil
}

// set parses raw for s and records source. Parsing errors name the setting
// and the source; range checks are left to Validate.
func (c *Config) set(s setting, raw, source string) error {
	switch p := s.field(c).(type) {
	case *string:
		*p = strings.TrimSpace(raw)
	case *time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("config: %s %q: want a duration such as \"60s\" (from %s)", s.key, raw, source)
		}
		*p = d
	case *int64:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return fmt.Errorf("config: %s %q: want an integer number of bytes (from %s)", s.key, raw, source)
		}
		*p = n
	case *wire.Limits:
		// Each source replaces the whole setting; the fields it does not
		// name keep the shipped default, not a lower source's value.
		def := Default()
		l, err := parseLimits(raw, *s.field(&def).(*wire.Limits))
		if err != nil {
			return fmt.Errorf("config: %s %q: %v; want %s (from %s)", s.key, raw, err, limitsSyntax, source)
		}
		*p = l
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("config: %s %q: want true or false (from %s)", s.key, raw, source)
		}
		*p = b
	}
	if c.sources == nil {
		c.sources = map[string]string{}
	}
	c.sources[s.key] = source
	return nil
}

// Source says where a setting's value came from: "default", "file PATH",
// "HOTCELL_X" or "--x". key is the TOML key, e.g. "data_dir".
func (c Config) Source(key string) string {
	if src, ok := c.sources[key]; ok {
		return src
	}
	return defaultSource
}

// Validate checks every setting and resolves DataDir and AgentBinary to
// absolute paths. Errors name the setting, its value and its source.
func (c *Config) Validate() error {
	bad := func(key string, value any, format string, args ...any) error {
		return fmt.Errorf("config: %s %q: %s (from %s)", key, fmt.Sprint(value), fmt.Sprintf(format, args...), c.Source(key))
	}

	if _, _, err := splitListen(c.Listen); err != nil {
		return bad("listen", c.Listen, "must be host:port with a port from 0 to 65535: %v", err)
	}

	if c.DataDir == "" {
		return bad("data_dir", c.DataDir, "must not be empty")
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return bad("data_dir", c.DataDir, "cannot make it absolute: %v", err)
	}
	c.DataDir = dir

	if c.Store != "" {
		if !strings.HasPrefix(c.Store, "postgres://") && !strings.HasPrefix(c.Store, "postgresql://") {
			return bad("store", redact.URL(c.Store), "must be empty (the SQLite file in data_dir) or a PostgreSQL URL, postgres://user:password@host:5432/db")
		}
		if _, err := url.Parse(c.Store); err != nil {
			return bad("store", redact.URL(c.Store), "is not a URL (a password with /, @ or : in it must be percent-encoded)")
		}
	}

	if c.AdvertiseURL != "" {
		u, err := url.Parse(c.AdvertiseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return bad("advertise_url", redact.URL(c.AdvertiseURL), "must be an absolute http:// or https:// URL with a host and no credentials, query or fragment, e.g. http://10.0.0.5:8080")
		}
		c.AdvertiseURL = strings.TrimSuffix(c.AdvertiseURL, "/")
	}

	if c.DefaultImage == "" {
		return bad("default_image", c.DefaultImage, "must not be empty")
	}

	c.LogLevel = strings.ToLower(c.LogLevel)
	if _, ok := logLevels[c.LogLevel]; !ok {
		return bad("log_level", c.LogLevel, "must be debug, info, warn or error")
	}
	c.LogFormat = strings.ToLower(c.LogFormat)
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log_format", c.LogFormat, "must be text or json")
	}

	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"exec_timeout", c.ExecTimeout},
		{"setup_timeout", c.SetupTimeout},
		{"git_timeout", c.GitTimeout},
		{"shutdown_timeout", c.ShutdownTimeout},
		{"stream_write_timeout", c.StreamWriteTimeout},
		{"preview_token_ttl", c.PreviewTokenTTL},
		{"console_session_ttl", c.ConsoleSessionTTL},
		{"disk_check_interval", c.DiskCheckInterval},
	} {
		if d.v <= 0 {
			return bad(d.key, d.v, "must be greater than 0")
		}
	}
	if err := c.validateLifecycle(bad); err != nil {
		return err
	}
	if c.MaxExecOutput <= 0 {
		return bad("max_exec_output", c.MaxExecOutput, "must be greater than 0")
	}

	for _, h := range c.AllowedHostList() {
		if err := validateDomain(strings.TrimPrefix(h, "*.")); h != "*" && err != nil {
			return bad("allowed_hosts", c.AllowedHosts, "%q: %v (or *.name for subdomains, * for any)", h, err)
		}
	}

	c.PreviewDomain = strings.TrimSuffix(strings.ToLower(c.PreviewDomain), ".")
	if err := validateDomain(c.PreviewDomain); err != nil {
		return bad("preview_domain", c.PreviewDomain, "%v", err)
	}

	if _, err := parseE2BTemplates(c.E2BTemplates); err != nil {
		return bad("e2b_templates", c.E2BTemplates, "%v", err)
	}

	if _, err := parsePools(c.Pools); err != nil {
		return bad("pools", c.Pools, "%v", err)
	}

	if err := c.validateLimits(bad); err != nil {
		return err
	}
	if err := c.validateRuntime(bad); err != nil {
		return err
	}
	if err := c.validateBackups(bad); err != nil {
		return err
	}
	if err := c.validateTemplates(bad); err != nil {
		return err
	}
	if err := c.validateDriver(bad); err != nil {
		return err
	}
	if err := c.validateAgentChannel(bad); err != nil {
		return err
	}
	if err := c.validateEgress(bad); err != nil {
		return err
	}
	if err := c.validateProviders(bad); err != nil {
		return err
	}

	agent, err := resolveAgent(c.AgentBinary)
	if err != nil && c.Kubernetes() && c.AgentBinary == "" {
		// Pods get the agent from kubernetes_agent_image: a daemon in a
		// pod of the hotcell image has no agent binary beside it.
		return nil
	}
	if err != nil {
		const hint = "build it with `make build` or pass --agent-binary"
		if c.AgentBinary == "" {
			return fmt.Errorf("config: agent_binary: %v; %s (or set HOTCELL_AGENT_BINARY)", err, hint)
		}
		return bad("agent_binary", c.AgentBinary, "%v; %s", err, hint)
	}
	c.AgentBinary = agent
	return nil
}

var logLevels = map[string]slog.Level{
	"debug": slog.LevelDebug,
	"info":  slog.LevelInfo,
	"warn":  slog.LevelWarn,
	"error": slog.LevelError,
}

// SlogLevel returns LogLevel as a slog.Level (info if it is unknown).
func (c Config) SlogLevel() slog.Level {
	return logLevels[strings.ToLower(c.LogLevel)]
}

func splitListen(addr string) (host string, port uint64, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err = strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// resolveAgent finds the agent binary and checks that it is an executable
// regular file. The result is absolute because it is bind-mounted.
func resolveAgent(p string) (string, error) {
	if p == "" {
		var tried []string
		if exe, err := os.Executable(); err == nil {
			cand := filepath.Join(filepath.Dir(exe), AgentBinaryName)
			if err := checkExecutable(cand); err == nil {
				return cand, nil
			}
			tried = append(tried, cand)
		}
		if found, err := exec.LookPath(AgentBinaryName); err == nil {
			if abs, err := filepath.Abs(found); err == nil {
				return abs, checkExecutable(abs)
			}
		}
		tried = append(tried, "PATH")
		return "", fmt.Errorf("%s not found (looked in %s)", AgentBinaryName, strings.Join(tried, " and "))
	}
	if !strings.ContainsRune(p, filepath.Separator) {
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("not found in PATH")
		}
		p = found
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, checkExecutable(abs)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist", p)
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// AllowedHostList returns AllowedHosts as lower-case names, empty entries
// dropped.
func (c Config) AllowedHostList() []string {
	var out []string
	for _, h := range strings.Split(c.AllowedHosts, ",") {
		if h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), "."); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// ListenHost is the host of Listen ("" when it is empty or unparsable).
func (c Config) ListenHost() string {
	host, _, _ := splitListen(c.Listen)
	return host
}

// TokenPath is the file holding the daemon's API token.
func (c Config) TokenPath() string { return filepath.Join(c.DataDir, "token") }

// BackupsPath is where backups are kept: backup_dir, else data_dir/backups.
func (c Config) BackupsPath() string {
	if c.BackupDir != "" {
		return c.BackupDir
	}
	return filepath.Join(c.DataDir, "backups")
}

// DBPath is the SQLite database file.
func (c Config) DBPath() string { return filepath.Join(c.DataDir, "hotcell.db") }

// StoreTarget is what store.Open takes: the PostgreSQL URL of Store, or
// else the SQLite file DBPath.
func (c Config) StoreTarget() string {
	if c.Store != "" {
		return c.Store
	}
	return c.DBPath()
}

// SandboxDir is the daemon-owned directory of one sandbox. id must already
// be validated: it becomes a path element.
func (c Config) SandboxDir(id string) string { return filepath.Join(c.DataDir, "sandboxes", id) }

// IsLoopback reports whether Listen only accepts connections from this
// host: an explicit loopback address or "localhost". An empty host listens
// on every interface.
func (c Config) IsLoopback() bool {
	host, _, err := splitListen(c.Listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// LogValue implements slog.LogValuer. The config holds no secrets today;
// the Docker host is still logged without URL credentials in case an
// operator put some there.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("listen", c.Listen),
		slog.String("data_dir", c.DataDir),
		slog.String("store", redact.URL(c.Store)),
		slog.String("default_image", c.DefaultImage),
		slog.String("default_runtime", c.DefaultRuntime),
		slog.String("gvisor_engine_runtime", c.GVisorEngineRuntime),
		slog.String("agent_binary", c.AgentBinary),
		slog.String("log_level", c.LogLevel),
		slog.String("log_format", c.LogFormat),
		slog.String("docker_host", redact.URL(c.DockerHost)),
		slog.String("driver", c.Driver),
		slog.String("kubernetes_kubeconfig", c.KubeKubeconfig),
		slog.String("kubernetes_namespace", c.KubeNamespace),
		slog.String("kubernetes_egress_resolver", c.KubeEgressResolver),
		slog.Bool("kubernetes_network_policies", c.KubeNetworkPolicies),
		slog.String("kubernetes_gateway_advertise", c.KubeGatewayAdvertise),
		slog.String("kubernetes_registry", c.KubeRegistry),
		slog.String("agent_channel", c.AgentChannel),
		slog.String("agent_advertise", c.AgentAdvertise),
		slog.String("advertise_url", c.AdvertiseURL),
		slog.Duration("exec_timeout", c.ExecTimeout),
		slog.Duration("setup_timeout", c.SetupTimeout),
		slog.Duration("git_timeout", c.GitTimeout),
		slog.String("allowed_hosts", c.AllowedHosts),
		slog.Bool("allow_local_repos", c.AllowLocalRepos),
		slog.Int64("max_exec_output", c.MaxExecOutput),
		slog.Duration("shutdown_timeout", c.ShutdownTimeout),
		slog.Duration("stream_write_timeout", c.StreamWriteTimeout),
		slog.Duration("preview_token_ttl", c.PreviewTokenTTL),
		slog.Duration("console_session_ttl", c.ConsoleSessionTTL),
		slog.String("preview_domain", c.PreviewDomain),
		slog.String("e2b_templates", c.E2BTemplates),
		slog.String("pools", c.Pools),
		slog.String("default_limits", FormatLimits(c.DefaultLimits)),
		slog.String("max_limits", FormatLimits(c.MaxLimits)),
		slog.Duration("disk_check_interval", c.DiskCheckInterval),
		slog.Duration("template_build_timeout", c.TemplateBuildTimeout),
		slog.String("template_build_limits", FormatLimits(c.TemplateBuildLimits)),
		slog.String("template_build_network", c.TemplateBuildNetwork),
	)
}

// validateDomain accepts a DNS name such as preview.example.com (or empty):
// letters, digits and '-' in dot-separated labels.
func validateDomain(d string) error {
	if d == "" {
		return nil
	}
	if len(d) > 200 {
		return fmt.Errorf("must be at most 200 characters, leaving room for the {port}-{id} label")
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("must be a DNS name: labels of 1 to 63 characters between dots")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("must be a DNS name: label %q starts or ends with '-'", label)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("must be a DNS name: %q is not allowed (letters, digits, '-' and '.')", r)
			}
		}
	}
	return nil
}
