package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestGuessForeground(t *testing.T) {
	t.Parallel()
	type proc struct {
		pid, pgrp, sid int
		state          string
	}
	tests := []struct {
		name  string
		procs []proc
		want  int
	}{
		{"leader alone", []proc{{40, 40, 40, "S"}}, 40},
		{"a job in the foreground", []proc{{40, 40, 40, "S"}, {41, 41, 40, "S"}}, 41},
		{"the newest job", []proc{{40, 40, 40, "S"}, {41, 41, 40, "R"}, {45, 45, 40, "S"}, {46, 45, 40, "S"}}, 45},
		{"a suspended job is not it", []proc{{40, 40, 40, "S"}, {41, 41, 40, "S"}, {45, 45, 40, "T"}}, 41},
		{"only suspended jobs: the shell", []proc{{40, 40, 40, "S"}, {45, 45, 40, "T"}}, 40},
		{"other sessions ignored", []proc{{40, 40, 40, "S"}, {50, 50, 1, "S"}}, 40},
		{"no process left", []proc{{50, 50, 1, "S"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, p := range tt.procs {
				if err := os.Mkdir(filepath.Join(dir, fmt.Sprint(p.pid)), 0o755); err != nil {
					t.Fatal(err)
				}
				// A command name with a space and a parenthesis, as /proc allows.
				stat := fmt.Sprintf("%d (a b) c) %s 1 %d %d 0 -1 4194560\n", p.pid, p.state, p.pgrp, p.sid)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(p.pid), "stat"), []byte(stat), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "meminfo"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if got := guessForeground(dir, 40); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}
