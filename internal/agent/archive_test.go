package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

// tree describes a directory for comparisons: one line per entry.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			line += " " + string(data) + " " + fi.ModTime().UTC().Format(time.RFC3339)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	src := filepath.Join(a.ws, "src")
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, f := range []struct {
		name, data string
		mode       os.FileMode
	}{{"a.txt", "alpha", 0o644}, {"sub/b.sh", "#!/bin/sh\n", 0o755}, {"sub/deep/c", "secret", 0o600}} {
		p := filepath.Join(src, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../a.txt", filepath.Join(src, "sub/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "sub/hard")); err != nil {
		t.Fatal(err)
	}

	for _, gz := range []bool{false, true} {
		resp := a.do(t.Context(), "GET", "/v1/archive", q("path", "src"), nil)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET archive: %d %v", resp.StatusCode, err)
		}
		if gz {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body = buf.Bytes()
		}
		dst := "dst-" + map[bool]string{false: "tar", true: "tgz"}[gz]
		var res wire.ArchiveResult
		a.call("PUT", "/v1/archive", q("path", dst), body, 200, &res)
		if res.Files != 5 || res.Bytes != int64(len("alpha#!/bin/sh\nsecret")) {
			t.Errorf("gzip=%v: result %+v, want 5 files, 21 bytes", gz, res)
		}
		if d := cmp.Diff(tree(t, src), tree(t, filepath.Join(a.ws, dst))); d != "" {
			t.Errorf("gzip=%v: extracted tree (-want +got):\n%s", gz, d)
		}
		a1, _ := os.Stat(filepath.Join(a.ws, dst, "a.txt"))
		h1, _ := os.Stat(filepath.Join(a.ws, dst, "sub/hard"))
		if !os.SameFile(a1, h1) {
			t.Errorf("gzip=%v: hard link not kept", gz)
		}
	}
	// A file's archive is its one entry; a symlink at the path is followed.
	if err := os.Symlink("sub", filepath.Join(src, "tosub")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, of, want string }{
		{"src/sub/b.sh", wire.ArchiveOfFile, "b.sh 755 #!/bin/sh\n"},
		{"src/tosub/deep", wire.ArchiveOfDirectory, "c 600 secret"},
	} {
		resp := a.do(t.Context(), "GET", "/v1/archive", q("path", tc.path), nil)
		if of := resp.Header.Get(wire.HeaderArchiveOf); resp.StatusCode != 200 || of != tc.of {
			t.Fatalf("archive of %s: %d, %s %q, want 200 and %q", tc.path, resp.StatusCode, wire.HeaderArchiveOf, of, tc.of)
		}
		tr := tar.NewReader(resp.Body)
		var got []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			got = append(got, fmt.Sprintf("%s %o %s", h.Name, h.Mode&0o777, b))
		}
		resp.Body.Close()
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("archive of %s: entries %q, want [%q]", tc.path, got, tc.want)
		}
	}
	if err := os.Symlink("/nowhere", filepath.Join(src, "dangling")); err != nil {
		t.Fatal(err)
	}
	a.callErr("GET", "/v1/archive", q("path", "src/dangling"), nil, 404, "")
	a.callErr("PUT", "/v1/archive", q("path", "bad"), "this is not a tar archive, not at all, no", 400, "archive")
}

type entry struct {
	name, link string
	typ        byte
	body       string
}

func makeTar(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Unix(1e9, 0)}
		if e.typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestArchiveAnyLinks: with links=any (a build's COPY) a symlink may point
// anywhere, as the files it copies had it, and still nothing is written
// through one: an entry under a link's name is refused, one at its name
// replaces the link (a directory too).
func TestArchiveAnyLinks(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir, outside := filepath.Join(base, "dst"), filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	links := []entry{
		{name: "abs", typ: tar.TypeSymlink, link: outside},
		{name: "d/up", typ: tar.TypeSymlink, link: "../../../x"},
		{name: "venv-python", typ: tar.TypeSymlink, link: "/usr/bin/python3"},
	}
	if _, err := extractTar(dir, bytes.NewReader(makeTar(t, links)), true); err != nil {
		t.Fatalf("links=any: %v", err)
	}
	for _, e := range links {
		if got, err := os.Readlink(filepath.Join(dir, e.name)); err != nil || got != e.link {
			t.Errorf("%s: a link to %q, %v; want %q", e.name, got, err, e.link)
		}
	}
	for _, entries := range [][]entry{
		{{name: "abs/evil", typ: tar.TypeReg, body: "x"}},
		{{name: "h", typ: tar.TypeLink, link: "abs/secret"}},
	} {
		if _, err := extractTar(dir, bytes.NewReader(makeTar(t, entries)), true); err == nil {
			t.Errorf("%+v through the link: no error", entries)
		}
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Errorf("written through the link: %v", names)
	}
	if _, err := extractTar(dir, bytes.NewReader(makeTar(t, []entry{{name: "venv-python", typ: tar.TypeReg, body: "file"}})), true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "venv-python")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("a file at a link's name: %v, %v; want the link replaced", fi, err)
	}
	if _, err := extractTar(dir, bytes.NewReader(makeTar(t, []entry{{name: "bad", typ: tar.TypeSymlink}})), true); err == nil {
		t.Error("a link to nothing: no error")
	}
	a := newTestAgent(t)
	a.callErr("PUT", "/v1/archive", q("path", "x", "links", "some"), "", 400, "links")
}

