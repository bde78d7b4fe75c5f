package backup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"testing"

	"github.com/hotcell/hotcell/internal/sparsetar"
)

func testTar(t testing.TB, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		body := []byte("content of " + n)
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

func runChecker(b []byte, gzipped bool) error {
	c := startChecker(gzipped)
	// Small writes, as a network stream arrives.
	for len(b) > 0 {
		n := min(len(b), 700)
		_, _ = c.Write(b[:n])
		b = b[n:]
	}
	return c.finish()
}

func TestCheckTar(t *testing.T) {
	t.Parallel()
	good := testTar(t, "a", "dir/b")
	// archive/tar pads to 10 KiB; the end marker is right after b's data.
	endOfB := 512*2 + 512*2
	for _, tc := range []struct {
		name string
		b    []byte
		gz   bool
		ok   bool
	}{
		{"whole", good, false, true},
		{"whole gzip", gz(t, good), true, true},
		{"empty archive", testTar(t), false, true},
		{"cut at an entry boundary", good[:endOfB], false, false},
		{"cut after one zero block", good[:endOfB+512], false, false},
		{"cut inside data", good[:600], false, false},
		{"cut gzip", gz(t, good)[:40], true, false},
		{"empty", nil, false, false},
		{"absolute name", testTar(t, "/etc/passwd"), false, false},
		{"dotdot name", testTar(t, "a/../../x"), false, false},
		{"garbage", bytes.Repeat([]byte("x"), 2048), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := runChecker(tc.b, tc.gz)
			if (err == nil) != tc.ok {
				t.Errorf("got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestCheckerAbandoned(t *testing.T) {
	t.Parallel()
	c := newTarChecker()
	_, _ = c.Write(testTar(t, "a")[:100])
	c.close() // must not hang
}

func FuzzCheckTar(f *testing.F) {
	f.Add(testTar(f, "a", "b/c"), false)
	f.Add(gz(f, testTar(f, "a")), true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, b []byte, gzipped bool) {
		// Whatever the bytes, the checker ends and agrees with a second run.
		err1 := checkTar(bytes.NewReader(b), gzipped)
		err2 := runChecker(b, gzipped)
		if (err1 == nil) != (err2 == nil) {
			t.Errorf("direct %v, streamed %v", err1, err2)
		}
		if err1 == nil && !gzipped {
			// A whole archive reads to its end marker with archive/tar too.
			tr := tar.NewReader(bytes.NewReader(b))
			for {
				_, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("checker accepted what archive/tar rejects: %v", err)
				}
			}
		}
	})
}

// TestCheckTarSparse: a sparse entry's holes are not expanded (one that
// claims an exabyte would never finish), and a stream cut after one is
// still found out.
func TestCheckTarSparse(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "data")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	const huge = 1 << 60
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Name: "huge", Mode: 0o644, Size: huge, Typeflag: tar.TypeReg}
	if err := sparsetar.Write(tw, &buf, hdr, f, []sparsetar.Extent{{Off: 0, Len: 5}, {Off: huge, Len: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	if err := runChecker(whole, false); err != nil {
		t.Errorf("whole: got %v, want nil", err)
	}
	for _, cut := range []int{512, 1024, 1024 + 512} {
		if err := runChecker(whole[:len(whole)-cut], false); err == nil {
			t.Errorf("cut %d bytes: got nil, want an error", cut)
		}
	}
}
