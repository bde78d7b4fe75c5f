// Package cmdspec is the one definition of a command to run in a sandbox:
// what makes a command, argv, environment, working directory, timeout and
// output cap valid, and their defaults. The api checks requests with it at
// the edge, the agent again before it runs anything, and the Docker driver
// builds a container's environment with it. It uses only the standard
// library and other stdlib-only packages, so the agent stays small.
package cmdspec

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

// Limits and defaults.
const (
	MaxArgv          = 4096
	MaxEnv           = 256
	MaxEnvValue      = 32 << 10
	DefaultTimeout   = 60 * time.Second
	MaxTimeout       = 24 * time.Hour
	DefaultMaxOutput = 1 << 20
	MaxOutput        = 64 << 20
)

var envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Defaults fill what an exec request leaves out; a zero field means the
// package default.
type Defaults struct {
	Timeout   time.Duration
	MaxOutput int64
	// Workspace is what a relative cwd is relative to (fspath.Workspace).
	Workspace string
}

// Exec validates req and fills in its defaults: timeoutMs and
// maxOutputBytes when zero, and cwd made absolute and clean (an empty cwd
// stays empty: the agent's workspace). Errors name the field and are of
// class errdefs.ErrInvalidArgument.
func Exec(req *wire.ExecRequest, d Defaults) error {
	if err := Command(req.Command, req.Argv); err != nil {
		return err
	}
	if err := Env("env", req.Env); err != nil {
		return err
	}
	cwd, err := Cwd(d.Workspace, req.Cwd)
	if err != nil {
		return err
	}
	req.Cwd = cwd
	if d.Timeout <= 0 {
		d.Timeout = DefaultTimeout
	}
	if d.MaxOutput <= 0 {
		d.MaxOutput = DefaultMaxOutput
	}
	maxMs := MaxTimeout.Milliseconds()
	if req.TimeoutMs < 0 || req.TimeoutMs > maxMs {
		return errdefs.Invalid("timeoutMs", "must be between 0 (default) and %d (24h), got %d", maxMs, req.TimeoutMs)
	}
	if req.TimeoutMs == 0 {
		req.TimeoutMs = d.Timeout.Milliseconds()
	}
	if req.MaxOutputBytes < 0 || req.MaxOutputBytes > MaxOutput {
		return errdefs.Invalid("maxOutputBytes", "must be between 0 (default) and %d, got %d", MaxOutput, req.MaxOutputBytes)
	}
	if req.MaxOutputBytes == 0 {
		req.MaxOutputBytes = d.MaxOutput
	}
	return nil
}

// Command checks that exactly one of command (run by /bin/sh -c) and argv
// is given, with no NUL byte and a program to run.
func Command(command string, argv []string) error {
	switch {
	case command != "" && len(argv) > 0:
		return errdefs.Invalid("command", "give either command or argv, not both")
	case command == "" && len(argv) == 0:
		return errdefs.Invalid("command", "give command (run by /bin/sh -c) or argv")
	}
	if strings.IndexByte(command, 0) >= 0 {
		return errdefs.Invalid("command", "contains a NUL byte")
	}
	if len(argv) > MaxArgv {
		return errdefs.Invalid("argv", "at most %d arguments", MaxArgv)
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Invalid("argv["+strconv.Itoa(i)+"]", "contains a NUL byte")
		}
	}
	if len(argv) > 0 && argv[0] == "" {
		return errdefs.Invalid("argv[0]", "program is empty")
	}
	return nil
}

// Env checks a request's environment: at most MaxEnv variables, each valid
// as Var says. field names it in errors ("env").
func Env(field string, env map[string]string) error {
	if len(env) > MaxEnv {
		return errdefs.Invalid(field, "at most %d variables", MaxEnv)
	}
	for k, v := range env {
		if err := Var(field, k, v); err != nil {
			return err
		}
	}
	return nil
}

// Var checks one variable: a name of letters, digits and '_' not starting
// with a digit, and a value of at most MaxEnvValue bytes with no NUL.
func Var(field, name, value string) error {
	if !envNamePattern.MatchString(name) {
		return errdefs.Invalid(field+"."+clip(name), "not a valid variable name (letters, digits and '_', not starting with a digit)")
	}
	if strings.IndexByte(value, 0) >= 0 {
		return errdefs.Invalid(field+"."+name, "value contains a NUL byte")
	}
	if len(value) > MaxEnvValue {
		return errdefs.Invalid(field+"."+name, "value is longer than %d bytes", MaxEnvValue)
	}
	return nil
}

// EnvList returns env as sorted KEY=VALUE pairs, so the same map always
// gives the same list, after checking each variable as Var does. It does
// not cap the count: a sandbox's environment is the request's plus what
// the daemon adds.
func EnvList(field string, env map[string]string) ([]string, error) {
	list := make([]string, 0, len(env))
	for k, v := range env {
		if err := Var(field, k, v); err != nil {
			return nil, err
		}
		list = append(list, k+"="+v)
	}
	slices.Sort(list)
	return list, nil
}

// Cwd returns a working directory absolute and clean, a relative one taken
// relative to workspace (fspath.Workspace when empty). Empty stays empty.
func Cwd(workspace, cwd string) (string, error) {
	if cwd == "" {
		return "", nil
	}
	return fspath.ResolveIn(workspace, "cwd", cwd)
}

// clip keeps echoed input short in error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
