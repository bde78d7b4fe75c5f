package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/testdaemon"
)

// stepOrder is the order the daemon takes each operation's steps in
// (internal/sandbox/manager.go); the exposition sorts them by name.
var stepOrder = map[string][]string{
	// The Kubernetes driver's steps are pod_* (pod_record is its record,
	// a Secret, apart from the manager's record in the store).
	"create": {"resolve", "record", "listen", "gateway", "pod_record", "disk", "volume", "container_create", "container_start", "pod_create", "pod_start", "pod_egress", "egress", "agent", "setup", "record_running", "event"},
	"claim":  {"limits", "lookup", "record", "gateway", "egress_env", "egress_parallel", "env_parallel", "workspace", "record_running", "event"},
	// A destroy answers after its first steps; those named background_
	// follow the answer. Without a quick kill (or for a sandbox without a
	// record) the whole teardown runs before it: the unprefixed
	// container_remove to gateway_parallel.
	"destroy": {"lookup", "record_destroyed", "firewall_tokens", "kill", "container_remove", "pod_remove", "disk", "volume", "run_dir", "wait_parallel", "delete_record", "event", "egress_parallel", "gateway_parallel",
		"background_container_remove", "background_pod_remove", "background_disk", "background_volume", "background_run_dir", "background_delete_record", "background_total"},
}

// metricsText scrapes the daemon's /metrics.
func metricsText(b *testing.B, d *testdaemon.Daemon) string {
	b.Helper()
	text, err := d.C.Metrics(b.Context())
	if err != nil {
		b.Fatalf("scrape metrics: %v", err)
	}
	return text
}

// stepTable is where the time of the op ("create", "destroy") went
// between two scrapes: the mean of each step (hotcell_<op>_step_seconds),
// in the order the daemon takes them. The steps add up to the whole
// operation inside the daemon (but those named *_parallel, which ran beside
// the others); the rest of what the client saw is HTTP.
func stepTable(op, before, after string) Table {
	_, was := ParseSteps(before, op)
	named, now := ParseSteps(after, op)
	steps := stepOrder[op]
	for _, s := range named {
		if !slices.Contains(steps, s) {
			steps = append(steps, s)
		}
	}
	tb := Table{Title: fmt.Sprintf("where a %s's time goes in the daemon (mean ms per step)", op), Head: []string{"step", "n", "mean"}}
	var total float64
	for _, s := range steps {
		n := now[s].Count - was[s].Count
		if n <= 0 {
			continue
		}
		mean := (now[s].Sum - was[s].Sum) / n * 1000
		if !strings.HasSuffix(s, "_parallel") && !strings.HasPrefix(s, "background_") {
			total += mean // the parallel ones overlap the others; the background follows
		}
		tb.Row(s, fmt.Sprint(int(n)), fmt.Sprintf("%.3f", mean))
	}
	tb.Row("total (background_ steps not in it)", "", fmt.Sprintf("%.3f", total))
	return tb
}