func TestArchiveRejectsEscapes(t *testing.T) {
	t.Parallel()
	reg := func(name string) entry { return entry{name: name, typ: tar.TypeReg, body: "x"} }
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir, outside string)
		entries []entry
		want    string
	}{
		{"dotdot", nil, []entry{reg("../evil")}, ".."},
		{"dotdot inside", nil, []entry{reg("a/../../evil")}, ".."},
		{"absolute", nil, []entry{reg("/tmp/evil")}, "absolute"},
		{"symlink absolute", nil, []entry{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, "absolute"},
		{"symlink up", nil, []entry{{name: "a/l", typ: tar.TypeSymlink, link: "../../x"}}, "outside"},
		{"symlink dotdot after name", nil, []entry{{name: "l", typ: tar.TypeSymlink, link: "a/../.."}}, "after a name"},
		{"write through own symlink", nil, []entry{
			{name: "l", typ: tar.TypeSymlink, link: "."},
			reg("l/evil"),
		}, "not a directory"},
		{"write through existing symlink", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, filepath.Join(dir, "ext")); err != nil {
				t.Fatal(err)
			}
		}, []entry{reg("ext/evil")}, "not a directory"},
		{"hardlink outside", nil, []entry{{name: "h", typ: tar.TypeLink, link: "../outside/secret"}}, ".."},
		{"hardlink absolute", nil, []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, "absolute"},
		{"hardlink through symlink", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, filepath.Join(dir, "ext")); err != nil {
				t.Fatal(err)
			}
		}, []entry{{name: "h", typ: tar.TypeLink, link: "ext/secret"}}, "not a directory"},
		{"device", nil, []entry{{name: "null", typ: tar.TypeChar}}, "unsupported"},
		{"file over dir", nil, []entry{{name: "d/", typ: tar.TypeDir}, reg("d")}, "directory exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			dir := filepath.Join(base, "dst")
			outside := filepath.Join(base, "outside")
			for _, d := range []string{dir, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, dir, outside)
			}
			before := tree(t, base)
			// A file after the bad entry must not be extracted either.
			entries := append(tt.entries, reg("after"))
			_, err := extractTar(dir, bytes.NewReader(makeTar(t, entries)), false)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if _, err := os.Lstat(filepath.Join(dir, "after")); err == nil {
				t.Errorf("extraction went on after the bad entry")
			}
			after := tree(t, outside)
			var beforeOutside []string
			for _, l := range before {
				if rest, ok := strings.CutPrefix(l, "outside/"); ok {
					beforeOutside = append(beforeOutside, rest)
				}
			}
			if d := cmp.Diff(beforeOutside, after); d != "" {
				t.Errorf("outside changed (-before +after):\n%s", d)
			}
			if _, err := os.Lstat(filepath.Join(base, "evil")); err == nil {
				t.Errorf("evil written beside the directory")
			}
		})
	}
}

func TestArchiveAllowsInsideLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	entries := []entry{
		{name: "./", typ: tar.TypeDir},
		{name: "a/b/", typ: tar.TypeDir},
		{name: "a/b/f", typ: tar.TypeReg, body: "data"},
		{name: "a/b/up", typ: tar.TypeSymlink, link: "../../a/b/f"},
		{name: "top", typ: tar.TypeSymlink, link: "a/b"},
		{name: "a/h", typ: tar.TypeLink, link: "a/b/f"},
		{name: "a/b/f2", typ: tar.TypeReg, body: "replaced"},
		{name: "a/b/f2", typ: tar.TypeReg, body: "again"},
	}
	res, err := extractTar(dir, bytes.NewReader(makeTar(t, entries)), false)
	if err != nil {
		t.Fatalf("extract: %v", err)
	}
	if res.Files != 6 {
		t.Errorf("files %d, want 6", res.Files)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "top/up")); string(data) != "data" {
		t.Errorf("through links: got %q, want data", data)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a/b/f2")); string(data) != "again" {
		t.Errorf("replaced file: got %q, want again", data)
	}
}
