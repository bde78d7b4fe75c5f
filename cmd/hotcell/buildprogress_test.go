package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBuildStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line  string
		n, of int
		instr string
		ok    bool
	}{
		{"Step 3/7 : RUN make -j2", 3, 7, "RUN make -j2", true},
		{"Step 1/1 : FROM hotcell/base:latest", 1, 1, "FROM hotcell/base:latest", true},
		{"Step 8/7 : RUN x", 0, 0, "", false},
		{"Step 0/7 : RUN x", 0, 0, "", false},
		{"Step 3/7: RUN x", 0, 0, "", false},
		{" ---> Running in 1c2d3e", 0, 0, "", false},
		{"Step a/b : RUN", 0, 0, "", false},
		{"Step 3 : RUN", 0, 0, "", false},
		{"", 0, 0, "", false},
	} {
		n, of, instr, ok := buildStep(tc.line)
		if n != tc.n || of != tc.of || instr != tc.instr || ok != tc.ok {
			t.Errorf("%q: got %d/%d %q %v, want %d/%d %q %v", tc.line, n, of, instr, ok, tc.n, tc.of, tc.instr, tc.ok)
		}
	}
}

func FuzzBuildStep(f *testing.F) {
	for _, s := range []string{"Step 3/7 : RUN make", "Step 1/1 : FROM x", "Step 99999999999999999999/1 : x", "Step -1/2 : x", "Step 2/2 : \x1b[31m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		n, of, instr, ok := buildStep(line)
		if !ok {
			return
		}
		if n < 1 || of < n || of > 10_000 || !strings.HasSuffix(line, instr) || !strings.HasPrefix(line, "Step ") {
			t.Fatalf("%q: got %d/%d %q", line, n, of, instr)
		}
	})
}

// TestBuildDisplay: the status line follows the steps, carries no control
// bytes from the build output, and is cleared at the end.
func TestBuildDisplay(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	d := newBuildDisplay(&buf, 40)
	d.line("Step 1/2 : FROM hotcell/base:latest")
	d.line("output \x1b]0;title\x07 line")
	d.line("Step 2/2 : RUN " + strings.Repeat("x", 100))
	d.done("built t:1")
	out := buf.String()
	for _, want := range []string{"[1/2 ", "] FROM hotcell/base:latest", "[2/2 ", "built t:1 in "} {
		if !strings.Contains(out, want) {
			t.Errorf("display: %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "\x1b]0;") {
		t.Errorf("display: %q, want the build output's control bytes escaped", out)
	}
	i := strings.LastIndex(out, "\x1b[1m[2/2")
	j := strings.Index(out[i:], "\x1b[0m")
	if status := []rune(out[i+len("\x1b[1m") : i+j]); len(status) > 39 {
		t.Errorf("status line %q: %d runes, want it cut to the width (40)", string(status), len(status))
	}
}
