package agent

import (
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func (a *testAgent) read(path string, extra ...string) []byte {
	a.t.Helper()
	resp := a.do(a.t.Context(), "GET", "/v1/files", q(append([]string{"path", path}, extra...)...), nil)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("read %s: %v", path, err)
	}
	if resp.StatusCode != 200 {
		a.t.Fatalf("read %s: status %d: %s", path, resp.StatusCode, data)
	}
	return data
}

func TestFilesLargeRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	data := make([]byte, 5<<20+17)
	_, _ = rand.Read(data)
	var res wire.WriteResult
	a.call("PUT", "/v1/files", q("path", "big/nested/blob.bin"), data, 200, &res)
	want := wire.WriteResult{Path: filepath.Join(a.ws, "big/nested/blob.bin"), Size: int64(len(data))}
	if d := cmp.Diff(want, res); d != "" {
		t.Errorf("write result (-want +got):\n%s", d)
	}
	if got := a.read("big/nested/blob.bin"); !bytesEqual(got, data) {
		t.Errorf("read back %d bytes, not the %d written", len(got), len(data))
	}
	fi, err := os.Stat(filepath.Join(a.ws, "big/nested/blob.bin"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", fi.Mode(), err)
	}
}

func TestFilesRange(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.call("PUT", "/v1/files", q("path", "r.txt"), "0123456789", 200, nil)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "0123456789"},
		{[]string{"offset", "3"}, "3456789"},
		{[]string{"length", "4"}, "0123"},
		{[]string{"offset", "8", "length", "5"}, "89"},
		{[]string{"offset", "10"}, ""},
		{[]string{"offset", "2", "length", "0"}, ""},
	}
	for _, tt := range tests {
		if got := string(a.read("r.txt", tt.args...)); got != tt.want {
			t.Errorf("read %v: got %q, want %q", tt.args, got, tt.want)
		}
	}
	errs := []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"offset", "-1"}, 400, "offset"},
		{[]string{"length", "x"}, 400, "length"},
		{[]string{"offset", "11"}, 400, "offset"},
	}
	for _, tt := range errs {
		a.callErr("GET", "/v1/files", q(append([]string{"path", "r.txt"}, tt.args...)...), nil, tt.status, tt.want)
	}
}

