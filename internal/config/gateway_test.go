package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProviders(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	dir := t.TempDir()
	main := filepath.Join(dir, "hotcell.toml")
	os.WriteFile(main, []byte(`
listen = "127.0.0.1:9999"
[[provider]]
name = "openai"
kind = "OpenAI"
base_url = "https://api.openai.com/v1"
key_env = "OPENAI_KEY"
budget_tokens = 1000
`), 0o600)
	extra := filepath.Join(dir, "providers.toml")
	os.WriteFile(extra, []byte(`
[[provider]]
name = "local-llm"
kind = "generic"
base_url = "http://127.0.0.1:11434"
key_file = "/etc/hotcell/llm.key"
header = "X-Token"
rate_per_minute = 60
timeout = "90s"
`), 0o600)
	c, err := Load(flags(t, "--agent-binary", agent, "--config", main), envMap(map[string]string{"HOTCELL_PROVIDERS_FILE": extra}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(c.Providers) != 2 {
		t.Fatalf("got %d providers, want 2", len(c.Providers))
	}
	o, g := c.Providers[0], c.Providers[1]
	if o.Kind != "openai" || o.BudgetTokens != 1000 || o.TimeoutDuration() != DefaultProviderTimeout {
		t.Errorf("openai: got %+v", o)
	}
	if g.Header != "X-Token" || g.Format != "Bearer {key}" || g.RatePerMinute != 60 || g.TimeoutDuration().Seconds() != 90 {
		t.Errorf("generic: got %+v", g)
	}
	if err := c.Validate(); err != nil || len(c.Providers) != 2 {
		t.Errorf("second Validate: %v, %d providers", err, len(c.Providers))
	}
}

func TestProvidersBad(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	base := "name = \"p\"\nkind = \"openai\"\nbase_url = \"https://x.example/v1\"\nkey_env = \"K\"\n"
	for _, tc := range []struct{ toml, want string }{
		{"name = \"P!\"\nkind = \"openai\"\nbase_url = \"https://x\"\nkey_env = \"K\"", "name must be"},
		{strings.Replace(base, "openai", "azure", 1), "kind \"azure\""},
		{strings.Replace(base, "https://x.example/v1", "ftp://x", 1), "absolute http"},
		{strings.Replace(base, "https://x.example/v1", "https://user:pw@x", 1), "credentials"},
		{base + "key_file = \"/k\"\n", "exactly one of key_env"},
		{strings.Replace(base, "key_env = \"K\"\n", "", 1), "exactly one of key_env"},
		{base + "budget_requests = -1\n", "must not be negative"},
		{base + "timeout = \"soon\"\n", "timeout"},
		{base + "header = \"X\"\n", "only for kind generic"},
		{base + "budget_request = 5\n", "unknown key"},
		{strings.Replace(base, "openai", "generic", 1) + "format = \"Bearer\"\n", "{key} exactly once"},
		{base + "[[provider]]\n" + base, "used by an earlier provider"},
	} {
		f := filepath.Join(t.TempDir(), "p.toml")
		os.WriteFile(f, []byte("[[provider]]\n"+tc.toml), 0o600)
		_, err := Load(flags(t, "--agent-binary", agent, "--providers-file", f), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error with %q", tc.toml, err, tc.want)
		}
	}
}
