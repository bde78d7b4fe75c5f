package kubernetes

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
)

// ent is a tar entry of a test: a file (body), a directory (name ends in
// /), a symlink ("-> target") or a hard link ("=> target").
type ent struct {
	name, body string
	mode       int64
}

func layerOf(t *testing.T, ents []ent, end bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		switch {
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		case strings.HasPrefix(e.body, "-> "):
			h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, strings.TrimPrefix(e.body, "-> ")
		case strings.HasPrefix(e.body, "=> "):
			h.Typeflag, h.Size, h.Linkname = tar.TypeLink, 0, strings.TrimPrefix(e.body, "=> ")
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if end {
		tw.Close()
	} else {
		tw.Flush()
	}
	return buf.Bytes()
}

// view is a filesystem as a test compares it: path -> type, mode and
// content or link.
type view map[string]string

// apply lays a layer over v as a container runtime does: whiteouts and
// opaque directories hide what is under them, a non-directory replaces a
// directory with what is under it, then the entries land.
func (v view) apply(t *testing.T, layer []byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	add := view{}
	var gone, opaque []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := path.Clean("/" + h.Name)[1:]
		dir, base := path.Split(name)
		switch {
		case base == ".wh..wh..opq":
			opaque = append(opaque, strings.TrimSuffix(dir, "/"))
			continue
		case strings.HasPrefix(base, ".wh."):
			gone = append(gone, dir+strings.TrimPrefix(base, ".wh."))
			continue
		}
		body, _ := io.ReadAll(tr)
		s := string(h.Typeflag) + " " + string(rune('0'+h.Mode&0o7)) + " "
		switch h.Typeflag {
		case tar.TypeLink:
			t := path.Clean("/" + h.Linkname)[1:]
			s = add[t]
			if s == "" {
				s = v[t]
			}
		case tar.TypeSymlink:
			s += "-> " + h.Linkname
		default:
			s += string(body)
		}
		add[name] = s
	}
	for k := range v {
		// A non-directory over a directory replaces it, what was under it too.
		for a, e := range add {
			if !strings.HasPrefix(e, string(tar.TypeDir)+" ") && strings.HasPrefix(k, a+"/") {
				delete(v, k)
			}
		}
		for _, g := range gone {
			if k == g || strings.HasPrefix(k, g+"/") {
				delete(v, k)
			}
		}
		for _, o := range opaque {
			if strings.HasPrefix(k, o+"/") {
				delete(v, k)
			}
		}
	}
	maps.Copy(v, add)
}

// TestDiffLayer: the base image's layers with the diff over them are the
// box's root filesystem exactly, and the diff holds only what changed.
func TestDiffLayer(t *testing.T) {
	t.Parallel()
	base1 := layerOf(t, []ent{
		{name: "etc/"}, {name: "etc/keep", body: "k"}, {name: "etc/change", body: "old"}, {name: "etc/mode", body: "m"},
		{name: "usr/"}, {name: "usr/bin/"}, {name: "usr/bin/tool", body: "t"},
		{name: "etc/opq/"}, {name: "etc/opq/old", body: "o"},
		{name: "gone/"}, {name: "gone/dir/"}, {name: "gone/dir/a", body: "a"}, {name: "gone-file", body: "g"},
		{name: "link", body: "-> etc/keep"}, {name: "link2", body: "-> a"}, {name: "hardk", body: "=> etc/keep"},
		{name: "was-dir/"}, {name: "was-dir/x", body: "x"}, {name: "was-file", body: "f"},
	}, true)
	base2 := layerOf(t, []ent{
		{name: "usr/bin/.wh.tool"}, {name: "usr/bin/tool2", body: "t2"},
		{name: "etc/opq/.wh..wh..opq"}, {name: "etc/opq/new", body: "n"},
	}, true)
	idx := baseIndex{}
	for _, l := range [][]byte{base1, base2} {
		if err := indexLayer(idx, bytes.NewReader(l)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := idx["usr/bin/tool"]; ok {
		t.Error("the index keeps a file a layer whited out")
	}
	if _, ok := idx["etc/opq/old"]; ok {
		t.Error("the index keeps a file under an opaque directory")
	}
	// The box: as the agent streams it (a hard link's first name a file).
	root := layerOf(t, []ent{
		{name: "etc/"}, {name: "etc/keep", body: "k"}, {name: "etc/change", body: "new"}, {name: "etc/mode", body: "m", mode: 0o600},
		{name: "usr/"}, {name: "usr/bin/"}, {name: "usr/bin/tool2", body: "t2"},
		{name: "etc/opq/"}, {name: "etc/opq/new", body: "n"},
		{name: "link", body: "-> etc/keep"}, {name: "link2", body: "-> b"}, {name: "hardk", body: "=> etc/keep"},
		{name: "new/"}, {name: "new/file", body: "nf"}, {name: "new/hard", body: "=> new/file"},
		{name: "was-dir", body: "now a file"}, {name: "was-file/"}, {name: "was-file/y", body: "y"},
	}, true)
	var diff bytes.Buffer
	if err := diffLayer(&diff, bytes.NewReader(root), idx); err != nil {
		t.Fatal(err)
	}
	got, want := view{}, view{}
	for _, l := range [][]byte{base1, base2, diff.Bytes()} {
		got.apply(t, l)
	}
	want.apply(t, root)
	if !maps.Equal(got, want) {
		t.Errorf("base + diff:\n got %q\nwant %q", got, want)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(diff.Bytes()))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	// Unchanged directories only as the parents of what changed.
	// A directory that is a file now hides what was under it: no whiteout
	// under it (its parent is no directory).
	wantNames := []string{"etc/", "etc/change", "etc/mode", "link2", "new/", "new/file", "new/hard", "was-dir", "was-file/", "was-file/y", ".wh.gone", ".wh.gone-file"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("the diff's files: %q, want %q", names, wantNames)
	}

	// A new hard link to a file the diff left out: flat.
	root = layerOf(t, []ent{{name: "etc/"}, {name: "etc/keep", body: "k"}, {name: "etc/again", body: "=> etc/keep"}}, true)
	if err := diffLayer(io.Discard, bytes.NewReader(root), idx); !errors.Is(err, errFlat) {
		t.Errorf("a new hard link to an unchanged file: got %v, want errFlat", err)
	}
	// A stream cut short (no end-of-archive blocks) is refused.
	root = layerOf(t, []ent{{name: "etc/"}, {name: "etc/change", body: "new"}}, false)
	if err := diffLayer(io.Discard, bytes.NewReader(root), idx); err == nil || !strings.Contains(err.Error(), "end-of-archive") {
		t.Errorf("a stream cut short: got %v", err)
	}
}
