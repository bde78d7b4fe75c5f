// Package buildinfo is the one source of the build's version, which the
// daemon reports in /v1/host, the CLI prints and sends as its User-Agent,
// and the MCP server announces.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// version is set at link time:
//
//	go build -ldflags "-X github.com/hotcell/hotcell/internal/buildinfo.version=v1.2.3"
var version string

var fromBinary = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(info)
})

// Version names this build: the version given with -ldflags, else the
// module version of a `go install ...@vX`, else "dev-" and the VCS
// revision Go stamped into the binary (with "-dirty" for uncommitted
// changes), else "dev".
func Version() string {
	if version != "" {
		return version
	}
	return fromBinary()
}

func fromBuildInfo(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return "dev"
	case dirty:
		return "dev-" + rev + "-dirty"
	}
	return "dev-" + rev
}
