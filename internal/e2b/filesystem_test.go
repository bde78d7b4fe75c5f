package e2b

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/wire"
)

func TestToEntryInfo(t *testing.T) {
	t.Parallel()
	mt := time.Date(2026, 12, 2, 10, 0, 0, 5, time.UTC)
	for _, tt := range []struct {
		in   wire.FileEntry
		want entryInfo
	}{
		{
			wire.FileEntry{FileInfo: wire.FileInfo{Name: "a.txt", Path: "/home/user/a.txt", Type: "file", Size: 3, Mode: 0o644, ModTime: mt}, UID: 1000, GID: 1000, Owner: "user", Group: "user"},
			entryInfo{Name: "a.txt", Type: "FILE_TYPE_FILE", Path: "/home/user/a.txt", Size: 3, Mode: 0o644, Permissions: "-rw-r--r--", Owner: "user", Group: "user", ModifiedTime: "2026-12-02T10:00:00.000000005Z"},
		},
		{
			wire.FileEntry{FileInfo: wire.FileInfo{Name: "d", Path: "/d", Type: "dir", Mode: 0o1777, ModTime: mt}, Owner: "root", Group: "root"},
			entryInfo{Name: "d", Type: "FILE_TYPE_DIRECTORY", Path: "/d", Mode: 0o777, Permissions: "dtrwxrwxrwx", Owner: "root", Group: "root", ModifiedTime: "2026-12-02T10:00:00.000000005Z"},
		},
		{
			wire.FileEntry{FileInfo: wire.FileInfo{Name: "l", Path: "/x/l", Type: "symlink", Mode: 0o777, LinkTarget: "../y"}, Owner: "root", Group: "root"},
			entryInfo{Name: "l", Type: "FILE_TYPE_SYMLINK", Path: "/x/l", Mode: 0o777, Permissions: "Lrwxrwxrwx", Owner: "root", Group: "root", SymlinkTarget: "/y"},
		},
	} {
		if d := cmp.Diff(tt.want, *toEntryInfo(tt.in)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.in.Path, d)
		}
	}
}

func TestToFilesystemEvents(t *testing.T) {
	t.Parallel()
	root := "/home/user/w"
	for _, tt := range []struct {
		ev   wire.WatchEvent
		want []filesystemEvent
	}{
		{wire.WatchEvent{Type: wire.WatchCreated, Path: root + "/a.txt"}, []filesystemEvent{{Name: "a.txt", Type: "EVENT_TYPE_CREATE"}}},
		{wire.WatchEvent{Type: wire.WatchModified, Path: root + "/sub/b"}, []filesystemEvent{{Name: "sub/b", Type: "EVENT_TYPE_WRITE"}}},
		{wire.WatchEvent{Type: "chmod", Path: root + "/a.txt"}, []filesystemEvent{{Name: "a.txt", Type: "EVENT_TYPE_CHMOD"}}},
		{wire.WatchEvent{Type: wire.WatchDeleted, Path: root + "/a.txt"}, []filesystemEvent{{Name: "a.txt", Type: "EVENT_TYPE_REMOVE"}}},
		{wire.WatchEvent{Type: wire.WatchRenamed, OldPath: root + "/a", Path: root + "/b"}, []filesystemEvent{{Name: "a", Type: "EVENT_TYPE_RENAME"}, {Name: "b", Type: "EVENT_TYPE_CREATE"}}},
		{wire.WatchEvent{Type: wire.WatchCreated, Path: "/home/user/wx"}, nil},
		// An atomic write by the agent: its temp file is not seen, its rename is the target's create and write.
		{wire.WatchEvent{Type: wire.WatchCreated, Path: root + "/.a.txt.hotcell-tmp-123"}, nil},
		{wire.WatchEvent{Type: "chmod", Path: root + "/.a.txt.hotcell-tmp-123"}, nil},
		{wire.WatchEvent{Type: wire.WatchRenamed, OldPath: root + "/.a.txt.hotcell-tmp-123", Path: root + "/a.txt"}, []filesystemEvent{{Name: "a.txt", Type: "EVENT_TYPE_CREATE"}, {Name: "a.txt", Type: "EVENT_TYPE_WRITE"}}},
		{wire.WatchEvent{Type: wire.WatchCreated, Path: root + "/.x.hotcell-tmp-12a"}, []filesystemEvent{{Name: ".x.hotcell-tmp-12a", Type: "EVENT_TYPE_CREATE"}}},
		{wire.WatchEvent{Type: wire.WatchDeleted, Path: root}, nil},
		{wire.WatchEvent{Type: wire.WatchOverflow}, nil},
		{wire.WatchEvent{Type: wire.WatchKeepalive}, nil},
	} {
		if d := cmp.Diff(tt.want, toFilesystemEvents(root, tt.ev)); d != "" {
			t.Errorf("%+v (-want +got):\n%s", tt.ev, d)
		}
	}
	if got := toFilesystemEvents("/", wire.WatchEvent{Type: wire.WatchCreated, Path: "/etc"}); len(got) != 1 || got[0].Name != "etc" {
		t.Errorf("under /: %+v", got)
	}
}

func TestResolveForUser(t *testing.T) {
	t.Parallel()
	c := &fsCall{user: wire.Account{Name: "user", Home: "/home/user"}}
	for in, want := range map[string]string{
		"a.txt": "/home/user/a.txt", "~": "/home/user", "~/x/../y": "/home/user/y",
		"/tmp/../etc": "/etc", "../../x": "/x",
	} {
		if got, err := c.resolve("path", in); err != nil || got != want {
			t.Errorf("resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "~root/x", "a\x00b"} {
		if _, err := c.resolve("path", bad); err == nil {
			t.Errorf("resolve(%q) accepted", bad)
		}
	}
}
