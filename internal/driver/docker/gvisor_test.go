package docker

import (
	"testing"

	"github.com/moby/moby/api/types/container"
)

func TestGVisorResources(t *testing.T) {
	t.Parallel()
	p := int64(100)
	r := container.Resources{Memory: 256 << 20, PidsLimit: &p}
	gvisorResources(&r)
	if r.PidsLimit == nil || *r.PidsLimit != 100+GVisorPidsOverhead || p != 100 {
		t.Errorf("pids: got %v (request's %d), want %d and the request's untouched", r.PidsLimit, p, 100+GVisorPidsOverhead)
	}
	if r.Memory != 256<<20 {
		t.Errorf("memory: got %d, want the request's", r.Memory)
	}
	var none container.Resources
	gvisorResources(&none)
	if none.PidsLimit != nil {
		t.Errorf("no pids limit: got %d, want none (the operator said unlimited)", *none.PidsLimit)
	}
}
