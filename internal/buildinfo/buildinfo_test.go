package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/testenv"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name     string
		main     string
		settings map[string]string
		want     string
	}{
		{"module version", "v1.2.3", map[string]string{"vcs.revision": rev}, "v1.2.3"},
		{"clean checkout", "(devel)", map[string]string{"vcs.revision": rev, "vcs.modified": "false"}, "dev-0123456789ab"},
		{"dirty checkout", "(devel)", map[string]string{"vcs.revision": rev, "vcs.modified": "true"}, "dev-0123456789ab-dirty"},
		{"short revision", "", map[string]string{"vcs.revision": "abc"}, "dev-abc"},
		{"no vcs", "(devel)", nil, "dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			info := &debug.BuildInfo{Main: debug.Module{Version: tt.main}}
			for k, v := range tt.settings {
				info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
			}
			if got := fromBuildInfo(info); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLdflags builds the real CLI with the version set at link time and
// checks that the binary reports it.
func TestLdflags(t *testing.T) {
	t.Parallel()
	testenv.RequireTool(t, "go")
	bin := filepath.Join(t.TempDir(), "hotcell")
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X github.com/hotcell/hotcell/internal/buildinfo.version=v9.8.7-test",
		"github.com/hotcell/hotcell/cmd/hotcell")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "version", "--url", "http://127.0.0.1:1", "--token", "x")
	out, _ := cmd.Output() // the daemon is unreachable; the client line is still printed
	if !strings.Contains(string(out), "client: v9.8.7-test") {
		t.Errorf("hotcell version: got %q, want it to say client: v9.8.7-test", out)
	}
}
