// Package fspath is the one place that validates and resolves paths inside a
// sandbox. Both the daemon (at the API edge) and the agent use it.
package fspath

import (
	"path"
	"strconv"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// Workspace is the directory relative paths resolve against.
const Workspace = "/workspace"

// MaxLen bounds a path's length, as PATH_MAX does.
const MaxLen = 4096

// Resolve validates p and returns it absolute and clean. Relative paths
// resolve against Workspace. field names the request field for errors.
func Resolve(field, p string) (string, error) { return ResolveIn(Workspace, field, p) }

// ResolveIn is Resolve with relative paths resolved against workspace
// (Workspace when empty), which the agent's tests point at a temp dir.
func ResolveIn(workspace, field, p string) (string, error) {
	if p == "" {
		return "", errdefs.Invalid(field, "path is empty")
	}
	if len(p) > MaxLen {
		return "", errdefs.Invalid(field, "path is longer than %d bytes", MaxLen)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid(field, "path contains a NUL byte")
	}
	if !path.IsAbs(p) {
		if workspace == "" {
			workspace = Workspace
		}
		p = path.Join(workspace, p)
	}
	return path.Clean(p), nil
}

// UnescapeMount undoes the kernel's octal escapes (\040 for a space) in a
// path of a mount table (/proc/self/mountinfo).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
