package agent

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// newAccountsAgent is a test agent whose /etc has root and user (1000).
func newAccountsAgent(t *testing.T) *testAgent {
	t.Helper()
	etc := t.TempDir()
	passwd := "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken:x:nope:0::/:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n"
	group := "root:x:0:\nuser:x:1000:\n"
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "group"), []byte(group), 0o644); err != nil {
		t.Fatal(err)
	}
	return newTestAgent(t, func(o *Options) { o.EtcDir = etc })
}

func ownerOf(t *testing.T, p string) (int, int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

func TestLookupUser(t *testing.T) {
	t.Parallel()
	a := newAccountsAgent(t)
	var got wire.Account
	a.call("GET", "/v1/users/lookup", q("name", "user"), nil, 200, &got)
	if d := cmp.Diff(wire.Account{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}, got); d != "" {
		t.Errorf("user (-want +got):\n%s", d)
	}
	a.callErr("GET", "/v1/users/lookup", q("name", "nobody"), nil, 404, "no such user")
	a.callErr("GET", "/v1/users/lookup", q("name", "broken"), nil, 404, "no such user")
	a.callErr("GET", "/v1/users/lookup", nil, nil, 400, "required")
}

func TestWriteMkdirMoveAsUser(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t, "chown")
	a := newAccountsAgent(t)
	own := []string{"uid", "1000", "gid", "1000"}
	a.call("PUT", "/v1/files", q(append([]string{"path", "new/dir/f.txt"}, own...)...), "hi", 200, nil)
	for _, p := range []string{"new", "new/dir", "new/dir/f.txt"} {
		if u, g := ownerOf(t, filepath.Join(a.ws, p)); u != 1000 || g != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", p, u, g)
		}
	}
	// Without an owner a write keeps root's (the test's) ids.
	a.call("PUT", "/v1/files", q("path", "root.txt"), "hi", 200, nil)
	if u, _ := ownerOf(t, filepath.Join(a.ws, "root.txt")); u != os.Geteuid() {
		t.Errorf("root.txt owned by %d", u)
	}
	// Writing as the user over root's file gives it to the user.
	a.call("PUT", "/v1/files", q(append([]string{"path", "root.txt"}, own...)...), "again", 200, nil)
	if u, _ := ownerOf(t, filepath.Join(a.ws, "root.txt")); u != 1000 {
		t.Errorf("rewritten root.txt owned by %d, want 1000", u)
	}
	a.call("POST", "/v1/fs/mkdir", q(own...), wire.MkdirRequest{Path: "m/n", Parents: true}, 200, nil)
	a.call("POST", "/v1/fs/mkdir", q(own...), wire.MkdirRequest{Path: "single"}, 200, nil)
	a.call("POST", "/v1/fs/move", q(own...), wire.MoveRequest{From: "root.txt", To: "moved/into/r.txt"}, 200, nil)
	for _, p := range []string{"m", "m/n", "single", "moved", "moved/into"} {
		if u, g := ownerOf(t, filepath.Join(a.ws, p)); u != 1000 || g != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", p, u, g)
		}
	}
	a.callErr("PUT", "/v1/files", q("path", "x", "uid", "1000"), "x", 400, "gid")
	a.callErr("PUT", "/v1/files", q("path", "x", "uid", "-1", "gid", "0"), "x", 400, "uid")
}

func readEntries(t *testing.T, a *testAgent, path string, depth string) ([]wire.FileEntry, wire.FileEntryLine) {
	t.Helper()
	resp := a.do(t.Context(), "GET", "/v1/fs/entries", q("path", path, "depth", depth), nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("entries %s: status %d", path, resp.StatusCode)
	}
	var out []wire.FileEntry
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l wire.FileEntryLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		if l.Entry == nil {
			return out, l
		}
		out = append(out, *l.Entry)
	}
	t.Fatalf("entries %s: no final line", path)
	return nil, wire.FileEntryLine{}
}

func TestEntriesDepth(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t, "chown")
	a := newAccountsAgent(t)
	for _, p := range []string{"d/a.txt", "d/sub/b.txt", "d/sub/deep/c.txt"} {
		a.call("PUT", "/v1/files", q("path", p, "uid", "1000", "gid", "1000"), "x", 200, nil)
	}
	if err := os.Symlink("sub", filepath.Join(a.ws, "d/link")); err != nil {
		t.Fatal(err)
	}
	names := func(es []wire.FileEntry) []string {
		var s []string
		for _, e := range es {
			rel, _ := filepath.Rel(a.ws, e.Path)
			s = append(s, rel+":"+e.Type)
		}
		return s
	}
	for _, tt := range []struct {
		depth string
		want  []string
	}{
		{"0", []string{"d:dir"}},
		{"1", []string{"d/a.txt:file", "d/link:symlink", "d/sub:dir"}},
		{"2", []string{"d/a.txt:file", "d/link:symlink", "d/sub:dir", "d/sub/b.txt:file", "d/sub/deep:dir"}},
		{"9", []string{"d/a.txt:file", "d/link:symlink", "d/sub:dir", "d/sub/b.txt:file", "d/sub/deep:dir", "d/sub/deep/c.txt:file"}},
	} {
		got, end := readEntries(t, a, "d", tt.depth)
		if !end.End {
			t.Errorf("depth %s: last line %+v, want end", tt.depth, end)
		}
		if d := cmp.Diff(tt.want, names(got)); d != "" {
			t.Errorf("depth %s (-want +got):\n%s", tt.depth, d)
		}
	}
	got, _ := readEntries(t, a, "d/a.txt", "0")
	if len(got) != 1 || got[0].Owner != "user" || got[0].Group != "user" || got[0].UID != 1000 || got[0].Size != 1 {
		t.Errorf("entry %+v, want user:user, 1 byte", got)
	}
	// A listing through a link to a directory lists the target under the link's name.
	got, _ = readEntries(t, a, "d/link", "1")
	if d := cmp.Diff([]string{"d/link/b.txt:file", "d/link/deep:dir"}, names(got)); d != "" {
		t.Errorf("through link (-want +got):\n%s", d)
	}
	a.callErr("GET", "/v1/fs/entries", q("path", "d/a.txt", "depth", "1"), nil, 400, "not a directory")
	a.callErr("GET", "/v1/fs/entries", q("path", "missing", "depth", "1"), nil, 404, "missing")
}

func TestWatchAttrib(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	f := filepath.Join(a.ws, "f.txt")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startWatch(t, a, q("path", a.ws, "attrib", "true"))
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	if ev := s.next(5 * time.Second); ev.Type != watchChmod || ev.Path != f {
		t.Errorf("event %+v, want chmod of %s", ev, f)
	}
	if err := os.WriteFile(f, []byte("more"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ev := s.next(5 * time.Second); ev.Type != wire.WatchModified {
		t.Errorf("event %+v, want modified", ev)
	}
}
