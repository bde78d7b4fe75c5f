package treetar

import (
	"archive/tar"
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "a/b/f.txt"), []byte("hello"), 0o640))
	must(os.Symlink("b/f.txt", filepath.Join(dir, "a/link")))
	ln, err := net.Listen("unix", filepath.Join(dir, "sock"))
	must(err)
	defer ln.Close()

	var buf bytes.Buffer
	var skipped []string
	must(Write(&buf, dir, func(p string) { skipped = append(skipped, filepath.Base(p)) }))

	type entry struct {
		Name, Link, Data string
		Type             byte
		Mode             int64
		UID              int
	}
	var got []entry
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		data, _ := io.ReadAll(tr)
		got = append(got, entry{h.Name, h.Linkname, string(data), h.Typeflag, h.Mode & 0o777, h.Uid})
	}
	want := []entry{
		{Name: "a/", Type: tar.TypeDir, Mode: 0o750},
		{Name: "a/b/", Type: tar.TypeDir, Mode: 0o750},
		{Name: "a/b/f.txt", Data: "hello", Type: tar.TypeReg, Mode: 0o640},
		{Name: "a/link", Link: "b/f.txt", Type: tar.TypeSymlink, Mode: 0o777},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"sock"}, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}
