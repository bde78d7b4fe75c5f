package config

import (
	"testing"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestParsePools(t *testing.T) {
	m, err := parsePools(" py-data=8:16:4 , node=2")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m["py-data"], (wire.PoolConfig{Min: 8, Max: 16, RefillPerSecond: 4}); got != want {
		t.Errorf("py-data: got %+v, want %+v", got, want)
	}
	if got, want := m["node"], (wire.PoolConfig{Min: 2}); got != want {
		t.Errorf("node: got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"py", "=3", "Py=1", "a=x", "a=4:2", "a=1:2:0", "a=1:2:3:4", "a=1,a=2", "a=-1"} {
		if _, err := parsePools(bad); err == nil {
			t.Errorf("parsePools(%q): no error", bad)
		}
	}
}

func FuzzParsePools(f *testing.F) {
	for _, s := range []string{"py=1", "a=1:2:3", "a=1,b=2:4", "x=:", "=,="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parsePools(s)
		if err != nil {
			return
		}
		for name, cfg := range m {
			if name == "" || cfg.Min < 0 || (len(s) > 0 && cfg.Max != 0 && cfg.Max < cfg.Min) {
				t.Fatalf("parsePools(%q) accepted %q: %+v", s, name, cfg)
			}
		}
	})
}
