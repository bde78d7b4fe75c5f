package config

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"

	"github.com/hotcell/hotcell/internal/wire"
)

// fakeAgent writes an executable stand-in for hotcell-agent.
func fakeAgent(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), AgentBinaryName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hotcell.toml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags %v: %v", args, err)
	}
	return fs
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	got, err := Load(flags(t, "--agent-binary", agent), envMap(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Config{
		Listen:             "127.0.0.1:8080",
		DataDir:            "/var/lib/hotcell",
		DefaultImage:       "hotcell/base:latest",
		DefaultRuntime:     "runc",
		AgentBinary:        agent,
		LogLevel:           "info",
		LogFormat:          "text",
		ExecTimeout:        60 * time.Second,
		SetupTimeout:       10 * time.Minute,
		GitTimeout:         10 * time.Minute,
		MaxExecOutput:      1 << 20,
		ShutdownTimeout:    10 * time.Second,
		StreamWriteTimeout: time.Minute,
		PreviewDomain:      "preview.localhost",
		PreviewTokenTTL:    24 * time.Hour,
		ConsoleSessionTTL:  12 * time.Hour,
		IdleAction:         "stop",
		LifetimeAction:     "destroy",
		OrphanGrace:        10 * time.Minute,
		EngineRestart:      "restart",
		DiskCheckInterval:  10 * time.Second,
		DefaultLimits:      wire.Limits{MemoryMB: 2048, CPUs: 1, PidsLimit: 1024, DiskMB: 10240},
		BackupMaxSize:      10 << 30,
		BackupQuota:        20 << 30,
		MinFreeDisk:        1 << 30,
		BackupIdleTimeout:  2 * time.Minute,

		TemplateBuildTimeout: 30 * time.Minute,
		TemplateBuildLimits:  wire.Limits{MemoryMB: 4096, CPUs: 2},
		TemplateBuildNetwork: "default",

		EgressNetwork: "hotcell-egress", EgressSubnet: "10.213.0.0/16", EgressDefaultMode: "open", EgressGatewayPort: "8090",
		EgressDNSUpstream: got.EgressDNSUpstream, // the host's resolv.conf

		GatewayMaxConcurrent: "8",
		GVisorEngineRuntime:  "runsc",

		AgentChannel: "unix", AgentListen: ":8091",

		Driver: "docker", KubeNamespace: "hotcell", KubeAgentImage: "hotcell/agent:latest", KubePullPolicy: "IfNotPresent",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if src := got.Source("listen"); src != "default" {
		t.Errorf("Source(listen): got %q, want default", src)
	}
	if !got.IsLoopback() {
		t.Error("default listen address: IsLoopback got false, want true")
	}
	if got.TokenPath() != "/var/lib/hotcell/token" || got.DBPath() != "/var/lib/hotcell/hotcell.db" ||
		got.SandboxDir("abc") != "/var/lib/hotcell/sandboxes/abc" {
		t.Errorf("paths: got %s, %s, %s", got.TokenPath(), got.DBPath(), got.SandboxDir("abc"))
	}
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	file := writeFile(t, `
listen = "127.0.0.1:1001"
data_dir = "/file"
default_image = "file/image"
exec_timeout = "1s"
setup_timeout = "2s"
git_timeout = "4s"
max_exec_output = 1000
log_level = "debug"
`)
	env := map[string]string{
		ConfigEnv:              file,
		"HOTCELL_LISTEN":       "127.0.0.1:2002",
		"HOTCELL_DATA_DIR":     "/env",
		"HOTCELL_EXEC_TIMEOUT": "3s",
		"HOTCELL_GIT_TIMEOUT":  "5s",
		"HOTCELL_LOG_LEVEL":    "", // empty means unset
	}
	got, err := Load(flags(t, "--listen", "127.0.0.1:3003", "--agent-binary", agent, "--git-timeout", "6s"), envMap(env))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	tests := []struct {
		key, got, want, source string
	}{
		{"listen", got.Listen, "127.0.0.1:3003", "--listen"},
		{"data_dir", got.DataDir, "/env", "HOTCELL_DATA_DIR"},
		{"exec_timeout", got.ExecTimeout.String(), "3s", "HOTCELL_EXEC_TIMEOUT"},
		{"default_image", got.DefaultImage, "file/image", "file " + file},
		{"setup_timeout", got.SetupTimeout.String(), "2s", "file " + file},
		{"git_timeout", got.GitTimeout.String(), "6s", "--git-timeout"},
		{"max_exec_output", strconv.FormatInt(got.MaxExecOutput, 10), "1000", "file " + file},
		{"log_level", got.LogLevel, "debug", "file " + file},
		{"log_format", got.LogFormat, "text", "default"},
		{"agent_binary", got.AgentBinary, agent, "--agent-binary"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("value: got %q, want %q", tt.got, tt.want)
			}
			if src := got.Source(tt.key); src != tt.source {
				t.Errorf("source: got %q, want %q", src, tt.source)
			}
		})
	}
}