func TestFilesErrors(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	if err := os.Mkdir(filepath.Join(a.ws, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	a.callErr("GET", "/v1/files", q("path", "d"), nil, 400, "is a directory")
	a.callErr("GET", "/v1/files", q("path", "missing"), nil, 404, "no such file")
	a.callErr("GET", "/v1/files", nil, nil, 400, "path")
	a.callErr("GET", "/v1/files", q("path", "a\x00b"), nil, 400, "NUL")
	a.callErr("PUT", "/v1/files", q("path", "d"), "x", 400, "is a directory")
	a.callErr("PUT", "/v1/files", q("path", "f", "mode", "999"), "x", 400, "mode")
	if entries, _ := os.ReadDir(filepath.Join(a.ws, "d")); len(entries) != 0 {
		t.Errorf("write onto a directory left %v in it", entries)
	}
}

func TestFilesMode(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	p := filepath.Join(a.ws, "m")
	a.call("PUT", "/v1/files", q("path", "m", "mode", "0600"), "one", 200, nil)
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	// No mode: keep the existing file's.
	a.call("PUT", "/v1/files", q("path", "m"), "two", 200, nil)
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after rewrite %v, want 0600 kept", fi.Mode().Perm())
	}
	a.call("PUT", "/v1/files", q("path", "m", "mode", "755"), "three", 200, nil)
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	if got := string(a.read("m")); got != "three" {
		t.Errorf("got %q, want three", got)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("client broke")
	}
	n := min(len(p), r.n)
	clear(p[:n])
	r.n -= n
	return n, nil
}

// A body that fails mid-stream must leave the old file and no temp file.
func TestFilesWriteFailureKeepsOld(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	h := NewHandler(Options{Workspace: ws})
	p := filepath.Join(ws, "keep.txt")
	if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("PUT", "/v1/files?path=keep.txt", &failingReader{n: 100 << 10})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "read request body") {
		t.Errorf("status %d body %s, want 400 naming the body", rec.Code, rec.Body)
	}
	if data, _ := os.ReadFile(p); string(data) != "old" {
		t.Errorf("file now %q, want old", data)
	}
	entries, _ := os.ReadDir(ws)
	for _, e := range entries {
		if strings.Contains(e.Name(), "hotcell-tmp") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
}

func TestFilesWriteThroughSymlink(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.call("PUT", "/v1/files", q("path", "real"), "a", 200, nil)
	if err := os.Symlink("real", filepath.Join(a.ws, "link")); err != nil {
		t.Fatal(err)
	}
	a.call("PUT", "/v1/files", q("path", "link"), "b", 200, nil)
	if fi, err := os.Lstat(filepath.Join(a.ws, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link replaced: %v %v", fi, err)
	}
	if got := string(a.read("real")); got != "b" {
		t.Errorf("target holds %q, want b", got)
	}
}

func TestFilesDelete(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.call("PUT", "/v1/files", q("path", "d/f"), "x", 200, nil)
	a.call("PUT", "/v1/files", q("path", "g"), "x", 200, nil)
	a.call("DELETE", "/v1/files", q("path", "g"), nil, 204, nil)
	a.callErr("DELETE", "/v1/files", q("path", "g"), nil, 404, "no such file")
	a.callErr("DELETE", "/v1/files", q("path", "d"), nil, 409, "not empty")
	a.callErr("DELETE", "/v1/files", q("path", "d", "recursive", "maybe"), nil, 400, "recursive")
	a.callErr("DELETE", "/v1/files", q("path", "/"), nil, 400, "refusing")
	a.callErr("DELETE", "/v1/files", q("path", a.ws), nil, 400, "workspace")
	a.callErr("DELETE", "/v1/files", q("path", "."), nil, 400, "workspace")
	a.call("DELETE", "/v1/files", q("path", "d", "recursive", "true"), nil, 204, nil)
	if _, err := os.Lstat(filepath.Join(a.ws, "d")); !os.IsNotExist(err) {
		t.Errorf("d still there: %v", err)
	}
}

func TestFS(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	var info wire.FileInfo
	a.call("POST", "/v1/fs/mkdir", nil, map[string]any{"path": "top", "mode": "0700"}, 200, &info)
	if info.Type != wire.FileTypeDir || info.Mode != 0o700 || info.Name != "top" {
		t.Errorf("mkdir: got %+v", info)
	}
	a.callErr("POST", "/v1/fs/mkdir", nil, wire.MkdirRequest{Path: "top"}, 409, "exists")
	a.call("POST", "/v1/fs/mkdir", nil, wire.MkdirRequest{Path: "top", Parents: true}, 200, nil)
	a.call("POST", "/v1/fs/mkdir", nil, wire.MkdirRequest{Path: "top/a/b/c", Parents: true}, 200, nil)
	a.callErr("POST", "/v1/fs/mkdir", nil, wire.MkdirRequest{Path: "x/y"}, 404, "no such file")
	a.call("PUT", "/v1/files", q("path", "top/file"), "hello", 200, nil)
	a.callErr("POST", "/v1/fs/mkdir", nil, wire.MkdirRequest{Path: "top/file", Parents: true}, 409, "file exists")
	a.callErr("POST", "/v1/fs/mkdir", nil, map[string]string{"path": "z", "mode": "8"}, 400, "mode")
	if err := os.Symlink("file", filepath.Join(a.ws, "top/zlink")); err != nil {
		t.Fatal(err)
	}

	var list wire.FileList
	a.call("GET", "/v1/fs/list", q("path", "top"), nil, 200, &list)
	var names []string
	for _, e := range list.Entries {
		names = append(names, e.Name+":"+e.Type+":"+e.LinkTarget)
	}
	if d := cmp.Diff([]string{"a:dir:", "file:file:", "zlink:symlink:file"}, names); d != "" {
		t.Errorf("list (-want +got):\n%s", d)
	}
	a.callErr("GET", "/v1/fs/list", q("path", "top/file"), nil, 400, "not a directory")
	a.callErr("GET", "/v1/fs/list", q("path", "nope"), nil, 404, "no such file")

	a.call("GET", "/v1/fs/stat", q("path", "top/zlink"), nil, 200, &info)
	if info.Type != wire.FileTypeSymlink || info.LinkTarget != "file" {
		t.Errorf("stat link: got %+v", info)
	}
	a.call("GET", "/v1/fs/stat", q("path", "top/file"), nil, 200, &info)
	if info.Size != 5 || info.Type != wire.FileTypeFile || info.Path != filepath.Join(a.ws, "top/file") {
		t.Errorf("stat file: got %+v", info)
	}
	a.callErr("GET", "/v1/fs/stat", q("path", "nope"), nil, 404, "no such file")

	a.call("PUT", "/v1/files", q("path", "other"), "other", 200, nil)
	a.call("POST", "/v1/fs/move", nil, wire.MoveRequest{From: "top/file", To: "moved/file2"}, 200, &info)
	if info.Name != "file2" || info.Size != 5 {
		t.Errorf("move: got %+v", info)
	}
	a.callErr("POST", "/v1/fs/move", nil, wire.MoveRequest{From: "moved/file2", To: "other"}, 409, "exists")
	a.call("POST", "/v1/fs/move", nil, wire.MoveRequest{From: "moved/file2", To: "other", Overwrite: true}, 200, nil)
	if got := string(a.read("other")); got != "hello" {
		t.Errorf("after overwrite: got %q, want hello", got)
	}
	a.callErr("POST", "/v1/fs/move", nil, wire.MoveRequest{From: "nope", To: "x"}, 404, "no such file")
	a.callErr("POST", "/v1/fs/move", nil, wire.MoveRequest{From: "top", To: "top/a/inside"}, 400, "itself")
	a.callErr("POST", "/v1/fs/move", nil, wire.MoveRequest{From: "", To: "x"}, 400, "from")
}
