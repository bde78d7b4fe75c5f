package agent

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMountPoints(t *testing.T) {
	t.Parallel()
	table := `22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l
23 22 0:22 / /proc rw,nosuid - proc proc rw
24 22 0:5 / /dev rw - tmpfs tmpfs rw
25 22 8:1 /var/lib/kubelet/pods/x/etc-hosts /etc/hosts rw - ext4 /dev/sda1 rw
26 22 8:1 /w /my\040workspace rw - ext4 /dev/sda1 rw
27 22 8:1 /b /odd\134name\0 rw - ext4 /dev/sda1 rw
`
	got, err := mountPoints(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/", "/proc", "/dev", "/etc/hosts", "/my workspace", `/odd\name\0`}
	if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
		t.Errorf("mount points: got %q, want %q", keys, want)
	}
	if _, err := mountPoints(strings.NewReader("22 1 0:21 /\n")); err == nil {
		t.Error("a line of 4 fields: got no error")
	}
}

// TestRootfsTarLeavesMountsOut: the root filesystem's tar keeps a mount
// point's directory, empty, and leaves out what is mounted on it and a file
// mounted over; the rest is whole.
func TestRootfsTarLeavesMountsOut(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for name, body := range map[string]string{
		"etc/passwd":          "root:x:0:0::/root:/bin/sh\n",
		"etc/hosts":           "mounted over\n",
		"workspace/secret":    "the workspace goes to a backup\n",
		"proc/1/status":       "not a file of the image\n",
		"opt/made/mark":       "kept\n",
		"opt/workspace-alike": "kept too\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mounts := map[string]bool{}
	for _, m := range []string{"etc/hosts", "workspace", "proc"} {
		mounts[filepath.Join(root, m)] = true
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, root, mounts); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	want := map[string]string{
		"etc/": "", "etc/passwd": "root:x:0:0::/root:/bin/sh\n",
		"workspace/": "", "proc/": "",
		"opt/": "", "opt/made/": "", "opt/made/mark": "kept\n", "opt/workspace-alike": "kept too\n",
	}
	if !maps.Equal(got, want) {
		t.Errorf("tar entries:\n got %q\nwant %q", got, want)
	}
}