func TestConfigFlagBeatsEnv(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	fromFlag := writeFile(t, `default_image = "flag/image"`)
	fromEnv := writeFile(t, `default_image = "env/image"`)
	got, err := Load(flags(t, "--config", fromFlag, "--agent-binary", agent), envMap(map[string]string{ConfigEnv: fromEnv}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.DefaultImage != "flag/image" {
		t.Errorf("DefaultImage: got %q, want flag/image", got.DefaultImage)
	}
}

func TestFileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string
		wantIn        []string
	}{
		{"unknown key", "listen = \"127.0.0.1:1\"\nlisten_addr = \"x\"\n", []string{`unknown key "listen_addr"`, "known keys: listen,"}},
		{"unknown table", "[gateway]\nkey = 1\n", []string{`unknown key "gateway"`}},
		{"duration as int", "exec_timeout = 60\n", []string{"exec_timeout", `duration such as "60s"`}},
		{"bad duration", "exec_timeout = \"soon\"\n", []string{`exec_timeout "soon"`, "from file "}},
		{"bytes as string", "max_exec_output = \"1MiB\"\n", []string{"max_exec_output", "integer number of bytes"}},
		{"syntax", "listen = \n", []string{"parse"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := Default()
			err := c.ApplyFile(writeFile(t, tt.content))
			if err == nil {
				t.Fatal("ApplyFile: got nil error")
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q: want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestMissingFileNamesItsSource(t *testing.T) {
	t.Parallel()
	_, err := Load(nil, envMap(map[string]string{ConfigEnv: "/nonexistent/hotcell.toml"}))
	if err == nil || !strings.Contains(err.Error(), ConfigEnv) || !strings.Contains(err.Error(), "/nonexistent/hotcell.toml") {
		t.Errorf("Load with missing file: got %v, want an error naming %s and the path", err, ConfigEnv)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	notExec := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		wantIn []string
	}{
		{"listen no port", map[string]string{"HOTCELL_LISTEN": "foo"}, nil,
			[]string{`config: listen "foo": must be host:port`, "(from HOTCELL_LISTEN)"}},
		{"listen port range", nil, []string{"--listen", "127.0.0.1:70000"},
			[]string{`listen "127.0.0.1:70000"`, "0 to 65535", "(from --listen)"}},
		{"data dir empty", nil, []string{"--data-dir", ""},
			[]string{`data_dir ""`, "must not be empty", "(from --data-dir)"}},
		{"store not postgres", map[string]string{"HOTCELL_STORE": "mysql://root:pw@db/hotcell"}, nil,
			[]string{`store "mysql://REDACTED@db/hotcell"`, "PostgreSQL URL", "(from HOTCELL_STORE)"}},
		{"store not a URL", nil, []string{"--store", "postgres://u:p@ss/w@host:5432/db\x7f"},
			[]string{`store "postgres://REDACTED@`, "percent-encoded", "(from --store)"}},
		{"default image empty", nil, []string{"--default-image", ""},
			[]string{`default_image ""`, "(from --default-image)"}},
		{"log level", map[string]string{"HOTCELL_LOG_LEVEL": "loud"}, nil,
			[]string{`log_level "loud"`, "debug, info, warn or error", "(from HOTCELL_LOG_LEVEL)"}},
		{"log format", nil, []string{"--log-format", "xml"},
			[]string{`log_format "xml"`, "text or json", "(from --log-format)"}},
		{"exec timeout zero", nil, []string{"--exec-timeout", "0s"},
			[]string{`exec_timeout "0s"`, "greater than 0", "(from --exec-timeout)"}},
		{"setup timeout negative", map[string]string{"HOTCELL_SETUP_TIMEOUT": "-1s"}, nil,
			[]string{`setup_timeout "-1s"`, "(from HOTCELL_SETUP_TIMEOUT)"}},
		{"shutdown timeout", map[string]string{"HOTCELL_SHUTDOWN_TIMEOUT": "0"}, nil,
			[]string{`shutdown_timeout "0s"`, "(from HOTCELL_SHUTDOWN_TIMEOUT)"}},
		{"max exec output", map[string]string{"HOTCELL_MAX_EXEC_OUTPUT": "0"}, nil,
			[]string{`max_exec_output "0"`, "(from HOTCELL_MAX_EXEC_OUTPUT)"}},
		{"backup max size negative", nil, []string{"--backup-max-size", "-1"},
			[]string{`backup_max_size "-1"`, "must not be negative", "(from --backup-max-size)"}},
		{"backup quota negative", map[string]string{"HOTCELL_BACKUP_QUOTA": "-5"}, nil,
			[]string{`backup_quota "-5"`, "(from HOTCELL_BACKUP_QUOTA)"}},
		{"min free disk negative", nil, []string{"--min-free-disk", "-1"},
			[]string{`min_free_disk "-1"`, "(from --min-free-disk)"}},
		{"backup idle timeout zero", nil, []string{"--backup-idle-timeout", "0s"},
			[]string{`backup_idle_timeout "0s"`, "greater than 0"}},
		{"template build timeout zero", nil, []string{"--template-build-timeout", "0s"},
			[]string{`template_build_timeout "0s"`, "greater than 0", "(from --template-build-timeout)"}},
		{"template build limits pids", nil, []string{"--template-build-limits", "memory=512,pids=10"},
			[]string{`template_build_limits`, "only memory and cpus apply", "(from --template-build-limits)"}},
		{"template build limits tiny memory", map[string]string{"HOTCELL_TEMPLATE_BUILD_LIMITS": "memory=8"}, nil,
			[]string{`template_build_limits`, "at least 64 MiB", "(from HOTCELL_TEMPLATE_BUILD_LIMITS)"}},
		{"template build network", nil, []string{"--template-build-network", "host"},
			[]string{`template_build_network "host"`, "default or none", "(from --template-build-network)"}},
		{"env duration unparsable", map[string]string{"HOTCELL_EXEC_TIMEOUT": "ten"}, nil,
			[]string{`exec_timeout "ten"`, "(from HOTCELL_EXEC_TIMEOUT)"}},
		{"advertise url not a url", nil, []string{"--advertise-url", "10.0.0.5:8080"},
			[]string{`advertise_url "10.0.0.5:8080"`, "absolute http:// or https:// URL", "(from --advertise-url)"}},
		{"advertise url other scheme", map[string]string{"HOTCELL_ADVERTISE_URL": "ftp://10.0.0.5:8080"}, nil,
			[]string{`advertise_url "ftp://10.0.0.5:8080"`, "(from HOTCELL_ADVERTISE_URL)"}},
		{"advertise url no host", nil, []string{"--advertise-url", "http:///v1"},
			[]string{`advertise_url "http:///v1"`, "with a host"}},
		{"preview domain bad character", nil, []string{"--preview-domain", "pre_view.example.com"},
			[]string{`preview_domain "pre_view.example.com"`, "DNS name", "(from --preview-domain)"}},
		{"preview domain empty label", map[string]string{"HOTCELL_PREVIEW_DOMAIN": "a..b"}, nil,
			[]string{`preview_domain "a..b"`, "(from HOTCELL_PREVIEW_DOMAIN)"}},
		{"allowed hosts bad name", nil, []string{"--allowed-hosts", "api.example.com, bad_name"},
			[]string{`allowed_hosts "api.example.com, bad_name"`, `"bad_name"`, "(from --allowed-hosts)"}},
		{"allow local repos not a bool", map[string]string{"HOTCELL_ALLOW_LOCAL_REPOS": "maybe"}, nil,
			[]string{`allow_local_repos "maybe"`, "true or false", "(from HOTCELL_ALLOW_LOCAL_REPOS)"}},
		{"agent missing", nil, []string{"--agent-binary", "/nonexistent/hotcell-agent"},
			[]string{`agent_binary "/nonexistent/hotcell-agent"`, "does not exist", "make build", "(from --agent-binary)"}},
		{"agent not executable", map[string]string{"HOTCELL_AGENT_BINARY": notExec}, nil,
			[]string{"agent_binary", "not executable", "make build", "(from HOTCELL_AGENT_BINARY)"}},
		{"agent is a dir", nil, []string{"--agent-binary", t.TempDir()},
			[]string{"agent_binary", "not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := tt.args
			if _, ok := tt.env["HOTCELL_AGENT_BINARY"]; !ok && !containsFlag(args, "--agent-binary") {
				args = append([]string{"--agent-binary", agent}, args...)
			}
			_, err := Load(flags(t, args...), envMap(tt.env))
			if err == nil {
				t.Fatal("Load: got nil error")
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q: want it to contain %q", err, s)
				}
			}
		})
	}
}

// TestSecuritySettings: allowed_hosts and allow_local_repos read from a
// file, the environment and flags, as every setting does.
func TestSecuritySettings(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	file := filepath.Join(t.TempDir(), "hotcell.toml")
	if err := os.WriteFile(file, []byte("allow_local_repos = true\nallowed_hosts = \"API.example.com., *.corp.example\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(flags(t, "--agent-binary", agent, "--config", file, "--listen", "hotcell.internal:9000"), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.AllowLocalRepos || c.Source("allow_local_repos") != "file "+file {
		t.Errorf("allow_local_repos: got %v from %s", c.AllowLocalRepos, c.Source("allow_local_repos"))
	}
	if got := c.AllowedHostList(); len(got) != 2 || got[0] != "api.example.com" || got[1] != "*.corp.example" {
		t.Errorf("AllowedHostList: got %q", got)
	}
	if c.ListenHost() != "hotcell.internal" {
		t.Errorf("ListenHost: got %q", c.ListenHost())
	}
	c, err = Load(flags(t, "--agent-binary", agent, "--allow-local-repos=false"), envMap(map[string]string{"HOTCELL_ALLOW_LOCAL_REPOS": "true"}))
	if err != nil || c.AllowLocalRepos {
		t.Errorf("flag false over env true: got %v, %v", c.AllowLocalRepos, err)
	}
	if c, err := Load(flags(t, "--agent-binary", agent), envMap(nil)); err != nil || c.AllowLocalRepos || c.AllowedHostList() != nil {
		t.Errorf("defaults: allow_local_repos %v, allowed_hosts %q, %v", c.AllowLocalRepos, c.AllowedHostList(), err)
	}
}

func containsFlag(args []string, f string) bool {
	for _, a := range args {
		if a == f {
			return true
		}
	}
	return false
}

func TestValidateResolvesPaths(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	c := Default()
	c.DataDir = "relative/data"
	c.AgentBinary = agent
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "relative/data"); c.DataDir != want {
		t.Errorf("DataDir: got %q, want %q", c.DataDir, want)
	}
}

// Not parallel: it changes PATH.
func TestAgentBinaryFromPath(t *testing.T) {
	agent := fakeAgent(t)
	t.Setenv("PATH", filepath.Dir(agent))
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if c.AgentBinary != agent {
		t.Errorf("AgentBinary: got %q, want %q", c.AgentBinary, agent)
	}

	t.Setenv("PATH", t.TempDir())
	c = Default()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate without an agent anywhere: got nil error")
	}
	for _, s := range []string{"agent_binary", "hotcell-agent not found", "PATH", "make build", "--agent-binary"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q: want it to contain %q", err, s)
		}
	}

	// On Kubernetes pods get the agent from its image: none is needed,
	// unless one is named.
	c, err = Load(flags(t, "--driver", "kubernetes", "--agent-advertise", "10.244.0.1:8091"), envMap(nil))
	if err != nil || c.AgentBinary != "" {
		t.Errorf("Kubernetes without an agent binary anywhere: %q, %v; want none and no error", c.AgentBinary, err)
	}
	if _, err := Load(flags(t, "--driver", "kubernetes", "--agent-advertise", "10.244.0.1:8091", "--agent-binary", "/nonexistent/hotcell-agent"), envMap(nil)); err == nil || !strings.Contains(err.Error(), "agent_binary") {
		t.Errorf("Kubernetes with a missing agent binary named: %v, want an error naming agent_binary", err)
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		want   bool
	}{
		{"127.0.0.1:8080", true},
		{"127.1.2.3:8080", true},
		{"[::1]:8080", true},
		{"localhost:8080", true},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"192.0.2.1:8080", false},
		{"example.com:8080", false},
		{"garbage", false},
	} {
		t.Run(tt.listen, func(t *testing.T) {
			c := Config{Listen: tt.listen}
			if got := c.IsLoopback(); got != tt.want {
				t.Errorf("IsLoopback(%q): got %v, want %v", tt.listen, got, tt.want)
			}
		})
	}
}

func TestLogValue(t *testing.T) {
	t.Parallel()
	c := Default()
	c.DockerHost = "tcp://admin:s3cret@192.0.2.1:2376"
	c.Store = "postgres://hotcell:pg-s3cret@192.0.2.2:5432/hotcell"
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "config", c)
	out := buf.String()
	if strings.Contains(out, "s3cret") {
		t.Errorf("log line leaks the Docker host password: %s", out)
	}
	if strings.Contains(out, "pg-s3cret") {
		t.Errorf("log line leaks the store's password: %s", out)
	}
	for _, s := range []string{"config.listen=127.0.0.1:8080", "config.exec_timeout=1m0s", "REDACTED"} {
		if !strings.Contains(out, s) {
			t.Errorf("log line %q: want it to contain %q", out, s)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	t.Parallel()
	for lvl, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		if got := (Config{LogLevel: lvl}).SlogLevel(); got != want {
			t.Errorf("SlogLevel(%q): got %v, want %v", lvl, got, want)
		}
	}
}

func TestAddFlagsRegistersEverySetting(t *testing.T) {
	t.Parallel()
	fs := flags(t)
	for _, name := range []string{"config", "listen", "data-dir", "default-image", "agent-binary", "log-level",
		"log-format", "docker-host", "exec-timeout", "setup-timeout", "max-exec-output", "shutdown-timeout"} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag --%s not registered", name)
			continue
		}
		if f.Usage == "" {
			t.Errorf("flag --%s has no help text", name)
		}
	}
}

