package api

import (
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/labels"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// Every API input is checked here, once, at the edge. Messages name the
// field so a client knows what to fix.

var refPattern = regexp.MustCompile(`^[A-Za-z0-9_./@{}^~+-]{1,255}$`)

const (
	maxLabels       = labels.Max
	maxSetup        = 64
	maxSetupCommand = 64 << 10
	minMemoryMB     = 16
	minPids         = 16
)

func validateLabels(field string, m map[string]string) error { return labels.Validate(field, m) }

func validateLabel(field, k, v string) error { return labels.ValidateOne(field, k, v) }

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// validateCreate checks a create request; allowLocalRepos is the daemon's
// allow_local_repos setting.
func validateCreate(req *wire.CreateSandboxRequest, allowLocalRepos bool) error {
	if req.Image != "" && !images.ValidRef(req.Image) {
		return errdefs.Invalid("image", "%q is not an image reference like hotcell/base:latest", clip(req.Image))
	}
	if err := cmdspec.Env("env", req.Env); err != nil {
		return err
	}
	if err := sandbox.ValidateRuntime("runtime", req.Runtime); err != nil {
		return err
	}
	if err := validateLabels("labels", req.Labels); err != nil {
		return err
	}
	l := req.Limits
	if l.MemoryMB < 0 || (l.MemoryMB > 0 && l.MemoryMB < minMemoryMB) || l.MemoryMB > 1<<30 {
		return errdefs.Invalid("limits.memoryMb", "must be 0 (the daemon's default) or at least %d", minMemoryMB)
	}
	if math.IsNaN(l.CPUs) || l.CPUs < 0 || l.CPUs > 1024 || (l.CPUs > 0 && l.CPUs < 0.01) {
		return errdefs.Invalid("limits.cpus", "must be 0 (the daemon's default) or between 0.01 and 1024")
	}
	if l.PidsLimit < 0 || (l.PidsLimit > 0 && l.PidsLimit < minPids) || l.PidsLimit > 1<<22 {
		return errdefs.Invalid("limits.pidsLimit", "must be 0 (the daemon's default) or at least %d (the agent needs a few)", minPids)
	}
	if l.DiskMB < 0 || l.DiskMB > 1<<30 {
		return errdefs.Invalid("limits.diskMb", "must be 0 (the daemon's default) or a size in MiB up to %d", 1<<30)
	}
	if r := req.Repo; r != nil {
		if err := validateRepoURL(r.URL, allowLocalRepos); err != nil {
			return err
		}
		if r.Ref != "" && (!refPattern.MatchString(r.Ref) || strings.HasPrefix(r.Ref, "-") || strings.Contains(r.Ref, "..")) {
			return errdefs.Invalid("repo.ref", "%q is not a branch, tag or commit", clip(r.Ref))
		}
	}
	if len(req.Setup) > maxSetup {
		return errdefs.Invalid("setup", "at most %d commands", maxSetup)
	}
	for i, c := range req.Setup {
		f := "setup[" + strconv.Itoa(i) + "]"
		if strings.TrimSpace(c) == "" {
			return errdefs.Invalid(f, "command is empty")
		}
		if len(c) > maxSetupCommand || strings.IndexByte(c, 0) >= 0 {
			return errdefs.Invalid(f, "command must be at most %d bytes with no NUL", maxSetupCommand)
		}
	}
	if maxMs := cmdspec.MaxTimeout.Milliseconds(); req.SetupTimeoutMs < 0 || req.SetupTimeoutMs > maxMs {
		return errdefs.Invalid("setupTimeoutMs", "must be between 0 and %d", maxMs)
	}
	return nil
}

// validateRepoURL allows the transports git can use without running a
// program named by the URL. A host path or file:// URL is allowed only when
// the operator opted in (allowLocal): the clone runs on the host as the
// daemon's user, so it would copy any repository the daemon can read.
func validateRepoURL(raw string, allowLocal bool) error {
	const field = "repo.url"
	if raw == "" {
		return errdefs.Invalid(field, "is empty")
	}
	if len(raw) > 2048 || strings.ContainsFunc(raw, func(r rune) bool { return isControl(r) || r == ' ' }) {
		return errdefs.Invalid(field, "must be at most 2048 bytes with no spaces or control characters")
	}
	if strings.HasPrefix(raw, "-") {
		return errdefs.Invalid(field, "must not start with '-'")
	}
	local := func() error {
		if allowLocal {
			return nil
		}
		return errdefs.Invalid(field, "%q is a path on the daemon's host: local repositories are refused unless the daemon runs with allow_local_repos (--allow-local-repos, HOTCELL_ALLOW_LOCAL_REPOS)", clip(raw))
	}
	if strings.HasPrefix(raw, "/") {
		return local()
	}
	if i := strings.Index(raw, "://"); i > 0 {
		switch strings.ToLower(raw[:i]) {
		case "https", "http", "ssh", "git":
			u, err := url.Parse(raw)
			if err != nil {
				return errdefs.Invalid(field, "does not parse: %v", err)
			}
			if u.Host == "" {
				return errdefs.Invalid(field, "%q names no host", clip(raw))
			}
			return nil
		case "file":
			if _, err := url.Parse(raw); err != nil {
				return errdefs.Invalid(field, "does not parse: %v", err)
			}
			return local()
		}
		return errdefs.Invalid(field, "scheme %q is not allowed (use https, http, ssh or git)", clip(raw[:i]))
	}
	// scp-like ssh syntax: user@host:path. git reads a '/' before the first
	// ':' as a local path, so such a string is not one.
	if at, colon := strings.Index(raw, "@"), strings.Index(raw, ":"); at > 0 && colon > at+1 && !strings.Contains(raw[:colon], "/") && !strings.Contains(raw[:colon], "::") {
		return nil
	}
	return errdefs.Invalid(field, "%q is not a repository URL (https://..., ssh://..., git://... or user@host:path)", clip(raw))
}

func parseBool(field, s string) (bool, error) {
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, errdefs.Invalid(field, "%q is not true or false", clip(s))
	}
	return v, nil
}

func parseNonNegative(field, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, errdefs.Invalid(field, "%q is not a non-negative integer", clip(s))
	}
	return v, nil
}

func validateState(s string) (wire.State, error) {
	switch st := wire.State(s); st {
	case "", wire.StateCreating, wire.StateRunning, wire.StateStopped, wire.StatePaused, wire.StateError:
		return st, nil
	}
	return "", errdefs.Invalid("state", "%q is not one of creating, running, stopped, paused, error", clip(s))
}

// parseLabelFilters reads repeated label=key=value query parameters.
func parseLabelFilters(vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errdefs.Invalid("label", "%q must be key=value", clip(kv))
		}
		if err := validateLabel("label", k, v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// clip keeps echoed user input short in error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
