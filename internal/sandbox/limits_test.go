package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestResolveLimits(t *testing.T) {
	t.Parallel()
	def := wire.Limits{MemoryMB: 2048, CPUs: 1, PidsLimit: 1024, DiskMB: 10240}
	max := wire.Limits{MemoryMB: 8192, CPUs: 4, PidsLimit: 4096, DiskMB: 20480}
	tests := []struct {
		name          string
		req, def, max wire.Limits
		want          wire.Limits
		wantField     string // set: a 400 naming it
	}{
		{"none given: the defaults", wire.Limits{}, def, max, def, ""},
		{"partial: per-field default", wire.Limits{MemoryMB: 512, CPUs: 2}, def, max,
			wire.Limits{MemoryMB: 512, CPUs: 2, PidsLimit: 1024, DiskMB: 10240}, ""},
		{"all given, at the maximum", max, def, max, max, ""},
		{"memory above max", wire.Limits{MemoryMB: 8193}, def, max, wire.Limits{}, "limits.memoryMb"},
		{"cpus above max", wire.Limits{CPUs: 4.5}, def, max, wire.Limits{}, "limits.cpus"},
		{"pids above max", wire.Limits{PidsLimit: 5000}, def, max, wire.Limits{}, "limits.pidsLimit"},
		{"disk above max", wire.Limits{DiskMB: 1 << 20}, def, max, wire.Limits{}, "limits.diskMb"},
		{"operator unlimited default and no max", wire.Limits{PidsLimit: 64}, wire.Limits{}, wire.Limits{},
			wire.Limits{PidsLimit: 64}, ""},
		{"operator unlimited on one field", wire.Limits{}, wire.Limits{MemoryMB: 256}, wire.Limits{},
			wire.Limits{MemoryMB: 256}, ""},
		{"no max: anything the api accepts", wire.Limits{MemoryMB: 1 << 20, CPUs: 64}, def, wire.Limits{},
			wire.Limits{MemoryMB: 1 << 20, CPUs: 64, PidsLimit: 1024, DiskMB: 10240}, ""},
		// Config validation keeps this out; the merge still refuses it.
		{"unlimited default under a max", wire.Limits{}, wire.Limits{}, wire.Limits{CPUs: 2}, wire.Limits{}, "limits.cpus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ResolveLimits(tt.req, tt.def, tt.max)
			if tt.wantField != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantField) {
					t.Fatalf("got %+v, %v; want an invalid-argument error naming %s", got, err, tt.wantField)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
