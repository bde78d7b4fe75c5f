package sparsetar

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hotcell/hotcell/internal/testenv"
)

// sparseFile makes a file of size bytes with data only at the offsets given.
func sparseFile(t *testing.T, p string, size int64, data map[int64][]byte) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off, b := range data {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func random(n int) []byte {
	b := make([]byte, n)
	x := uint32(7)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x>>24) | 1
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	const mib = 1 << 20
	files := []struct {
		name string
		size int64
		data map[int64][]byte
	}{
		{"hole-only", 64 * mib, nil},
		{"middle", 64*mib + 123, map[int64][]byte{mib: []byte("hello"), 40 * mib: random(8 << 10)}},
		{"dir/ends-in-data", 32*mib + 7, map[int64][]byte{32 * mib: random(7), 0: random(100)}},
		{"a-name-that-is-rather-long-" + string(bytes.Repeat([]byte("x"), 120)), 8 * mib, map[int64][]byte{5: []byte("z")}},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		p := filepath.Join(src, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		sparseFile(t, p, f.size, f.data)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			t.Fatal(err)
		}
		hdr.Name = f.name
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		ext, ok := DataExtents(fh, hdr.Size)
		if !ok {
			t.Fatalf("%s: DataExtents found no holes (filesystem without SEEK_HOLE?)", f.name)
		}
		if err := Write(tw, &buf, hdr, fh, ext); err != nil {
			t.Fatal(err)
		}
		fh.Close()
	}
	// A plain entry after the sparse ones: the stream stays aligned.
	if err := tw.WriteHeader(&tar.Header{Name: "plain", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte("abc"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > mib {
		t.Errorf("the tar of %d MiB of sparse files takes %d bytes, want under 1 MiB", (64 + 64 + 32 + 8), buf.Len())
	}

	// archive/tar reads it back, holes as zeros; HoleWriter keeps them.
	dst := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			if i != len(files)+1 {
				t.Errorf("got %d entries, want %d", i, len(files)+1)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == len(files) {
			if hdr.Name != "plain" || IsSparse(hdr) {
				t.Errorf("last entry %q sparse %v, want plain", hdr.Name, IsSparse(hdr))
			}
			continue
		}
		f := files[i]
		if hdr.Name != f.name || hdr.Size != f.size || !IsSparse(hdr) {
			t.Errorf("entry %d: got %q size %d sparse %v, want %q size %d sparse", i, hdr.Name, hdr.Size, IsSparse(hdr), f.name, f.size)
		}
		p := filepath.Join(dst, filepath.Base(f.name))
		out, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		hw := &HoleWriter{F: out}
		if _, err := io.Copy(hw, tr); err != nil {
			t.Fatal(err)
		}
		if err := hw.Close(); err != nil {
			t.Fatal(err)
		}
		out.Close()
		fi, _ := os.Stat(p)
		if fi.Size() != f.size {
			t.Errorf("%s: extracted size %d, want %d", f.name, fi.Size(), f.size)
		}
		if fileSum(t, p) != fileSum(t, filepath.Join(src, f.name)) {
			t.Errorf("%s: extracted content differs", f.name)
		}
		if a := allocated(t, p); a > mib {
			t.Errorf("%s: extracted file takes %d bytes on disk, want under 1 MiB", f.name, a)
		}
	}

	// GNU tar reads it too (and is what an operator would use on a download).
	testenv.RequireTool(t, "tar")
	archive := filepath.Join(t.TempDir(), "a.tar")
	if err := os.WriteFile(archive, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	gnu := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archive, "-C", gnu).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
	for _, f := range files {
		p := filepath.Join(gnu, f.name)
		if fi, err := os.Stat(p); err != nil || fi.Size() != f.size {
			t.Errorf("GNU tar: %s: %v, want size %d", f.name, err, f.size)
			continue
		}
		if fileSum(t, p) != fileSum(t, filepath.Join(src, f.name)) {
			t.Errorf("GNU tar: %s: content differs", f.name)
		}
	}
}

func TestHoleWriter(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := make([]byte, 3<<20+5)
	copy(want[1000:], "data across a block boundary at 4096?")
	copy(want[4090:], "xxxxxxxxxxxxxxxx")
	copy(want[2<<20:], random(10000))
	hw := &HoleWriter{F: f}
	// Odd-sized writes, as a tar reader hands them over.
	for b := want; len(b) > 0; {
		n := min(len(b), 7777)
		if _, err := hw.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("content differs (len %d, want %d)", len(got), len(want))
	}
	if a := allocated(t, p); a > 64<<10 {
		t.Errorf("file takes %d bytes on disk, want at most 64 KiB", a)
	}
}

func TestPaxRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ k, v, want string }{
		{"a", "b", "6 a=b\n"},
		{"path", "123456", "15 path=123456\n"},
		{"k", string(bytes.Repeat([]byte("v"), 94)), "101 k=" + string(bytes.Repeat([]byte("v"), 94)) + "\n"},
	} {
		if got := paxRecord(tc.k, tc.v); got != tc.want {
			t.Errorf("paxRecord(%q): got %q, want %q", tc.k, got, tc.want)
		}
	}
}
