package agent

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type tarEntry struct {
	name, body, link string
	typ              byte
}

func restoreTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			hdr.Size = 0
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// listWS returns "name=content" for every file under ws (dirs as "name/").
func listWS(t *testing.T, ws string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == ws {
			return err
		}
		rel, _ := filepath.Rel(ws, p)
		switch {
		case fi.IsDir():
			out = append(out, rel+"/")
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out = append(out, rel+"->"+l)
		default:
			b, _ := os.ReadFile(p)
			out = append(out, rel+"="+string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func writeWS(t *testing.T, ws string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRestoreReplaces(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	writeWS(t, a.ws, map[string]string{"a.txt": "old", "later.txt": "made after the backup", "dir/x": "old x"})
	body := restoreTar(t, tarEntry{name: "a.txt", body: "new"}, tarEntry{name: "dir/", typ: tar.TypeDir}, tarEntry{name: "dir/y", body: "y"},
		tarEntry{name: "ln", link: "a.txt", typ: tar.TypeSymlink})
	resp := a.do(t.Context(), "POST", "/v1/restore", q("id", "r1", "sha256", sum(body)), body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	want := []string{"a.txt=new", "dir/", "dir/y=y", "ln->a.txt"}
	if diff := cmp.Diff(want, listWS(t, a.ws)); diff != "" {
		t.Errorf("workspace after restore (-want +got):\n%s", diff)
	}
}

func TestRestoreRefusesAndKeepsWorkspace(t *testing.T) {
	t.Parallel()
	good := restoreTar(t, tarEntry{name: "a.txt", body: "new content that is long enough"})
	corrupt := bytes.Clone(good)
	corrupt[600] ^= 0xff // inside a.txt's data
	truncated := good[:700]
	for _, tc := range []struct {
		name string
		body []byte
		sha  string
		id   string
	}{
		{"wrong sha256", good, sum([]byte("other")), "r1"},
		{"corrupted body", corrupt, sum(good), "r2"},
		// A tar cut at an entry boundary with a matching sha256 passes here
		// (archive/tar accepts a missing end marker): the daemon checks the
		// end marker before it records a backup (backup.checkTar).
		{"truncated", truncated, sum(good), "r3b"},
		{"absolute entry", restoreTar(t, tarEntry{name: "/etc/evil", body: "x"}), "", "r4"},
		{"dotdot entry", restoreTar(t, tarEntry{name: "ok", body: "fine"}, tarEntry{name: "../evil", body: "x"}), "", "r5"},
		{"symlink out", restoreTar(t, tarEntry{name: "l", link: "../../etc", typ: tar.TypeSymlink}), "", "r6"},
		{"absolute symlink", restoreTar(t, tarEntry{name: "l", link: "/etc/passwd", typ: tar.TypeSymlink}), "", "r7"},
		{"hard link out", restoreTar(t, tarEntry{name: "h", link: "../etc/passwd", typ: tar.TypeLink}), "", "r8"},
		{"not a tar", []byte("hello, not a tar at all, but long enough to be read as one header maybe"), "", "r9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newTestAgent(t)
			writeWS(t, a.ws, map[string]string{"a.txt": "old", "keep/me": "kept"})
			before := listWS(t, a.ws)
			sha := tc.sha
			if sha == "" {
				sha = sum(tc.body)
			}
			resp := a.do(t.Context(), "POST", "/v1/restore", q("id", tc.id, "sha256", sha), tc.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400: %s", resp.StatusCode, b)
			}
			if diff := cmp.Diff(before, listWS(t, a.ws)); diff != "" {
				t.Errorf("workspace changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestRestoreValidatesParams(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, qs := range [][]string{{"id", "../x", "sha256", sum(nil)}, {"id", "ok", "sha256", "zz"}, {"sha256", sum(nil)}} {
		resp := a.do(t.Context(), "POST", "/v1/restore", q(qs...), []byte{})
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400", qs, resp.StatusCode)
		}
	}
}

// TestRestoreRecovery puts the workspace in the state a crash leaves at
// each step of a restore and checks recovery ends with either the old or
// the new workspace whole, never a mix.
func TestRestoreRecovery(t *testing.T) {
	t.Parallel()
	oldFiles := map[string]string{"a": "old a", "b": "old b", "c/d": "old d"}
	newFiles := map[string]string{"a": "new a", "n": "new n", "c/e": "new e"}
	wantOld := []string{"a=old a", "b=old b", "c/", "c/d=old d"}
	wantNew := []string{"a=new a", "c/", "c/e=new e", "n=new n"}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, ws string)
		want  []string
	}{
		{"staging not committed", func(t *testing.T, ws string) {
			writeWS(t, filepath.Join(ws, restorePrefix+"r"), map[string]string{"a": "half"})
		}, wantOld},
		{"journal temp file only", func(t *testing.T, ws string) {
			writeWS(t, filepath.Join(ws, restorePrefix+"r"), newFiles)
			writeWS(t, ws, map[string]string{restoreJournal + ".tmp": `{"id":"r","phase":"out"}`})
		}, wantOld},
		{"committed, nothing moved", func(t *testing.T, ws string) {
			writeWS(t, filepath.Join(ws, restorePrefix+"r"), newFiles)
			writeWS(t, ws, map[string]string{restoreJournal: `{"id":"r","phase":"out"}`})
		}, wantNew},
		{"half of the old moved out", func(t *testing.T, ws string) {
			writeWS(t, filepath.Join(ws, restorePrefix+"r"), newFiles)
			writeWS(t, ws, map[string]string{restoreJournal: `{"id":"r","phase":"out"}`})
			mustRename(t, filepath.Join(ws, "a"), filepath.Join(ws, oldPrefix+"r", "a"))
		}, wantNew},
		{"half of the new moved in", func(t *testing.T, ws string) {
			writeWS(t, filepath.Join(ws, restorePrefix+"r"), newFiles)
			writeWS(t, ws, map[string]string{restoreJournal: `{"id":"r","phase":"in"}`})
			for _, n := range []string{"a", "b", "c"} {
				mustRename(t, filepath.Join(ws, n), filepath.Join(ws, oldPrefix+"r", n))
			}
			mustRename(t, filepath.Join(ws, restorePrefix+"r", "a"), filepath.Join(ws, "a"))
		}, wantNew},
		{"swapped, old not yet removed", func(t *testing.T, ws string) {
			for _, n := range []string{"a", "b", "c"} {
				mustRename(t, filepath.Join(ws, n), filepath.Join(ws, oldPrefix+"r", n))
			}
			writeWS(t, ws, newFiles)
		}, wantNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			writeWS(t, ws, oldFiles)
			if err := os.MkdirAll(filepath.Join(ws, oldPrefix+"r"), 0o700); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, ws)
			rs := &restorer{ws: ws, log: slog.Default()}
			if err := rs.recover(); err != nil {
				t.Fatalf("recover: %v", err)
			}
			if diff := cmp.Diff(tc.want, listWS(t, ws)); diff != "" {
				t.Errorf("workspace after recovery (-want +got):\n%s", diff)
			}
		})
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
