package wire

import (
	"strconv"
	"testing"
)

func TestParseSignal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"TERM", 15, true}, {"SIGTERM", 15, true}, {"sigterm", 15, true}, {"kill", 9, true},
		{"9", 9, true}, {"1", 1, true}, {"64", 64, true}, {"USR1", 10, true}, {"HUP", 1, true},
		{"RTMIN", 34, true}, {"SIGRTMIN+2", 36, true}, {"RTMAX-1", 63, true}, {"RTMAX", 64, true},
		{"", 0, false}, {"0", 0, false}, {"65", 0, false}, {"-9", 0, false}, {"32", 0, false},
		{"SIG", 0, false}, {"NOPE", 0, false}, {"RTMIN+31", 0, false}, {"RTMIN-1", 0, false},
		{"RTMIN+", 0, false}, {"RTMIN++1", 0, false}, {"9x", 0, false}, {" 9", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseSignal(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseSignal(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseSignal(f *testing.F) {
	for _, s := range []string{"TERM", "SIGKILL", "9", "RTMIN+3", "RTMAX-0", "0", "sigusr1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := ParseSignal(s)
		if !ok {
			return
		}
		if n < 1 || n > 64 || n == 32 || n == 33 {
			t.Fatalf("ParseSignal(%q) = %d: not a real signal", s, n)
		}
		if m, ok := ParseSignal(strconv.Itoa(n)); !ok || m != n {
			t.Fatalf("number %d of %q does not parse back", n, s)
		}
	})
}
