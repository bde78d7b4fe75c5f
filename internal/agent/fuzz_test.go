package agent

import (
	"bytes"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

func FuzzSanitizeName(f *testing.F) {
	for _, s := range []string{"a", "a/b/", "./a", "../x", "a/../../x", "/abs", "a//b", ".", "./", "a\x00b", `a\..\b`, "a/./b/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		rel, err := sanitizeName(name)
		if err != nil {
			return
		}
		if rel == "" {
			return
		}
		if strings.HasPrefix(rel, "/") || path.Clean(rel) != rel {
			t.Fatalf("sanitizeName(%q) = %q: not relative and clean", name, rel)
		}
		for _, c := range strings.Split(rel, "/") {
			if c == ".." {
				t.Fatalf("sanitizeName(%q) = %q: has ..", name, rel)
			}
		}
		if j := path.Join("/root", rel); !strings.HasPrefix(j, "/root/") {
			t.Fatalf("sanitizeName(%q) = %q: joins to %q", name, rel, j)
		}
	})
}

func FuzzCheckSymlinkTarget(f *testing.F) {
	for _, s := range [][2]string{{"l", "a"}, {"a/l", "../b"}, {"a/l", "../../b"}, {"l", "/etc"}, {"l", "a/../.."}, {"a/b/l", "./../x"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, target string) {
		rel, err := sanitizeName(name)
		if err != nil || rel == "" {
			return
		}
		if checkSymlinkTarget(rel, target) != nil {
			return
		}
		// Lexically it must stay inside, and a ".." may only lead.
		j := path.Join("/root", path.Dir(rel), target)
		if j != "/root" && !strings.HasPrefix(j, "/root/") {
			t.Fatalf("link %q -> %q accepted but resolves to %q", rel, target, j)
		}
		seenName := false
		for _, c := range strings.Split(target, "/") {
			switch c {
			case "", ".":
			case "..":
				if seenName {
					t.Fatalf("link %q -> %q accepted with .. after a name", rel, target)
				}
			default:
				seenName = true
			}
		}
	})
}

func FuzzParseExec(f *testing.F) {
	for _, s := range []string{
		`{"command":"echo hi"}`,
		`{"argv":["/bin/echo","hi"],"env":{"A":"b"},"cwd":"sub","timeoutMs":5}`,
		`{"command":"x","argv":["y"]}`,
		`{"argv":[""]}`,
		`{"command":"x","timeoutMs":-1,"maxOutputBytes":99999999999}`,
		`{"command":"x","env":{"=":"y"}}`,
		`{"command":"x","cwd":"/a/../../b"}`,
		`{}`, `[]`, `{"command":"x"} trailing`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req wire.ExecRequest
		if decodeJSONBytes(bytes.NewReader(data), &req) != nil {
			return
		}
		spec, err := parseExec("/workspace", req)
		if err != nil {
			return
		}
		if len(spec.argv) == 0 || spec.argv[0] == "" {
			t.Fatalf("accepted %s without a program", data)
		}
		if spec.shell != (req.Command != "") {
			t.Fatalf("accepted %s: shell %v", data, spec.shell)
		}
		if !path.IsAbs(spec.cwd) || path.Clean(spec.cwd) != spec.cwd || len(spec.cwd) > fspath.MaxLen+len("/workspace/") {
			t.Fatalf("accepted %s with cwd %q", data, spec.cwd)
		}
		if spec.timeout <= 0 || spec.timeout > cmdspec.MaxTimeout {
			t.Fatalf("accepted %s with timeout %v", data, spec.timeout)
		}
		if spec.maxOut <= 0 || spec.maxOut > cmdspec.MaxOutput {
			t.Fatalf("accepted %s with maxOut %d", data, spec.maxOut)
		}
		for k, v := range spec.env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
				t.Fatalf("accepted env %q=%q", k, v)
			}
		}
	})
}

func FuzzQueryParams(f *testing.F) {
	for _, s := range []string{"path=a&offset=1&length=2", "offset=-1", "length=x", "recursive", "recursive=maybe", "mode=0644", "mode=8", "path=%00", "offset=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if rng, err := parseRange(q); err == nil {
			if rng.offset < 0 || rng.length < -1 {
				t.Fatalf("%q: accepted range %+v", raw, rng)
			}
		}
		_, _ = queryBool(q, "recursive")
		if m, err := wire.ParseFileMode(q.Get("mode")); err == nil && m > 0o7777 {
			t.Fatalf("%q: accepted mode %o", raw, m)
		}
		h := &handler{workspace: "/workspace"}
		if p, err := h.queryPath(q, "path"); err == nil {
			if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
				t.Fatalf("%q: accepted path %q", raw, p)
			}
		}
	})
}
