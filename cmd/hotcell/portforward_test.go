package main

import (
	"strings"
	"testing"
)

func TestParsePortSpec(t *testing.T) {
	tests := []struct {
		in            string
		local, remote int
		err           string
	}{
		{"8000", 8000, 8000, ""},
		{"9000:8000", 9000, 8000, ""},
		{"0:5432", 0, 5432, ""},
		{"0", 0, 0, "remote port"},
		{"", 0, 0, "remote port"},
		{"80:http", 0, 0, `remote port "http"`},
		{"x:80", 0, 0, `local port "x"`},
		{"65536", 0, 0, "remote port"},
		{"-1:80", 0, 0, "local port"},
		{"+80", 0, 0, "remote port"},
		{"080", 0, 0, "remote port"},
		{"1:2:3", 0, 0, "remote port"},
	}
	for _, tt := range tests {
		l, r, err := parsePortSpec(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("parsePortSpec(%q): got error %v, want one saying %q", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || l != tt.local || r != tt.remote):
			t.Errorf("parsePortSpec(%q): got %d, %d, %v, want %d, %d", tt.in, l, r, err, tt.local, tt.remote)
		}
	}
}

func FuzzParsePortSpec(f *testing.F) {
	for _, s := range []string{"8000", "1:2", "0:65535", "a:b", ":", "99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, r, err := parsePortSpec(s)
		if err != nil {
			return
		}
		if r < 1 || r > 65535 || l < 0 || l > 65535 {
			t.Fatalf("parsePortSpec(%q) = %d, %d: out of range", s, l, r)
		}
	})
}
