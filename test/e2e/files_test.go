package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestLargeFiles: sizes that the old shell-command approach could not carry
// (it failed above ~100 KiB) round-trip byte for byte.
func TestLargeFiles(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	for _, size := range []int{200 << 10, 50 << 20} {
		data := make([]byte, size)
		rand.Read(data)
		if _, err := d.C.WriteFile(t.Context(), sb.ID, "big.bin", bytes.NewReader(data), 0); err != nil {
			t.Fatalf("write %d bytes: %v", size, err)
		}
		rc, err := d.C.ReadFile(t.Context(), sb.ID, "big.bin", nil)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, rc)
		rc.Close()
		if err != nil || n != int64(size) || !bytes.Equal(h.Sum(nil), sha(data)) {
			t.Fatalf("read %d of %d bytes (err %v), digest matches: %v", n, size, err, bytes.Equal(h.Sum(nil), sha(data)))
		}
	}
}

func sha(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func TestFileEdges(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := sharedDaemon(t)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt})
		ctx := t.Context()
		write := func(p, s string, mode uint32) error {
			_, err := d.C.WriteFile(ctx, sb.ID, p, strings.NewReader(s), fs.FileMode(mode))
			return err
		}
		read := func(p string, rng *client.RangeOptions) string {
			t.Helper()
			rc, err := d.C.ReadFile(ctx, sb.ID, p, rng)
			if err != nil {
				t.Fatalf("read %s: %v", p, err)
			}
			defer rc.Close()
			b, _ := io.ReadAll(rc)
			return string(b)
		}

		if err := write("deep/er/file.txt", "0123456789", 0o755); err != nil {
			t.Fatalf("write with parents: %v", err)
		}
		if got := read("deep/er/file.txt", &client.RangeOptions{Offset: 2, Length: 3}); got != "234" {
			t.Errorf("range read: got %q, want %q", got, "234")
		}
		if st, _ := d.C.Stat(ctx, sb.ID, "deep/er/file.txt"); st.Mode != 0o755 {
			t.Errorf("mode: got %s, want 0755", st.Mode)
		}
		// Writing onto a directory is refused and changes nothing.
		wantStatus(t, write("deep/er", "x", 0), http.StatusBadRequest, "write onto a directory")
		if st, err := d.C.Stat(ctx, sb.ID, "deep/er"); err != nil || st.Type != client.FileTypeDir {
			t.Errorf("directory after refused write: %+v, %v", st, err)
		}
		// Reading a directory, mkdir onto a file: clear 4xx.
		rc, err := d.C.ReadFile(ctx, sb.ID, "deep", nil)
		if err == nil {
			rc.Close()
		}
		wantStatus(t, err, http.StatusBadRequest, "read of a directory")
		_, err = d.C.Mkdir(ctx, sb.ID, client.MkdirRequest{Path: "deep/er/file.txt"})
		wantStatus(t, err, http.StatusConflict, "mkdir onto a file")
		_, err = d.C.Stat(ctx, sb.ID, "nope")
		wantStatus(t, err, http.StatusNotFound, "stat of a missing file")

		// A write that fails half-way leaves the old file intact.
		if err := write("keep.txt", "old content", 0); err != nil {
			t.Fatal(err)
		}
		_, err = d.C.WriteFile(ctx, sb.ID, "keep.txt", io.MultiReader(strings.NewReader("new partial"), failingReader{}), 0)
		if err == nil {
			t.Fatal("a write whose body failed succeeded")
		}
		if got := read("keep.txt", nil); got != "old content" {
			t.Fatalf("after a failed write: got %q, want the old content", got)
		}
		// The daemon answers the client as soon as the upload fails; the agent
		// removes its temp file when it sees the stream end, a moment later.
		deadline := time.Now().Add(5 * time.Second)
		for {
			list, err := d.C.ListDir(ctx, sb.ID, "/workspace")
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range list.Entries {
				if strings.Contains(e.Name, "tmp") {
					left = append(left, e.Name)
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("temp files left behind 5s after a failed write: %v", left)
			}
			time.Sleep(50 * time.Millisecond)
		}

		// Symlinks are listed with their target.
		mustOK(t, run(t, d, sb.ID, "ln -s keep.txt link"), "ln")
		st, err := d.C.Stat(ctx, sb.ID, "link")
		if err != nil || st.Type != client.FileTypeSymlink || st.LinkTarget != "keep.txt" {
			t.Errorf("stat of symlink: %+v, %v", st, err)
		}
	})
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// TestNoShellImage: files and exec of an absolute path work in an image with
// no shell at all; a shell command says what is missing.
func TestNoShellImage(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.NoShellImage(t)})
	ctx := t.Context()
	res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"/bin/echo", "no", "shell"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "no shell\n" {
		t.Fatalf("exec /bin/echo: %+v, %v", res, err)
	}
	if _, err := d.C.WriteFile(ctx, sb.ID, "f.txt", strings.NewReader("content"), 0); err != nil {
		t.Fatalf("write: %v", err)
	}
	res, err = d.C.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"/bin/cat", "/workspace/f.txt"}})
	if err != nil || res.Stdout != "content" {
		t.Fatalf("cat: %+v, %v", res, err)
	}
	res, err = d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hi"})
	if err != nil || res.ExitCode != 127 || !strings.Contains(res.Stderr, "/bin/sh") {
		t.Fatalf("shell command in an image without a shell: %+v, %v; want exit 127 naming /bin/sh", res, err)
	}
	if l, err := d.C.ListDir(ctx, sb.ID, "/bin"); err != nil || len(l.Entries) != 2 {
		t.Fatalf("list /bin: %+v, %v", l, err)
	}
}
