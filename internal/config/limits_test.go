package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestLimitsPrecedence(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	file := writeFile(t, `
default_limits = "memory=4GiB,cpus=2"
max_limits = "memory=8GiB"
`)
	tests := []struct {
		name             string
		env              map[string]string
		args             []string
		wantDef, wantMax wire.Limits
		defSource        string
	}{
		{"default", nil, nil, DefaultSandboxLimits, wire.Limits{}, "default"},
		{"file: named fields replace the shipped default, others keep it", map[string]string{ConfigEnv: file}, nil,
			wire.Limits{MemoryMB: 4096, CPUs: 2, PidsLimit: 1024, DiskMB: 10240}, wire.Limits{MemoryMB: 8192}, "file " + file},
		{"env beats file and does not merge with it", map[string]string{ConfigEnv: file, "HOTCELL_DEFAULT_LIMITS": "pids=128"}, nil,
			wire.Limits{MemoryMB: 2048, CPUs: 1, PidsLimit: 128, DiskMB: 10240}, wire.Limits{MemoryMB: 8192}, "HOTCELL_DEFAULT_LIMITS"},
		{"flag beats env", map[string]string{"HOTCELL_DEFAULT_LIMITS": "pids=128"}, []string{"--default-limits", "memory=256MiB, pids=200"},
			wire.Limits{MemoryMB: 256, CPUs: 1, PidsLimit: 200, DiskMB: 10240}, wire.Limits{}, "--default-limits"},
		{"operator unlimited, whole", nil, []string{"--default-limits", "unlimited"}, wire.Limits{}, wire.Limits{}, "--default-limits"},
		{"operator unlimited, per field", nil, []string{"--default-limits", "memory=unlimited,cpus=0,disk=0"},
			wire.Limits{PidsLimit: 1024}, wire.Limits{}, "--default-limits"},
		{"bare sizes are MiB", nil, []string{"--default-limits", "memory=512,disk=1T", "--max-limits", "cpus=1.5,pids=4096"},
			wire.Limits{MemoryMB: 512, CPUs: 1, PidsLimit: 1024, DiskMB: 1 << 20}, wire.Limits{CPUs: 1.5, PidsLimit: 4096}, "--default-limits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Load(flags(t, append([]string{"--agent-binary", agent}, tt.args...)...), envMap(tt.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tt.wantDef, got.DefaultLimits); diff != "" {
				t.Errorf("default_limits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantMax, got.MaxLimits); diff != "" {
				t.Errorf("max_limits (-want +got):\n%s", diff)
			}
			if src := got.Source("default_limits"); src != tt.defSource {
				t.Errorf("source: got %q, want %q", src, tt.defSource)
			}
		})
	}
}

func TestLimitsBad(t *testing.T) {
	t.Parallel()
	agent := fakeAgent(t)
	for _, tc := range []struct{ flag, value, wantIn string }{
		{"--default-limits", "memory", "want key=value"},
		{"--default-limits", "ram=1GiB", `unknown limit "ram"`},
		{"--default-limits", "memory=lots", "not a number"},
		{"--default-limits", "memory=1GiB,memory=2GiB", "given twice"},
		{"--default-limits", "memory=8MiB", "at least 16 MiB"},
		{"--default-limits", "pids=4", "at least 16"},
		{"--max-limits", "cpus=-1", "cpus must be"},
		{"--max-limits", "memory=1GiB", "memory must not be above max_limits"},
		{"--max-limits", "pids=512", "pids must not be above max_limits"},
	} {
		_, err := Load(flags(t, "--agent-binary", agent, tc.flag, tc.value), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.wantIn) || !strings.Contains(err.Error(), "_limits") {
			t.Errorf("%s %s: got %v, want an error naming the setting and %q", tc.flag, tc.value, err, tc.wantIn)
		}
	}
	// A maximum needs a default under it: unlimited by default is above any maximum.
	_, err := Load(flags(t, "--agent-binary", agent, "--default-limits", "memory=unlimited", "--max-limits", "memory=4GiB"), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "memory must not be above max_limits") {
		t.Errorf("unlimited default under a maximum: got %v, want an error", err)
	}
}

func TestFormatLimitsRoundTrips(t *testing.T) {
	t.Parallel()
	for _, l := range []wire.Limits{DefaultSandboxLimits, {}, {MemoryMB: 300, CPUs: 0.5}, {PidsLimit: 64, DiskMB: 3 << 20}} {
		got, err := parseLimits(FormatLimits(l), DefaultSandboxLimits)
		if err != nil || got != l {
			t.Errorf("parse(format(%+v)) = %+v, %v", l, got, err)
		}
	}
}
