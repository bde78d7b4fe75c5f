package agent

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hotcell/hotcell/internal/sparsetar"
)

// TestArchiveSparse: a file with holes travels through writeTar and
// extractTar as a few blocks and comes out with the same size and bytes,
// its holes still holes.
func TestArchiveSparse(t *testing.T) {
	t.Parallel()
	src, dst := t.TempDir(), t.TempDir()
	p := filepath.Join(src, "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("middle"), 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var buf bytes.Buffer
	if err := writeTar(&buf, src, nil); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 64<<10 {
		t.Errorf("tar of a 64 MiB sparse file: %d bytes, want under 64 KiB", buf.Len())
	}
	if _, err := extractTar(dst, bytes.NewReader(buf.Bytes()), false); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(p)
	if !bytes.Equal(got, want) {
		t.Errorf("extracted content differs (len %d, want %d)", len(got), len(want))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 1<<20 {
		t.Errorf("extracted file takes %d bytes on disk, want under 1 MiB", st.Blocks*512)
	}
}

// TestExtractRefusesHugeSparse: holes claimed by a few header bytes are
// read out as zeros, so their total is bounded.
func TestExtractRefusesHugeSparse(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "data")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, _ = f.WriteString("x")
	const huge = 1 << 60
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: "huge", Mode: 0o644, Size: huge, Typeflag: tar.TypeReg}
	if err := sparsetar.Write(tw, &buf, hdr, f, []sparsetar.Extent{{Off: 0, Len: 1}, {Off: huge, Len: 0}}); err != nil {
		t.Fatal(err)
	}
	_ = tw.Close()
	_, err = extractTar(t.TempDir(), bytes.NewReader(buf.Bytes()), false)
	if err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Errorf("got %v, want a refusal of the sparse entry", err)
	}
}
