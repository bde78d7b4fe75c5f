package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRuntimeSettings checks default_runtime and gvisor_engine_runtime
// through every source, highest first: flag, HOTCELL_* env, file, default.
func TestRuntimeSettings(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	file := filepath.Join(t.TempDir(), "hotcell.toml")
	if err := os.WriteFile(file, []byte("default_runtime = \"gvisor\"\ngvisor_engine_runtime = \"runsc-file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                   string
		args                   []string
		env                    map[string]string
		wantDefault, wantName  string
		wantSrcDefault, wantSN string
	}{
		{"default", nil, nil, "runc", "runsc", "default", "default"},
		{"file", []string{"--config", file}, nil, "gvisor", "runsc-file", "file " + file, "file " + file},
		{"env beats file", []string{"--config", file}, map[string]string{"HOTCELL_DEFAULT_RUNTIME": "runc", "HOTCELL_GVISOR_ENGINE_RUNTIME": "gvisor-ptrace"},
			"runc", "gvisor-ptrace", "HOTCELL_DEFAULT_RUNTIME", "HOTCELL_GVISOR_ENGINE_RUNTIME"},
		{"flag beats env", []string{"--default-runtime", "GVisor", "--gvisor-engine-runtime", "runsc-kvm"}, map[string]string{"HOTCELL_DEFAULT_RUNTIME": "runc"},
			"gvisor", "runsc-kvm", "--default-runtime", "--gvisor-engine-runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(flags(t, append([]string{"--agent-binary", agent}, tc.args...)...), envMap(tc.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.DefaultRuntime != tc.wantDefault || c.GVisorEngineRuntime != tc.wantName {
				t.Errorf("got default_runtime %q, gvisor_engine_runtime %q; want %q, %q", c.DefaultRuntime, c.GVisorEngineRuntime, tc.wantDefault, tc.wantName)
			}
			if got := c.Source("default_runtime"); got != tc.wantSrcDefault {
				t.Errorf("Source(default_runtime): got %q, want %q", got, tc.wantSrcDefault)
			}
			if got := c.Source("gvisor_engine_runtime"); got != tc.wantSN {
				t.Errorf("Source(gvisor_engine_runtime): got %q, want %q", got, tc.wantSN)
			}
		})
	}
}

func TestRuntimeSettingsBad(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	for _, tc := range []struct{ flag, value string }{
		{"--default-runtime", "runsc"},
		{"--default-runtime", "kata"},
		{"--gvisor-engine-runtime", "a b"},
		{"--gvisor-engine-runtime", "../runsc"},
	} {
		_, err := Load(flags(t, "--agent-binary", agent, tc.flag, tc.value), envMap(nil))
		key := strings.ReplaceAll(strings.TrimPrefix(tc.flag, "--"), "-", "_")
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "from "+tc.flag) {
			t.Errorf("%s %s: got %v, want an error naming %s and its source", tc.flag, tc.value, err, key)
		}
	}
}
