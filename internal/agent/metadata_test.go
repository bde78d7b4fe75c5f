package agent

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/testenv"
)

func TestWriteMetadata(t *testing.T) {
	t.Parallel()
	a := newAccountsAgent(t)
	probe := filepath.Join(a.ws, "probe")
	a.call("PUT", "/v1/files", q("path", "probe"), "x", 200, nil)
	if err := unix.Lsetxattr(probe, "user.e2b.probe", []byte("1"), 0); err != nil {
		testenv.SkipOrFail(t, "the test's file system keeps no user xattrs: %v", err)
	}
	meta := func(m map[string]string) string { b, _ := json.Marshal(m); return string(b) }
	a.call("PUT", "/v1/files", q("path", "m.txt", "metadata", meta(map[string]string{"author": "ann", "purpose": "a test"})), "one", 200, nil)
	got, _ := readEntries(t, a, "m.txt", "0")
	if len(got) != 1 || got[0].Metadata != nil {
		t.Errorf("entries without metadata=true: %+v", got)
	}
	entry := func() map[string]string {
		resp := a.do(t.Context(), "GET", "/v1/fs/entries", q("path", "m.txt", "depth", "0", "metadata", "true"), nil)
		defer resp.Body.Close()
		var l struct {
			Entry struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"entry"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
			t.Fatal(err)
		}
		return l.Entry.Metadata
	}
	if d := cmp.Diff(map[string]string{"author": "ann", "purpose": "a test"}, entry()); d != "" {
		t.Errorf("metadata (-want +got):\n%s", d)
	}
	// A rewrite keeps what it does not set, and sets what it does.
	a.call("PUT", "/v1/files", q("path", "m.txt", "metadata", meta(map[string]string{"purpose": "changed"})), "two", 200, nil)
	a.call("PUT", "/v1/files", q("path", "m.txt"), "three", 200, nil)
	if d := cmp.Diff(map[string]string{"author": "ann", "purpose": "changed"}, entry()); d != "" {
		t.Errorf("metadata after rewrites (-want +got):\n%s", d)
	}
	a.callErr("PUT", "/v1/files", q("path", "bad.txt", "metadata", `{"a b":"x"}`), "x", 400, "key")
	a.callErr("PUT", "/v1/files", q("path", "bad.txt", "metadata", `{"k":"line\n"}`), "x", 400, "printable")
	a.callErr("PUT", "/v1/files", q("path", "bad.txt", "metadata", `[1]`), "x", 400, "JSON object")
}
