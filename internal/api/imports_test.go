package api

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the API an HTTP layer: it reaches persistence and the
// backends only through the contracts the daemon wires (contracts.go),
// never by importing them.
func TestImports(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	banned := []string{
		"github.com/hotcell/hotcell/internal/store",
		"github.com/hotcell/hotcell/internal/driver/docker",
		"github.com/hotcell/hotcell/internal/metrics",
		"github.com/moby",
		"modernc.org/sqlite",
	}
	for _, imp := range strings.Fields(string(out)) {
		for _, b := range banned {
			if imp == b || strings.HasPrefix(imp, b+"/") {
				t.Errorf("package api imports %s", imp)
			}
		}
	}
}
