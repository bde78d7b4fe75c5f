package cmdspec

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestExecDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  wire.ExecRequest
		d    Defaults
		want wire.ExecRequest
	}{
		{"package defaults", wire.ExecRequest{Command: "ls"}, Defaults{},
			wire.ExecRequest{Command: "ls", TimeoutMs: 60_000, MaxOutputBytes: 1 << 20}},
		{"caller defaults", wire.ExecRequest{Command: "ls", Cwd: "sub"}, Defaults{Timeout: 5 * time.Second, MaxOutput: 100},
			wire.ExecRequest{Command: "ls", Cwd: "/workspace/sub", TimeoutMs: 5000, MaxOutputBytes: 100}},
		{"given values kept", wire.ExecRequest{Argv: []string{"ls"}, TimeoutMs: 7, MaxOutputBytes: 9}, Defaults{Timeout: time.Hour},
			wire.ExecRequest{Argv: []string{"ls"}, TimeoutMs: 7, MaxOutputBytes: 9}},
		{"cwd cleaned", wire.ExecRequest{Command: "ls", Cwd: "/a/../b/"}, Defaults{},
			wire.ExecRequest{Command: "ls", Cwd: "/b", TimeoutMs: 60_000, MaxOutputBytes: 1 << 20}},
		{"cwd in another workspace", wire.ExecRequest{Command: "ls", Cwd: "x"}, Defaults{Workspace: "/tmp/ws"},
			wire.ExecRequest{Command: "ls", Cwd: "/tmp/ws/x", TimeoutMs: 60_000, MaxOutputBytes: 1 << 20}},
		{"empty cwd stays empty", wire.ExecRequest{Command: "ls", Env: map[string]string{"A_1": "x"}}, Defaults{},
			wire.ExecRequest{Command: "ls", Env: map[string]string{"A_1": "x"}, TimeoutMs: 60_000, MaxOutputBytes: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.req
			if err := Exec(&got, tt.d); err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Exec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExecInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		req   wire.ExecRequest
		field string // the error starts with it
	}{
		{"nothing to run", wire.ExecRequest{}, "command:"},
		{"both", wire.ExecRequest{Command: "a", Argv: []string{"b"}}, "command:"},
		{"NUL in command", wire.ExecRequest{Command: "a\x00"}, "command:"},
		{"empty program", wire.ExecRequest{Argv: []string{""}}, "argv[0]:"},
		{"NUL in argument", wire.ExecRequest{Argv: []string{"a", "b\x00"}}, "argv[1]:"},
		{"too many arguments", wire.ExecRequest{Argv: make([]string, MaxArgv+1)}, "argv:"},
		{"negative timeout", wire.ExecRequest{Command: "a", TimeoutMs: -1}, "timeoutMs:"},
		{"timeout over a day", wire.ExecRequest{Command: "a", TimeoutMs: MaxTimeout.Milliseconds() + 1}, "timeoutMs:"},
		{"negative output cap", wire.ExecRequest{Command: "a", MaxOutputBytes: -1}, "maxOutputBytes:"},
		{"huge output cap", wire.ExecRequest{Command: "a", MaxOutputBytes: 1 << 40}, "maxOutputBytes:"},
		{"NUL in cwd", wire.ExecRequest{Command: "a", Cwd: "x\x00"}, "cwd:"},
		{"empty env name", wire.ExecRequest{Command: "a", Env: map[string]string{"": "x"}}, "env.:"},
		{"env name with =", wire.ExecRequest{Command: "a", Env: map[string]string{"A=B": "x"}}, "env.A=B:"},
		{"env name with digit first", wire.ExecRequest{Command: "a", Env: map[string]string{"1A": "x"}}, "env.1A:"},
		{"NUL in env value", wire.ExecRequest{Command: "a", Env: map[string]string{"A": "x\x00"}}, "env.A:"},
		{"long env value", wire.ExecRequest{Command: "a", Env: map[string]string{"A": strings.Repeat("x", MaxEnvValue+1)}}, "env.A:"},
		{"too many variables", wire.ExecRequest{Command: "a", Env: manyVars(MaxEnv + 1)}, "env:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := tt.req
			err := Exec(&req, Defaults{})
			if err == nil {
				t.Fatalf("got no error, want one naming %s", tt.field)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tt.field) {
				t.Errorf("got %v, want an invalid-argument error naming %s", err, tt.field)
			}
			if status, _ := errdefs.HTTPStatus(err); status != http.StatusBadRequest {
				t.Errorf("status: got %d, want 400", status)
			}
		})
	}
}

func TestEnvList(t *testing.T) {
	t.Parallel()
	got, err := EnvList("env", map[string]string{"B": "2", "A": "1", "C_3": "x=y"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"A=1", "B=2", "C_3=x=y"}, got); diff != "" {
		t.Errorf("EnvList (-want +got):\n%s", diff)
	}
	// No count cap: the daemon adds its own variables to a request's.
	if got, err := EnvList("env", manyVars(MaxEnv+10)); err != nil || len(got) != MaxEnv+10 {
		t.Errorf("EnvList of %d variables: got %d, %v", MaxEnv+10, len(got), err)
	}
	for _, bad := range []map[string]string{{"A=B": "c"}, {"": "x"}, {"A": "\x00"}} {
		if _, err := EnvList("env", bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("EnvList(%q): got %v, want an invalid-argument error", bad, err)
		}
	}
}

func TestCommandAlone(t *testing.T) {
	t.Parallel()
	// Terminals check the command only when one is given; both forms pass.
	for _, c := range []struct {
		command string
		argv    []string
	}{{"echo hi", nil}, {"", []string{"/bin/sh", "-c", "x"}}} {
		if err := Command(c.command, c.argv); err != nil {
			t.Errorf("Command(%q, %q): %v", c.command, c.argv, err)
		}
	}
	if cwd, err := Cwd("", ""); err != nil || cwd != "" {
		t.Errorf(`Cwd(""): got %q, %v; want "", nil`, cwd, err)
	}
}

func manyVars(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m["V"+strconv.Itoa(i)] = "x"
	}
	return m
}