func TestStoreTarget(t *testing.T) {
	t.Parallel()
	c, err := Load(nil, envMap(map[string]string{"HOTCELL_DATA_DIR": "/srv/hc", "HOTCELL_AGENT_BINARY": fakeAgent(t)}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.StoreTarget(); got != "/srv/hc/hotcell.db" {
		t.Errorf("default store: got %q, want the SQLite file in data_dir", got)
	}
	const pg = "postgresql://hotcell:pw@127.0.0.1:5432/hotcell?sslmode=disable"
	c, err = Load(nil, envMap(map[string]string{"HOTCELL_STORE": pg, "HOTCELL_AGENT_BINARY": fakeAgent(t)}))
	if err != nil {
		t.Fatalf("Load with a PostgreSQL store: %v", err)
	}
	if got := c.StoreTarget(); got != pg {
		t.Errorf("store: got %q, want %q", got, pg)
	}
}

func TestAdvertiseURL(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"http://10.0.0.5:8080", "http://10.0.0.5:8080"},
		{"https://hotcell-0.hotcell.ns.svc:8443/", "https://hotcell-0.hotcell.ns.svc:8443"},
	} {
		got, err := Load(flags(t, "--agent-binary", agent), envMap(map[string]string{"HOTCELL_ADVERTISE_URL": tt.in}))
		if err != nil {
			t.Fatalf("Load with advertise_url %q: %v", tt.in, err)
		}
		if got.AdvertiseURL != tt.want {
			t.Errorf("advertise_url %q: got %q, want %q", tt.in, got.AdvertiseURL, tt.want)
		}
	}
}
